package fasttp

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Range is a half-open address range [Start, End); for FindPadAddr, one
// that is not mapped in the inferior.
type Range struct{ Start, End uint64 }

// ErrNoPadAddr is wrapped when no free address satisfies the jump's
// constraints.
var ErrNoPadAddr = errors.New("no pad address")

// FindPadAddr returns the pad entry address P nearest to the site such that
// [P, P+size) lies inside one of the free ranges, the jump's displacement
// rel32 = P - site.JumpEnd() fits in an int32, and rel32's bytes have the
// values site.Forced requires (little-endian byte index 0..3).
//
// The search is exact and fast: for every free range it computes the
// interval of admissible rel32 values and, with the forced bits fixed, the
// admissible value nearest to zero inside it (a bitwise successor/
// predecessor search, not a scan).
func FindPadAddr(site Site, free []Range, size uint64) (uint64, error) {
	if size == 0 {
		return 0, fmt.Errorf("find pad for %#x: %w: zero size", site.Addr, ErrNoPadAddr)
	}
	for idx := range site.Forced {
		if idx < 0 || idx > 3 {
			return 0, fmt.Errorf("find pad for %#x: forced rel32 byte index %d out of 0..3", site.Addr, idx)
		}
	}
	if p, ok := nearestPadAddr(site, free, size); ok {
		return p, nil
	}
	return 0, fmt.Errorf("find pad for %#x: %w: no free range of %d bytes within 2 GB%s", site.Addr, ErrNoPadAddr, size, describeForced(site.Forced))
}

// nearestPadAddr is padCandidates' nearest address (samples 0, n 1):
// with free in address order, found by its outward walk from the jump,
// which stops each way at the first range that cannot hold anything
// nearer (a QTStart of a thousand tracepoints leaves thousands of
// ranges).
func nearestPadAddr(site Site, free []Range, size uint64) (uint64, bool) {
	return firstOf(padCandidates(site, free, size, 0, 1))
}

// firstOf returns the first address of ps, if any.
func firstOf(ps []uint64) (uint64, bool) {
	if len(ps) == 0 {
		return 0, false
	}
	return ps[0], true
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// describeForced renders the forced bytes for an error message.
func describeForced(forced map[int]byte) string {
	if len(forced) == 0 {
		return ""
	}
	idx := make([]int, 0, len(forced))
	for i := range forced {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	parts := make([]string, len(idx))
	for n, i := range idx {
		parts[n] = fmt.Sprintf("rel32 byte %d = %#02x", i, forced[i])
	}
	return " with " + strings.Join(parts, ", ")
}

// relInterval converts the admissible pad addresses [pLo, pHi] into the
// rel32 interval [lo, hi] (clipped to int32) relative to base.
func relInterval(base, pLo, pHi uint64) (lo, hi int64, ok bool) {
	// Work in a window of ±2^31 around base without overflow.
	const span = 1 << 31
	winLo := uint64(0)
	if base > span {
		winLo = base - span
	}
	winHi := base + (span - 1)
	if winHi < base { // wrapped past the top of the address space
		winHi = math.MaxUint64
	}
	pLo, pHi = max(pLo, winLo), min(pHi, winHi)
	if pLo > pHi {
		return 0, 0, false
	}
	return int64(pLo - base), int64(pHi - base), true
}

// nextMatch returns the smallest u >= x with u&mask == val (val must lie
// inside mask); ok is false when there is none below 2^32.
func nextMatch(x, mask, val uint32) (uint32, bool) {
	// Walk from the top bit down keeping u's prefix equal to x's. A free
	// bit where x has 0 is a place where u could exceed x; remember the
	// lowest one seen. When a fixed bit makes the prefix smaller than x's,
	// go back to that place: set it, and put the minimum (fixed bits only)
	// below it. When it makes the prefix larger, the minimum below is the
	// answer.
	bump := -1
	for i := 31; i >= 0; i-- {
		bit := uint32(1) << i
		if mask&bit == 0 {
			if x&bit == 0 {
				bump = i
			}
			continue
		}
		switch {
		case val&bit == x&bit:
			continue
		case val&bit != 0: // u's prefix is now larger than x's
			above := x &^ (bit<<1 - 1) // x's bits above i (fixed ones equal val's)
			return above | bit | val&(bit-1), true
		default: // u's prefix would be smaller: bump the lowest free 0 above
			if bump < 0 {
				return 0, false
			}
			b := uint32(1) << bump
			above := x &^ (b<<1 - 1)
			return above | b | val&(b-1), true
		}
	}
	return x, true // x itself matches
}

// prevMatch returns the largest u <= x with u&mask == val; ok is false when
// there is none.
func prevMatch(x, mask, val uint32) (uint32, bool) {
	u, ok := nextMatch(^x, mask, ^val&mask)
	return ^u, ok
}

// ParseMaps returns the address ranges of the mappings listed in the text of
// /proc/PID/maps ("start-end perms offset dev inode [path]" per line, hex
// addresses), in the order given.
func ParseMaps(maps []byte) ([]Range, error) {
	var out []Range
	sc := bufio.NewScanner(bytes.NewReader(maps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			continue
		}
		field, _, _ := strings.Cut(text, " ")
		r, err := parseAddrRange(field)
		if err != nil {
			return nil, fmt.Errorf("maps line %d %q: %w", line, text, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	return out, nil
}

// parseAddrRange parses a maps or smaps line's first field, "start-end"
// in hex, end not below start.
func parseAddrRange(field string) (Range, error) {
	startHex, endHex, ok := strings.Cut(field, "-")
	if !ok {
		return Range{}, errors.New("no start-end range")
	}
	start, err := strconv.ParseUint(startHex, 16, 64)
	if err != nil {
		return Range{}, fmt.Errorf("start: %w", err)
	}
	end, err := strconv.ParseUint(endHex, 16, 64)
	if err != nil {
		return Range{}, fmt.Errorf("end: %w", err)
	}
	if end < start {
		return Range{}, fmt.Errorf("end %#x below start %#x", end, start)
	}
	return Range{start, end}, nil
}

// FreeRanges returns the parts of [lo, hi) not covered by any of the
// mapped ranges (which may be unsorted and overlapping), sorted by address:
// the candidates FindPadAddr chooses from. lo should be at least the
// kernel's vm.mmap_min_addr and hi at most the top of the user address
// space (0x7ffffffff000 with 4-level paging).
func FreeRanges(mapped []Range, lo, hi uint64) []Range {
	return appendFreeRanges(nil, mapped, lo, hi)
}

// appendFreeRanges is FreeRanges appending to free (a buffer reused by
// the installer: a thousand pads placed at once each looked for room).
func appendFreeRanges(free, mapped []Range, lo, hi uint64) []Range {
	byStart := func(a, b Range) int { return cmp.Compare(a.Start, b.Start) }
	sorted := mapped // a Batch's map is kept in order: no copy, no sort
	if !slices.IsSortedFunc(sorted, byStart) {
		sorted = slices.SortedFunc(slices.Values(mapped), byStart)
	}
	cur := lo
	for _, m := range sorted {
		if cur >= hi {
			break
		}
		if m.End <= cur || m.End <= m.Start {
			continue
		}
		if m.Start > cur {
			free = append(free, Range{cur, min(m.Start, hi)})
		}
		cur = max(cur, m.End)
	}
	if cur < hi {
		free = append(free, Range{cur, hi})
	}
	return free
}
