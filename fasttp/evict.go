package fasttp

import (
	"cmp"
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

// padCandidates returns up to n pad addresses for site, nearest first
// (ties: the lower first): in each free range, the admissible addresses
// nearest to the site and nearest to samples points spread evenly over
// the range (its ends included when samples > 0). With free in address
// order (the installer's lists) it walks outward from the jump and stops
// each way at the first range that cannot hold one of the n nearest: a
// QTStart of a thousand tracepoints leaves thousands of ranges, and the
// scan of all of them (scanPadCandidates, for lists in another order)
// took an evicting site's search most of a millisecond.
func padCandidates(site Site, free []Range, size uint64, samples, n int) []uint64 {
	sorted := slices.IsSortedFunc(free, func(a, b Range) int { return cmp.Compare(a.Start, b.Start) })
	return searchPadCandidates(site, free, size, samples, n, !sorted)
}

// scanPadCandidates is padCandidates for a free list in any order: every
// range is looked at.
func scanPadCandidates(site Site, free []Range, size uint64, samples, n int) []uint64 {
	return searchPadCandidates(site, free, size, samples, n, true)
}

// searchPadCandidates is padCandidates, looking at every range (all) or
// walking outward from the jump through free, in address order.
func searchPadCandidates(site Site, free []Range, size uint64, samples, n int, all bool) []uint64 {
	mask, val := forcedBits(site.Forced)
	if n <= 0 {
		return nil
	}
	if mask == 0xffffffff {
		return fullyForcedPad(site, free, size, val)
	}
	ps := padSearch{base: site.JumpEnd(), size: size, mask: mask, val: val, samples: samples, n: n, all: all}
	if all {
		for _, fr := range free {
			ps.add(fr)
		}
		return ps.addrs()
	}
	above := sort.Search(len(free), func(i int) bool { return free[i].Start > ps.base })
	for i := above - 1; i >= 0 && ps.add(free[i]); i-- {
	}
	for i := above; i < len(free) && ps.add(free[i]); i++ {
	}
	return ps.addrs()
}

// fullyForcedPad returns the one pad address of a site whose four
// displacement bytes are all forced (val), if a free range holds it:
// found by binary search in an address-ordered list, else by a scan.
func fullyForcedPad(site Site, free []Range, size uint64, val uint32) []uint64 {
	p := site.JumpEnd() + uint64(int64(int32(val)))
	fits := func(fr Range) bool { return fr.Start <= p && p <= fr.End && fr.End-p >= size }
	if i := sort.Search(len(free), func(i int) bool { return free[i].Start > p }) - 1; i >= 0 && fits(free[i]) {
		return []uint64{p}
	}
	if slices.ContainsFunc(free, fits) {
		return []uint64{p}
	}
	return nil
}

// padSearch collects padCandidates' rel32 values, the n nearest kept.
type padSearch struct {
	base       uint64
	size       uint64
	mask, val  uint32
	samples, n int
	all        bool // every range is looked at (no early stop)
	rels       []int64
}

// add adds free range fr's candidates. It reports false when no range
// further from the jump than fr can add one: fr is out of the jump's
// reach, or all of it lies further than the n nearest found so far.
func (ps *padSearch) add(fr Range) bool {
	if fr.End <= fr.Start || fr.End-fr.Start < ps.size {
		return true
	}
	lo, hi, ok := relInterval(ps.base, fr.Start, fr.End-ps.size)
	if !ok {
		return ps.all
	}
	if bound := max(lo, -hi, 0); !ps.all && len(ps.rels) == ps.n && bound > abs64(ps.rels[ps.n-1]) {
		return false
	}
	ps.rels = append(ps.rels, matchesAround(min(max(0, lo), hi), lo, hi, ps.mask, ps.val)...)
	for k := 0; ps.samples > 0 && k <= ps.samples+1; k++ {
		ps.rels = append(ps.rels, matchesAround(lo+(hi-lo)*int64(k)/int64(ps.samples+1), lo, hi, ps.mask, ps.val)...)
	}
	if !ps.all {
		ps.trim() // for the bound above
	}
	return true
}

// trim orders the candidates nearest first, ties the lower first, and
// keeps the n nearest distinct ones.
func (ps *padSearch) trim() {
	slices.SortFunc(ps.rels, func(a, b int64) int {
		if c := cmp.Compare(abs64(a), abs64(b)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	ps.rels = slices.Compact(ps.rels)
	if len(ps.rels) > ps.n {
		ps.rels = ps.rels[:ps.n]
	}
}

// addrs returns the candidates as pad addresses.
func (ps *padSearch) addrs() []uint64 {
	ps.trim()
	if len(ps.rels) == 0 {
		return nil
	}
	out := make([]uint64, len(ps.rels))
	for i, r := range ps.rels {
		out[i] = ps.base + uint64(r)
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
