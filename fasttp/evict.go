package fasttp

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// CodeOracle reports whether addr is known to start an instruction (of a
// function whose code was disassembled from its symbol's start). Placement
// asks it before it writes over the bytes after an unconditional transfer
// (a ret or jmp), which might otherwise be data; nil knows nothing.
type CodeOracle func(addr uint64) bool

// TrampolineSize is the memory an evicted instruction's trampoline gets:
// the relocated instructions of a plain jump's site (a call becomes push
// and jmp, at most ~25 bytes each) and the jump back.
const TrampolineSize = 128

// EvictSite plans a successor eviction at addr (E9Patch's tactic): when
// the first instruction I0 is shorter than the jump, the next
// instruction I1 gets a plain jump of its own, to a trampoline that runs
// I1 relocated and jumps back after it, and I0's jump is written over
// I0 and the first bytes of I1's jump: its displacement ends with I1's
// opcode 0xe9 and the low bytes of I1's displacement. The two pad
// addresses are chosen together (FindEvictAddrs). Nothing traps: a
// thread arriving at I1 from elsewhere runs I1's jump and the
// trampoline; I0's pad returns to I1 the same way.
//
// I1 must take a plain jump (5 bytes or more, or ending in the padding
// after a ret or jmp: PlanSite with no puns) or else a
// successor-preserving one (KeepSite), whose kept bytes then fix the
// top of its displacement. When I0 is an
// unconditional transfer, the bytes after it are written only if isCode
// vouches for addr and for I1 (they could be data, or another
// function's bytes nobody disassembled).
func EvictSite(code []byte, addr uint64, isCode CodeOracle) (Site, error) {
	refuse := func(why string, args ...any) (Site, error) {
		return Site{}, fmt.Errorf("plan site %#x: %w: "+why, append([]any{addr, ErrSiteRefused}, args...)...)
	}
	in, err := DecodeInsn(code, addr)
	if err != nil {
		return refuse("%w", err)
	}
	if in.Len >= JumpLen {
		return refuse("a plain jump fits")
	}
	if _, err := RelocateInsn(in, in.Addr); err != nil {
		return refuse("%w", err)
	}
	next := in.Next()
	if in.NoFallThrough() && (isCode == nil || !isCode(addr) || !isCode(next)) {
		return refuse("the bytes after the %v are not known to be code", in.Kind)
	}
	succ, err := planSite(code[in.Len:], next, 0)
	if err != nil || len(succ.Puns) > 0 {
		// A successor-preserving jump of its own keeps the bytes after
		// it: its displacement's top bytes are fixed by them.
		if succ, err = KeepSite(code[in.Len:], next); err != nil {
			return refuse("the next instruction cannot take a jump of its own: %w", err)
		}
	}
	s := Site{Addr: addr, Insns: []Insn{in}, Covered: in.Len, Forced: map[int]byte{in.Len - 1: 0xe9}, Evicted: &succ}
	for idx, v := range succ.Forced {
		// The evicted jump's fixed displacement bytes that lie inside
		// the first jump fix its bytes too.
		if at := in.Len + idx; at <= 3 {
			s.Forced[at] = v
		}
	}
	if in.RelSize > 0 && in.Target > addr && in.Target < addr+uint64(s.Footprint()) && in.Target != next {
		return refuse("the %v targets %#x inside the jumps", in.Kind, in.Target)
	}
	return s, nil
}

// FindEvictAddrs returns the pad address for the evicting site s
// (EvictSite) and the trampoline address for its evicted instruction:
// pad (padSize bytes) and trampoline (TrampolineSize bytes) in distinct
// free pages, with s's displacement ending in 0xe9 and the low bytes of
// the trampoline jump's displacement. It tries the pad candidates nearest
// to the site first (padCandidates) and, for each, the trampoline address
// nearest to the evicted instruction with the bytes that pad fixes.
func FindEvictAddrs(s Site, free []Range, padSize uint64) (pad, tramp uint64, err error) {
	if s.Evicted == nil {
		return 0, 0, fmt.Errorf("find pads for %#x: not an evicting site", s.Addr)
	}
	l := s.Insns[0].Len
	first := error(nil)
	for _, p := range padCandidates(s, free, padSize, evictSamples, maxEvictTries) {
		rel := uint32(p - s.JumpEnd())
		e := *s.Evicted
		e.Forced = maps.Clone(s.Evicted.Forced)
		for i := 0; i < JumpLen-1-l; i++ {
			e.Forced[i] = byte(rel >> (8 * (l + i))) // kept bytes agree (s.Forced)
		}
		t, err := FindPadAddr(e, withoutRange(free, pagesOf(p, padSize)), TrampolineSize)
		if err == nil {
			return p, t, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = fmt.Errorf("find pad for %#x: %w: no free range of %d bytes within 2 GB%s", s.Addr, ErrNoPadAddr, padSize, describeForced(s.Forced))
	}
	return 0, 0, fmt.Errorf("evicting the instruction at %#x: %w", s.Evicted.Addr, first)
}

// maxEvictTries bounds the pad addresses FindEvictAddrs tries.
const maxEvictTries = 64

// evictSamples is how many points inside each free range padCandidates
// looks for a match near, besides its ends: a pad address far from the
// site moves the evicted jump's forced bytes, and so its trampoline.
const evictSamples = 8

// padCandidates returns up to n pad addresses for site, nearest first:
// in each free range, the admissible addresses nearest to the site and
// nearest to samples points spread evenly over the range (its ends
// included when samples > 0).
func padCandidates(site Site, free []Range, size uint64, samples, n int) []uint64 {
	mask, val := forcedBits(site.Forced)
	base := site.JumpEnd()
	if mask == 0xffffffff {
		// Every byte forced (a jump keeping four successor bytes): one
		// address, free or not.
		p := base + uint64(int64(int32(val)))
		fits := func(fr Range) bool { return fr.Start <= p && p <= fr.End && fr.End-p >= size }
		// In an address-ordered list (the installer's) the range that
		// holds p is found by binary search; a miss scans them all (a
		// list in another order).
		if i := sort.Search(len(free), func(i int) bool { return free[i].Start > p }) - 1; i >= 0 && fits(free[i]) {
			return []uint64{p}
		}
		if slices.ContainsFunc(free, fits) {
			return []uint64{p}
		}
		return nil
	}
	var rels []int64
	for _, fr := range free {
		if fr.End <= fr.Start || fr.End-fr.Start < size {
			continue
		}
		lo, hi, ok := relInterval(base, fr.Start, fr.End-size)
		if !ok {
			continue
		}
		rels = append(rels, matchesAround(min(max(0, lo), hi), lo, hi, mask, val)...)
		for k := 0; samples > 0 && k <= samples+1; k++ {
			rels = append(rels, matchesAround(lo+(hi-lo)*int64(k)/int64(samples+1), lo, hi, mask, val)...)
		}
	}
	sort.Slice(rels, func(i, j int) bool { return abs64(rels[i]) < abs64(rels[j]) })
	var out []uint64
	for i, r := range rels {
		if i > 0 && r == rels[i-1] {
			continue
		}
		out = append(out, base+uint64(r))
		if len(out) == n {
			break
		}
	}
	return out
}

// matchesAround returns the rel32 values in [lo, hi] with the forced
// bits (mask, val) nearest to at: the first at or after it and the last
// at or before it, where there are such (in signed order: the unsigned
// searches run separately on each side of zero).
func matchesAround(at, lo, hi int64, mask, val uint32) []int64 {
	var out []int64
	if r, ok := nextSigned(at, hi, mask, val); ok {
		out = append(out, r)
	}
	if r, ok := prevSigned(at, lo, mask, val); ok {
		out = append(out, r)
	}
	return out
}

// nextSigned returns the smallest rel32 value in [at, hi] with the
// forced bits.
func nextSigned(at, hi int64, mask, val uint32) (int64, bool) {
	if at < 0 {
		if u, ok := nextMatch(uint32(int32(at)), mask, val); ok && u >= 1<<31 && int64(int32(u)) <= hi {
			return int64(int32(u)), true
		}
		at = 0
	}
	if at > hi {
		return 0, false
	}
	if u, ok := nextMatch(uint32(at), mask, val); ok && u < 1<<31 && int64(u) <= hi {
		return int64(u), true
	}
	return 0, false
}

// prevSigned returns the largest rel32 value in [lo, at] with the forced
// bits.
func prevSigned(at, lo int64, mask, val uint32) (int64, bool) {
	if at >= 0 {
		if u, ok := prevMatch(uint32(at), mask, val); ok && u < 1<<31 && int64(u) >= lo {
			return int64(u), true
		}
		at = -1
	}
	if at < lo {
		return 0, false
	}
	if u, ok := prevMatch(uint32(int32(at)), mask, val); ok && u >= 1<<31 && int64(int32(u)) >= lo {
		return int64(int32(u)), true
	}
	return 0, false
}

// forcedBits turns forced rel32 bytes into a mask and the values under
// it.
func forcedBits(forced map[int]byte) (mask, val uint32) {
	for idx, b := range forced {
		mask |= 0xff << (8 * idx)
		val |= uint32(b) << (8 * idx)
	}
	return mask, val
}

// pagesOf returns the whole pages [p, p+size) lies in.
func pagesOf(p, size uint64) Range {
	return Range{p &^ 4095, (p + size + 4095) &^ 4095}
}

// withoutRange returns free with r cut out.
func withoutRange(free []Range, r Range) []Range {
	var out []Range
	for _, f := range free {
		if f.End <= r.Start || f.Start >= r.End {
			out = append(out, f)
			continue
		}
		if f.Start < r.Start {
			out = append(out, Range{f.Start, r.Start})
		}
		if f.End > r.End {
			out = append(out, Range{r.End, f.End})
		}
	}
	return out
}

// FindPadAddrs returns the pad address for site (FindPadAddr) and, for
// an evicting site (FindEvictAddrs) or a short jump into a neighbour,
// the trampoline's (0 otherwise).
func FindPadAddrs(site Site, free []Range, size uint64) (pad, tramp uint64, err error) {
	if site.Evicted != nil {
		return FindEvictAddrs(site, free, size)
	}
	if pad, err = FindPadAddr(site, free, size); err != nil || site.Host == nil {
		return pad, 0, err
	}
	tramp, err = FindPadAddr(*site.Host, withoutRange(free, pagesOf(pad, size)), TrampolineSize)
	return pad, tramp, err
}
