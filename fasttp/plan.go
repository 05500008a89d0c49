package fasttp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// JumpLen is the length of the `jmp rel32` written at a fast tracepoint.
const JumpLen = 5

// Int3 is the breakpoint opcode a punned rel32 byte must hold.
const Int3 = 0xcc

// ErrSiteRefused is wrapped by every PlanSite error: the site cannot take a
// jump and should use a trap tracepoint instead.
var ErrSiteRefused = errors.New("site cannot take a 5-byte jump")

// Site is the plan for patching a `jmp rel32` over the instruction at Addr.
//
// The jump overwrites the first Covered bytes (JumpLen bytes of jump; any
// remaining bytes of the last covered instruction are filler). Insns are the
// covered instructions, which run relocated in the pad area.
//
// Instruction punning: when a covered instruction other than the first
// starts at offset 1..4 (inside the jump), a thread may still arrive there
// (a branch target, a return address, or a thread that was stopped there).
// The rel32 byte at that offset must then be int3 (0xcc), so such a thread
// traps and the stub can move it to the relocated copy of that instruction
// (RelocateRun's heads). Puns lists those offsets; Forced maps the rel32
// byte index (offset-1, 0..3) to the value it must have (always Int3), and
// FindPadAddr only returns pad addresses whose rel32 has those bytes.
type Site struct {
	// Addr is the tracepoint address, where the jump goes.
	Addr uint64
	// Insns are the instructions the jump covers, in order; their total
	// length is Covered (>= JumpLen).
	Insns []Insn
	// Covered is the number of bytes from Addr the jump replaces: those
	// of Insns, then Dead bytes of padding.
	Covered int
	// Dead is the number of bytes of alignment padding after Insns the
	// jump covers (see deadPadding): when the last instruction is an
	// unconditional transfer (ret, jmp), the bytes after it up to an
	// aligned boundary are nops or int3s nothing executes.
	Dead int
	// Puns are the offsets (1..4) inside the jump where a covered
	// instruction other than the first starts.
	Puns []int
	// Forced maps rel32 byte index (0..3, i.e. offset-Prefix-1) to the
	// value it must have: Int3 for each pun.
	Forced map[int]byte
	// Keep is the number of bytes of the following instructions the jump
	// keeps as they are (a successor-preserving pun, KeepSite): its rel32
	// ends with them, so a thread arriving at those instructions runs them
	// unchanged, and the pad returns to them. 0 for the other shapes.
	Keep int
	// Prefix is the number of redundant prefixes (PadPrefix) written
	// before the jump's opcode. Prefix padding moves the rel32 bytes
	// later, so the bytes puns force are lower ones: a non-PIE
	// executable's pads can then go near its low addresses (a forced top
	// byte of 0xcc means a displacement of about -0.85 GB).
	Prefix int
	// Evicted is the next instruction's own jump (plain or
	// successor-preserving) when the jump evicts it (EvictSite): the
	// jump covers the first instruction (Covered) and the first bytes of
	// Evicted's jump, which goes to a trampoline at Tramp running the
	// evicted instruction relocated.
	Evicted *Site
	// Tramp is the trampoline address of Evicted or Host, set when the
	// site is placed (FindPadAddrs, or the installer's arenas for Host).
	Tramp uint64
	// Slot is, for a short-jump site (ShortSite), the address of the
	// JumpLen bytes of dead padding holding the `jmp rel32` to the pad;
	// the Covered bytes at Addr hold a `jmp rel8` to it. 0 otherwise.
	Slot uint64
	// Host is, for a short-jump site whose slot lies in a neighbour
	// instruction (hostSites), that neighbour's plain jump to its
	// trampoline at Tramp; the slot follows that jump.
	Host *Site
	// Lead is, for a jump after a function entry's push (LeadSites), the
	// push's length: the tracepoint is at Addr-Lead (Start), the push
	// runs in place and the pad records the registers as before it. 0
	// for a jump at the tracepoint's address.
	Lead int
	// Word: the patch is one fixed-length instruction replacing exactly
	// the Covered bytes (arm64's `b pad` over one 4-byte instruction,
	// WordSite); none of the x86 shapes' fields above is used.
	Word bool
}

// insnCount is the number of instructions s covers.
func (s Site) insnCount() int {
	if s.Word {
		return 1
	}
	return len(s.Insns)
}

// WordSite is the site of a fixed-length ISA's jump at addr: one
// n-byte instruction replaced by one n-byte branch to the pad.
func WordSite(addr uint64, n int) Site { return Site{Addr: addr, Covered: n, Word: true} }

// PadPrefix is the redundant prefix of a padded jump: a DS segment
// override, which a near jump ignores in 64-bit mode (Linux pads jumps
// with it too).
const PadPrefix = 0x3e

// MaxPrefix is the most prefixes PaddedSites tries.
const MaxPrefix = 3

// jumpLen is the length of the jump with its prefixes.
func (s Site) jumpLen() int { return s.Prefix + JumpLen }

// Footprint is the number of bytes from Addr the patch occupies: the
// covered bytes, or the whole jump when it keeps bytes of the next
// instructions; for an evicting site, also the evicted instruction's
// jump; for a short-jump site, only the short jump (its slot is apart:
// Overlaps). Nothing else may write there while the jump is in.
func (s Site) Footprint() int {
	if s.Word {
		return s.Covered
	}
	if s.Slot != 0 {
		return s.Covered + s.Keep
	}
	if s.Evicted != nil {
		return s.Covered + s.Evicted.Footprint()
	}
	return max(s.Covered, s.jumpLen())
}

// JumpEnd is the address after the jump (and its prefixes), from which
// rel32 counts: for a short-jump site, after the slot's jump.
func (s Site) JumpEnd() uint64 {
	if s.Slot != 0 {
		return s.Slot + JumpLen
	}
	return s.Addr + uint64(s.jumpLen())
}

// Overlaps reports whether the bytes the patch writes or depends on —
// its footprint with the push before it (Lead), and a short-jump site's
// slot — overlap [addr, addr+n).
func (s Site) Overlaps(addr, n uint64) bool {
	if s.Slot != 0 && s.Slot < addr+n && addr < s.Slot+JumpLen {
		return true
	}
	if s.Host != nil && s.Host.Overlaps(addr, n) {
		return true
	}
	return s.Start() < addr+n && addr < s.Addr+uint64(s.Footprint())
}

// Ranges lists the byte ranges Overlaps checks: the footprint (with the
// push before it, Lead), the slot and the neighbour holding it.
func (s Site) Ranges() []Range {
	r := []Range{{s.Start(), s.Addr + uint64(s.Footprint())}}
	if s.Slot != 0 {
		r = append(r, Range{s.Slot, s.Slot + JumpLen})
	}
	if s.Host != nil {
		r = append(r, s.Host.Ranges()...)
	}
	return r
}

// HostBytes returns what a short-jump site whose slot lies in a
// neighbour writes over that neighbour: its jump to the trampoline at
// Tramp, then the slot's jump to pad, then int3 filler.
func (s Site) HostBytes(pad uint64) ([]byte, error) {
	b, err := s.Host.PatchBytes(s.Tramp)
	if err != nil {
		return nil, fmt.Errorf("neighbour of %#x: %w", s.Addr, err)
	}
	slot, err := s.SlotBytes(pad)
	if err != nil {
		return nil, err
	}
	copy(b[s.Slot-s.Host.Addr:], slot)
	return b, nil
}

// SlotBytes returns the `jmp rel32` to pad a short-jump site writes at
// its Slot.
func (s Site) SlotBytes(pad uint64) ([]byte, error) {
	b, err := appendJmpRel32(nil, s.Slot, pad)
	if err != nil {
		return nil, fmt.Errorf("slot for %#x: %w", s.Addr, err)
	}
	return b, nil
}

// Resume is the address where execution continues after the relocated
// covered instructions: the first instruction after the jump (never
// reached when the last one is an unconditional transfer, Dead > 0).
func (s Site) Resume() uint64 { return s.Addr + uint64(s.Covered) }

// PlanSite decodes the instructions at addr (code holds the bytes from
// addr; 20 bytes are always enough) until at least JumpLen bytes are
// covered and plans the jump. It refuses (error wrapping ErrSiteRefused)
// when:
//   - an instruction cannot be decoded safely (see DecodeInsn) or
//     relocated (int3, xbegin, far transfers, odd prefixes: RelocateInsn);
//   - a covered instruction other than the last is an unconditional
//     transfer (jmp, ret, indirect jmp): the bytes after it may not be
//     instructions of this function at all. Alignment padding after it
//     (deadPadding) is the exception: the jump may end inside it;
//   - a covered relative branch targets the inside of the covered range
//     (Addr+1 .. Addr+Covered-1), which the jump destroys.
func PlanSite(code []byte, addr uint64) (Site, error) {
	return planSite(code, addr, 0)
}

// PaddedSites returns the prefix-padded variants of the punned site s
// (planned by PlanSite from code), one prefix more each, up to MaxPrefix:
// the placements to try when no pad address suits s. A variant needs
// more prefixes than its first instruction has bytes (a covered head
// must not fall on a prefix or the opcode, where a thread would enter
// the jump mid-way).
func PaddedSites(code []byte, s Site) []Site {
	var out []Site
	for k := 1; k <= MaxPrefix && len(s.Puns) > 0 && k < s.Insns[0].Len; k++ {
		if v, err := planSite(code, s.Addr, k); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// SiteCandidates returns the ways to place a jump at addr, cheapest
// first: PlanSite's site when it puns nothing (a plain jump, possibly
// ending in padding); otherwise the successor-preserving pun (KeepSite:
// no int3) and its prefix-padded variants (PaddedKeepSites), the short
// jump to a slot in nearby padding (ShortSite: no int3), the successor
// eviction (EvictSite: no int3, a second jump
// and a trampoline; isCode vouches for bytes after a ret or jmp),
// PlanSite's punned site (int3s at covered heads) and its
// prefix-padded variants (PaddedSites). The caller takes the first that
// gets a pad address. The error is PlanSite's when there is no
// candidate.
//
// back holds the bytes just before addr (for short jumps backward; nil
// is fine).
func SiteCandidates(back, code []byte, addr uint64, isCode CodeOracle) ([]Site, error) {
	site, err := PlanSite(code, addr)
	if err == nil && len(site.Puns) == 0 {
		return []Site{site}, nil
	}
	out, _ := keptSites(code, addr)
	if sh, serr := ShortSites(back, code, addr, isCode); serr == nil {
		out = append(out, sh...)
	}
	if e, eerr := EvictSite(code, addr, isCode); eerr == nil {
		out = append(out, e)
	}
	if err == nil {
		out = append(append(out, site), PaddedSites(code, site)...)
	}
	if len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// KeptCandidates returns the shapes SiteCandidates lists first, which
// need no look at the code around the site: a plain jump over whole
// instructions when it puns nothing, else the successor-preserving jump
// and its prefix-padded variants (none when KeepSite refuses: the error).
//
// The first instruction is decoded once: a plain jump puns nothing only
// when that instruction is a jump long or ends the flow (dead padding
// after it), so otherwise PlanSite is not tried (a tstart placing a
// thousand tracepoints decoded each entry's first instructions three
// times over).
func KeptCandidates(code []byte, addr uint64) ([]Site, error) {
	first, err := DecodeInsn(code, addr)
	if err != nil {
		return nil, fmt.Errorf("plan site %#x: %w: %w", addr, ErrSiteRefused, err)
	}
	if first.Len >= JumpLen || first.NoFallThrough() {
		if site, err := PlanSite(code, addr); err == nil && len(site.Puns) == 0 {
			return []Site{site}, nil
		}
	}
	return keptSitesFor(code, first)
}

// keptSites returns the successor-preserving jump at addr and its
// prefix-padded variants (KeepSite's error when it refuses).
func keptSites(code []byte, addr uint64) ([]Site, error) {
	in, err := DecodeInsn(code, addr)
	if err != nil {
		return nil, fmt.Errorf("plan site %#x: %w: %w", addr, ErrSiteRefused, err)
	}
	return keptSitesFor(code, in)
}

// keptSitesFor is keptSites for the decoded first instruction in.
func keptSitesFor(code []byte, in Insn) ([]Site, error) {
	k, err := keepSiteFor(code, in)
	if err != nil {
		return nil, err
	}
	return append([]Site{k}, PaddedKeepSites(code, k)...), nil
}

// KeepSite plans a successor-preserving pun at addr (E9Patch's tactic):
// the jump replaces only the first instruction when it is shorter than
// the jump, and its displacement's last bytes are the next
// instructions' own bytes, left as they are. Only pad addresses that
// give the displacement those bytes will do (FindPadAddr with Forced);
// in return nothing traps: a thread that arrives at a following
// instruction (a branch target) runs it unchanged, and the relocated
// first instruction returns there. It refuses what PlanSite refuses about
// the first instruction, and first instructions of 5 bytes or more
// (PlanSite's plain jump is better).
func KeepSite(code []byte, addr uint64) (Site, error) {
	in, err := DecodeInsn(code, addr)
	if err != nil {
		return Site{}, fmt.Errorf("plan site %#x: %w: %w", addr, ErrSiteRefused, err)
	}
	return keepSiteFor(code, in)
}

// keepSiteFor is KeepSite for the decoded first instruction in.
func keepSiteFor(code []byte, in Insn) (Site, error) {
	addr := in.Addr
	if in.Len >= JumpLen {
		return Site{}, fmt.Errorf("plan site %#x: %w: a plain jump fits", addr, ErrSiteRefused)
	}
	if len(code) < JumpLen {
		return Site{}, fmt.Errorf("plan site %#x: %w: %d bytes of code", addr, ErrSiteRefused, len(code))
	}
	if _, err := RelocateInsn(in, in.Addr); err != nil {
		return Site{}, fmt.Errorf("plan site %#x: %w: %w", addr, ErrSiteRefused, err)
	}
	if in.RelSize > 0 && in.Target > addr && in.Target < addr+JumpLen {
		return Site{}, fmt.Errorf("plan site %#x: %w: the %v targets %#x inside the jump", addr, ErrSiteRefused, in.Kind, in.Target)
	}
	return keepSite(code, in, 0), nil
}

// keepSite is KeepSite's site for first instruction in with prefix
// redundant prefixes before the jump's opcode (prefix < in.Len: the
// prefixes and the opcode replace in's bytes; the displacement's last
// prefix+JumpLen-in.Len bytes are the next instructions').
func keepSite(code []byte, in Insn, prefix int) Site {
	jl := prefix + JumpLen
	s := Site{Addr: in.Addr, Insns: []Insn{in}, Covered: in.Len, Keep: jl - in.Len, Forced: map[int]byte{}, Prefix: prefix}
	for off := in.Len; off < jl; off++ {
		s.Forced[off-prefix-1] = code[off]
	}
	return s
}

// PaddedKeepSites returns the prefix-padded variants of the
// successor-preserving site k (KeepSite's, from code): one to
// k.Covered-1 redundant prefixes before the opcode, each moving the
// kept bytes one place down the displacement, so that its top byte
// comes from a later successor byte. A forced top byte of 0x80 or more
// makes the displacement negative, which from an executable mapped low
// (non-PIE, 4 MB) leaves no address for the pad; a later byte may be
// small. Each prefix keeps one more successor byte: a variant with four
// kept bytes allows exactly one pad address.
func PaddedKeepSites(code []byte, k Site) []Site {
	in := k.Insns[0]
	var out []Site
	for p := 1; p <= MaxPrefix && p < in.Len && len(code) >= p+JumpLen; p++ {
		out = append(out, keepSite(code, in, p))
	}
	return out
}

func planSite(code []byte, addr uint64, prefix int) (Site, error) {
	s := Site{Addr: addr, Forced: map[int]byte{}, Prefix: prefix}
	jl := s.jumpLen()
	for s.Covered < jl {
		if len(s.Insns) > 0 {
			if prev := s.Insns[len(s.Insns)-1]; prev.NoFallThrough() {
				n, ok := deadPadding(code[s.Covered:], addr+uint64(s.Covered))
				if !ok || s.Covered+n < jl {
					return Site{}, fmt.Errorf("plan site %#x: %w: the jump would cover bytes after the %v at %#x", addr, ErrSiteRefused, prev.Kind, prev.Addr)
				}
				s.Dead = jl - s.Covered
				s.Covered = jl
				continue
			}
		}
		in, err := DecodeInsn(code[s.Covered:], addr+uint64(s.Covered))
		if err != nil {
			return Site{}, fmt.Errorf("plan site %#x: %w: %w", addr, ErrSiteRefused, err)
		}
		if _, err := RelocateInsn(in, in.Addr); err != nil {
			return Site{}, fmt.Errorf("plan site %#x: %w: %w", addr, ErrSiteRefused, err)
		}
		if len(s.Insns) > 0 {
			if s.Covered <= prefix {
				return Site{}, fmt.Errorf("plan site %#x: %w: the instruction at %#x would start inside the jump's prefixes", addr, ErrSiteRefused, in.Addr)
			}
			s.Puns = append(s.Puns, s.Covered)
			s.Forced[s.Covered-prefix-1] = Int3
		}
		s.Insns = append(s.Insns, in)
		s.Covered += in.Len
	}
	for _, in := range s.Insns {
		if in.RelSize > 0 && in.Target > addr && in.Target < s.Addr+uint64(s.Covered) {
			return Site{}, fmt.Errorf("plan site %#x: %w: the %v at %#x targets %#x inside the covered bytes", addr, ErrSiteRefused, in.Kind, in.Addr, in.Target)
		}
	}
	return s, nil
}

// PatchBytes returns the Covered bytes to write at Addr for a jump to the
// pad entry pad: Prefix prefixes, `jmp rel32`, then int3 filler for the
// rest of the last covered instruction. It fails if rel32 does not fit or does not have
// the bytes Forced requires (a pad address not obtained from FindPadAddr).
func (s Site) PatchBytes(pad uint64) ([]byte, error) {
	if s.Slot != 0 {
		return s.shortBytes()
	}
	jl := s.jumpLen()
	if s.Covered+s.Keep < jl && s.Evicted == nil {
		return nil, fmt.Errorf("patch for %#x: site covers only %d bytes", s.Addr, s.Covered)
	}
	d, err := rel32(s.JumpEnd(), pad)
	if err != nil {
		return nil, fmt.Errorf("patch for %#x: %w", s.Addr, err)
	}
	patch := make([]byte, s.Footprint())
	if s.Evicted != nil {
		ev, err := s.Evicted.PatchBytes(s.Tramp)
		if err != nil {
			return nil, fmt.Errorf("patch for %#x: evicted instruction: %w", s.Addr, err)
		}
		copy(patch[s.Covered:], ev)
	}
	for i := range s.Prefix {
		patch[i] = PadPrefix
	}
	patch[s.Prefix] = 0xe9
	var rel [4]byte
	binary.LittleEndian.PutUint32(rel[:], uint32(d))
	for i, b := range rel {
		if at := s.Prefix + 1 + i; at < s.Covered || s.Evicted == nil {
			patch[at] = b
		} else if patch[at] != b {
			// An evicting jump's displacement ends with the evicted
			// jump's first bytes, already written.
			return nil, fmt.Errorf("patch for %#x: rel32 %#08x does not end with the evicted jump's bytes", s.Addr, uint32(d))
		}
	}
	for i := jl; i < s.Covered; i++ {
		patch[i] = Int3
	}
	// Kept bytes: the displacement's last bytes are already the next
	// instructions' (Forced checks it below).
	for idx, v := range s.Forced {
		if idx < 0 || idx > 3 || patch[s.Prefix+1+idx] != v {
			return nil, fmt.Errorf("patch for %#x: rel32 %#08x does not have byte %d = %#02x", s.Addr, uint32(d), idx, v)
		}
	}
	return patch, nil
}

// shortBytes returns a short-jump site's Covered bytes: `jmp rel8` to
// the slot, then int3 filler.
func (s Site) shortBytes() ([]byte, error) {
	d := int64(s.Slot) - int64(s.Addr+ShortJumpLen)
	if d < -128 || d > ShortReach || s.Covered+s.Keep < ShortJumpLen {
		return nil, fmt.Errorf("patch for %#x: slot %#x out of a short jump's reach", s.Addr, s.Slot)
	}
	// A kept byte (Keep 1) is the displacement: the slot was chosen so
	// (keptShortSlot), and writing it changes nothing.
	patch := []byte{0xeb, byte(d)}
	for len(patch) < s.Covered {
		patch = append(patch, Int3)
	}
	return patch, nil
}

// deadPadding reports whether code, the bytes at addr right after an
// unconditional transfer, starts with alignment padding: nops (0x90,
// 0f 1f /0, with 66 or segment prefixes) or int3s running up to an
// 8-byte boundary (the last one before the next 16-byte boundary the
// run reaches), at most 15 bytes. It returns the padding's length.
// Compilers and linkers fill the space before an aligned function or
// label so (.p2align 3 and 4); nothing jumps into it (the label follows
// it). A nop that crosses the 16-byte boundary is not padding.
func deadPadding(code []byte, addr uint64) (int, bool) {
	toBoundary := int(16 - addr%16)
	if toBoundary == 16 {
		return 0, false
	}
	n, best := 0, 0
	for n < toBoundary {
		if n >= len(code) {
			break
		}
		step := 1
		if code[n] != Int3 {
			in, err := DecodeInsn(code[n:], addr+uint64(n))
			if err != nil || !in.IsNop() {
				break
			}
			step = in.Len
		}
		if n += step; n > toBoundary {
			return 0, false
		}
		if (addr+uint64(n))%8 == 0 {
			best = n
		}
	}
	return best, best > 0
}
