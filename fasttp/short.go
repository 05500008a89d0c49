package fasttp

import (
	"fmt"
	"slices"
)

// ShortJumpLen is the length of the `jmp rel8` a short-jump site gets.
const ShortJumpLen = 2

// ShortReach is the farthest a `jmp rel8` goes forward: 127 bytes after
// its end.
const ShortReach = 127

// ShortCodeLen is how many bytes from the site ShortSite needs to see all
// the padding a short jump can reach forward.
const ShortCodeLen = ShortJumpLen + ShortReach + JumpLen + 16

// ShortBackLen is how many bytes before the site ShortSites needs to see
// all the padding a short jump can reach backward (128 bytes before its
// end), with the ret or jmp before it.
const ShortBackLen = 128 - ShortJumpLen + 2*MaxInsnLen

// ShortSite plans a short jump at addr (E9Patch's neighbour tactic, with
// alignment padding as the neighbour): the first instruction, of 2 bytes
// or more (or a 1-byte ret followed by padding; or any other 1-byte
// instruction, whose short jump keeps the next byte as its displacement:
// keptShortSlot), becomes a `jmp rel8` to
// a slot of JumpLen dead bytes further on — the nops or int3s after a
// ret or jmp up to an 8- or 16-byte boundary (deadPadding), which
// nothing executes — and the slot holds the `jmp rel32` to the pad. Nothing
// traps and the next instructions keep their bytes; the pad goes in an
// arena (no forced bytes). code holds the bytes from addr (ShortCodeLen
// suffice; fewer limit the reach).
//
// The slot is found by decoding forward from addr. The first ret or jmp
// reached by falling through from addr is certainly an instruction; later
// ones (after a label) count only when isCode vouches for them, so that
// "padding" is never the middle of something else.
func ShortSite(code []byte, addr uint64, isCode CodeOracle) (Site, error) {
	sites, err := ShortSites(nil, code, addr, isCode)
	if err != nil {
		return Site{}, err
	}
	return sites[0], nil
}

// ShortSites returns ShortSite's site with every slot within reach
// (JumpLen bytes each): in padding forward, then in padding backward (in
// back, the bytes just before addr: ShortBackLen suffice; the ret or jmp
// the padding follows must be vouched for by isCode, as code cannot be
// decoded backwards), then inside neighbours (hostSites). Tracepoints
// nearby share the padding.
func ShortSites(back, code []byte, addr uint64, isCode CodeOracle) ([]Site, error) {
	refuse := func(why string, args ...any) ([]Site, error) {
		return nil, fmt.Errorf("plan site %#x: %w: "+why, append([]any{addr, ErrSiteRefused}, args...)...)
	}
	in, err := DecodeInsn(code, addr)
	if err != nil {
		return refuse("%w", err)
	}
	if _, err := RelocateInsn(in, in.Addr); err != nil {
		return refuse("%w", err)
	}
	s := Site{Addr: addr, Insns: []Insn{in}, Covered: in.Len}
	// want, when not 0, is the one slot a kept successor byte allows.
	var want uint64
	if in.Len < ShortJumpLen {
		n, ok := deadPadding(code[in.Len:], in.Next())
		switch {
		case in.Kind == KindRet && ok && n >= ShortJumpLen-in.Len:
			s.Covered, s.Dead = ShortJumpLen, ShortJumpLen-in.Len
		case len(code) >= ShortJumpLen:
			want = keptShortSlot(code, addr)
			s.Keep = ShortJumpLen - in.Len
		default:
			return refuse("a %d-byte instruction not followed by padding", in.Len)
		}
	}
	foot := s.Covered + s.Keep // the bytes at addr the short jump occupies
	if in.RelSize > 0 && in.Target > addr && in.Target < addr+uint64(foot) {
		return refuse("the %v targets %#x inside the short jump", in.Kind, in.Target)
	}
	var out []Site
	add := func(slot uint64, host *Site) {
		if want == 0 || slot == want {
			v := s
			v.Slot, v.Host = slot, host
			out = append(out, v)
		}
	}
	runs := append(findPadding(code, addr, foot, isCode), backPadding(back, code, addr, isCode)...)
	if want == 0 {
		for _, slot := range slotsIn(runs) {
			add(slot, nil)
		}
	} else if slices.ContainsFunc(runs, func(r Range) bool { return r.Start <= want && want+JumpLen <= r.End }) {
		add(want, nil) // any JumpLen bytes of a run will do
	}
	for _, host := range hostSites(back, code, addr, foot, isCode) {
		h := host
		add(h.Addr+JumpLen, &h)
	}
	if len(out) == 0 && want != 0 {
		return refuse("a 1-byte instruction whose short jump, keeping the next byte, goes to %#x: no padding or neighbour there", want)
	}
	if len(out) == 0 {
		return refuse("no %d bytes of padding and no instruction of %d bytes within a short jump's reach", JumpLen, HostMinLen)
	}
	return out, nil
}

// keptShortSlot is where a short jump replacing a 1-byte instruction at
// addr goes when its displacement byte is the next instruction's first
// byte, left as it is (E9Patch's successor-preserving pun, with a rel8):
// a thread arriving at that instruction runs it unchanged, and the pad
// returns to it. Only a slot at exactly that address will do.
func keptShortSlot(code []byte, addr uint64) uint64 {
	return addr + ShortJumpLen + uint64(int64(int8(code[1])))
}

// HostMinLen is the shortest neighbour that can hold a slot: its own
// jump, then the slot's.
const HostMinLen = 2 * JumpLen

// hostSites returns plain-jump sites of the instructions of HostMinLen
// bytes or more around addr whose bytes after their own jump (the slot)
// a short jump at addr reaches, outside its covered bytes: forward ones
// found by decoding from addr (after a ret or jmp, vouched for by
// isCode), then backward ones in back (vouched for by isCode). Evicted
// to a trampoline by their own jump, such a neighbour lends the rest of
// its bytes (E9Patch's neighbour eviction).
func hostSites(back, code []byte, addr uint64, covered int, isCode CodeOracle) []Site {
	var out []Site
	consider := func(buf []byte, at uint64) {
		slot := at + JumpLen
		if slot+128 < addr+ShortJumpLen || slot > addr+ShortJumpLen+ShortReach {
			return
		}
		h, err := planSite(buf, at, 0)
		if err != nil || len(h.Puns) > 0 || h.Dead > 0 || h.Covered < HostMinLen ||
			(at < addr+uint64(covered) && at+uint64(h.Covered) > addr) {
			return
		}
		out = append(out, h)
	}
	fellThrough := true
	for off := 0; off <= ShortJumpLen+ShortReach && off < len(code); {
		in, err := DecodeInsn(code[off:], addr+uint64(off))
		if err != nil || !(fellThrough || isCode != nil && isCode(in.Addr)) {
			break
		}
		if in.Len >= HostMinLen && off >= covered {
			consider(code[off:], in.Addr)
		}
		if in.NoFallThrough() {
			fellThrough = false
		}
		off += in.Len
	}
	if isCode == nil {
		return out
	}
	start := addr - uint64(len(back))
	for p := len(back) - HostMinLen; p >= 0; p-- {
		at := start + uint64(p)
		if !isCode(at) {
			continue
		}
		if in, err := DecodeInsn(back[p:], at); err == nil && in.Len >= HostMinLen && p+in.Len <= len(back) {
			consider(back[p:p+in.Len], at)
		}
	}
	return out
}

// slotsIn returns the slots of JumpLen bytes each run of padding holds,
// JumpLen apart from its start.
func slotsIn(runs []Range) []uint64 {
	var slots []uint64
	for _, r := range runs {
		for s := r.Start; s+JumpLen <= r.End; s += JumpLen {
			slots = append(slots, s)
		}
	}
	return slots
}

// findPadding returns the runs of padding after a ret or jmp, from
// addr+covered on, where a slot can start within a short jump's reach
// of addr (a run may end beyond the reach: the slot's start is what the
// jump reaches), in order (see ShortSite).
func findPadding(code []byte, addr uint64, covered int, isCode CodeOracle) []Range {
	var runs []Range
	limit := ShortJumpLen + ShortReach // the slot's start, at most
	fellThrough := true                // every instruction so far follows addr's
	for off := 0; off <= limit && off < len(code); {
		in, err := DecodeInsn(code[off:], addr+uint64(off))
		if err != nil {
			return runs
		}
		off += in.Len
		if !in.NoFallThrough() {
			continue
		}
		certain := fellThrough || (isCode != nil && isCode(in.Addr))
		fellThrough = false
		n, ok := deadPadding(code[off:], addr+uint64(off))
		if !ok {
			if !certain {
				return runs // the decode may be off from here on
			}
			continue
		}
		start, end := max(off, covered), off+n
		end = min(end, limit+JumpLen) // slots start within reach
		if certain && end-start >= JumpLen {
			runs = append(runs, Range{addr + uint64(start), addr + uint64(end)})
		}
		off += n
	}
	return runs
}

// backPadding returns the runs of padding before addr (back holds the
// bytes before it) where a slot a short jump at addr reaches fits,
// nearest first: padding after a ret or jmp isCode vouches for, cut to
// what the jump reaches and to end at or before addr.
func backPadding(back, code []byte, addr uint64, isCode CodeOracle) []Range {
	if isCode == nil || len(back) == 0 {
		return nil
	}
	start := addr - uint64(len(back))
	buf := append(append([]byte(nil), back...), code[:min(len(code), 16)]...)
	lowest := addr + ShortJumpLen - 128 // a rel8's farthest reach back
	var runs []Range
	for p := len(back) - 1; p >= 0; p-- {
		at := start + uint64(p)
		if !isCode(at) {
			continue
		}
		in, err := DecodeInsn(buf[p:], at)
		if err != nil || p+in.Len > len(back) || !in.NoFallThrough() {
			continue
		}
		end := p + in.Len
		n, ok := deadPadding(buf[end:], start+uint64(end))
		if !ok {
			continue
		}
		lo, hi := max(start+uint64(end), lowest), min(start+uint64(end+n), addr)
		if hi >= lo+JumpLen {
			runs = append(runs, Range{lo, hi})
		}
	}
	return runs
}
