package fasttp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	"gotpstub/fasttp/a64"
	"gotpstub/tracing"
)

// a64TailRoom is the room after an arm64 pad for its tail: the
// relocated instruction (at most a64.MaxWords words) and the branch back.
const a64TailRoom = 4 * (a64.MaxWords + 1)

// placeA64 places tp's arm64 jump: one `b pad` over the one instruction
// at tp.Addr (a64.PlanSiteWith), the pad and its tail (the instruction
// relocated, then `b tp.Addr+4`) in an arena within the b's ±128 MB.
//
// The pad and tail are written first, the b last, with every thread
// stopped: one aligned 4-byte store, through /proc/PID/mem, whose write
// the kernel follows with the cache maintenance instruction fetch needs
// (arm64's copy_to_user_page cleans the data cache and invalidates the
// instruction cache for the range), so a thread resumed later fetches
// either the old word or the b, and pad and tail as written. With
// threads running (non-stop and live patching: the live protocol is
// x86-64's) the tracepoint is a trap instead.
func (in *Installer) placeA64(tp *tracing.Tracepoint, acts *padActions) error {
	if tp.Addr%4 != 0 {
		return fmt.Errorf("address %#x is not 4-byte aligned", tp.Addr)
	}
	if in.proc.ThreadsRunning() {
		return errors.New("threads are running: arm64 jumps go in with the program stopped (live patching is x86-64 only)")
	}
	var code [4]byte
	if n, err := in.readCode(tp.Addr, code[:]); n != len(code) {
		return fmt.Errorf("reading the code: %w", err)
	}
	word := binary.LittleEndian.Uint32(code[:])
	if _, err := a64.Decode(word, tp.Addr); err != nil {
		return err // refused before any pad memory is taken
	}
	if in.trapsWithin(tp.Addr, 4) {
		return errors.New("another tracepoint shares its bytes")
	}
	guarded, err := in.btiGuarded(tp.Addr)
	if err != nil {
		return err
	}

	in.mu.Lock()
	defer in.mu.Unlock()
	spec, slot, reused, pad, err := in.newPadLocked(tp, acts)
	if err != nil {
		return err
	}
	padLen := align16(uint64(len(pad.Code)))
	base, err := in.arenaSpaceLocked(tp.Addr, padLen+a64TailRoom)
	if err != nil {
		return err
	}
	spec.Addr, spec.TailAddr = base, base+padLen
	plan, err := a64.PlanSiteWith(tp.Addr, word, spec.Addr, spec.TailAddr, a64.SiteOptions{Guarded: guarded})
	if err == nil {
		err = pad.Place(spec.Addr, spec.TailAddr)
	}
	if err != nil {
		in.unreserveArenaLocked(base, padLen+a64TailRoom)
		return err
	}
	tail := make([]byte, 4*len(plan.Tail))
	for i, w := range plan.Tail {
		binary.LittleEndian.PutUint32(tail[4*i:], w)
	}
	if err := in.writePad(base, pad.Code, padLen, tail, align16(padLen+a64TailRoom)); err != nil {
		return err
	}
	in.readySlotLocked(tp, slot, reused, pad)
	s := &jumpSite{tp: tp, slot: slot, site: WordSite(tp.Addr, 4), padLen: len(pad.Code), padFaults: slices.Clone(pad.Faults), padAddr: base, entry: base,
		heads: map[uint64]uint64{tp.Addr: spec.TailAddr}, traceTime: acts.traceTime, compact: spec.Compact,
		chunk: Range{base, base + align16(padLen+a64TailRoom)}}
	if err := in.insertPatch(tp.Addr, binary.LittleEndian.AppendUint32(nil, plan.Patch)); err != nil {
		return fmt.Errorf("writing the jump: %w", err)
	}
	s.patched = true
	in.commitSiteLocked(s, reused)
	return nil
}

// btiGuarded reports whether the code at addr lies in BTI-guarded pages
// (/proc/PID/smaps, read again when addr is in no mapping read before:
// a library loaded since).
func (in *Installer) btiGuarded(addr uint64) (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if g, ok := guardAt(in.guards, addr); ok {
		return g.bt, nil
	}
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", in.proc.Pid()))
	if err != nil {
		return false, fmt.Errorf("reading the memory map: %w", err)
	}
	in.guards = parseGuarded(smaps)
	g, ok := guardAt(in.guards, addr)
	if !ok {
		return false, fmt.Errorf("%#x is in no executable mapping", addr)
	}
	return g.bt, nil
}

// refuseSite says why no tracepoint, jump or trap, may go at addr: it
// lies in an atomic sequence (inAtomicSequence), where either would
// keep the loop from ever completing.
func (in *Installer) refuseSite(addr uint64) error {
	if in.inAtomicSequence(addr) {
		return errors.New(a64.ErrAtomicSequence)
	}
	return nil
}

// inAtomicSequence reports whether the instruction at addr lies in an
// atomic sequence, a load-exclusive to its store-exclusive
// (a64.AtomicSequence),
// from the a64.ExclusiveSpan words before it (as many as can be read)
// and as many after.
func (in *Installer) inAtomicSequence(addr uint64) bool {
	const n = a64.ExclusiveSpan
	var before []uint32 // nearest first
	var w [4]byte
	for k := uint64(1); k <= n && addr >= 4*k; k++ {
		if m, _ := in.readCode(addr-4*k, w[:]); m != len(w) {
			break
		}
		before = append(before, binary.LittleEndian.Uint32(w[:]))
	}
	after := make([]byte, 4*(n+1))
	m, _ := in.readCode(addr, after)
	words := make([]uint32, 0, len(before)+m/4)
	for i := len(before) - 1; i >= 0; i-- {
		words = append(words, before[i])
	}
	for i := 0; i+4 <= m; i += 4 {
		words = append(words, binary.LittleEndian.Uint32(after[i:]))
	}
	return len(words) > len(before) && a64.AtomicSequence(words)[len(before)]
}
