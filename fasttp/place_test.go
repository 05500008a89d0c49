package fasttp

import (
	"encoding/binary"
	"errors"
	"math/rand"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// reflectFuncAddr is the address of a function in this test binary's text.
func reflectFuncAddr() uintptr { return reflect.ValueOf(TestFindPadAddr).Pointer() }

// checkPad asserts that p satisfies every constraint FindPadAddr promises.
func checkPad(t *testing.T, s Site, free []Range, size, p uint64) {
	t.Helper()
	rel := int64(p - (s.Addr + JumpLen))
	if rel != int64(int32(rel)) {
		t.Fatalf("pad %#x: rel32 %#x does not fit", p, rel)
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(int32(rel)))
	for i, v := range s.Forced {
		if b[i] != v {
			t.Fatalf("pad %#x: rel32 % x byte %d is %#x, want %#x", p, b, i, b[i], v)
		}
	}
	if s.Covered >= JumpLen {
		if _, err := s.PatchBytes(p); err != nil {
			t.Fatalf("pad %#x: %v", p, err)
		}
	}
	for _, r := range free {
		if p >= r.Start && p+size <= r.End && p+size > p {
			return
		}
	}
	t.Fatalf("pad [%#x, %#x) is not inside a free range %x", p, p+size, free)
}

func forced(idx ...int) map[int]byte {
	m := map[int]byte{}
	for _, i := range idx {
		m[i] = Int3
	}
	return m
}

func TestFindPadAddr(t *testing.T) {
	const addr = 0x555555554000
	const base = addr + JumpLen
	tests := []struct {
		name   string
		forced map[int]byte
		free   []Range
		size   uint64
		want   uint64
		errSub string
	}{
		{"no puns: nearest range start after the site", nil,
			[]Range{{addr + 0x100000, addr + 0x200000}, {addr + 0x10000, addr + 0x20000}}, 0x100, addr + 0x10000, ""},
		{"no puns: range before the site, its end is nearer", nil,
			[]Range{{addr - 0x30000, addr - 0x20000}, {addr + 0x100000, addr + 0x200000}}, 0x100, addr - 0x20000 - 0x100, ""},
		{"byte 0 forced", forced(0),
			[]Range{{addr + 0x1000, addr + 0x20000}}, 0x40, base + 0x10cc, ""},
		{"byte 2 forced, range just after", forced(2),
			[]Range{{addr, addr + 0x10000000}}, 0x40, base + 0xcc0000, ""},
		{"byte 2 forced, only below the site", forced(2),
			[]Range{{addr - 0x40000000, addr - 0x100}}, 0x40, base - 0x330001, ""}, // rel32 0xffccffff
		{"all four forced", forced(0, 1, 2, 3),
			[]Range{{0x100000, addr - 0x100}}, 0x1000, base - 0x33333334, ""},
		{"byte 3 forced needs a negative rel32", forced(3),
			[]Range{{addr + 0x1000, addr + 0x70000000}}, 0x40, 0, "rel32 byte 3 = 0xcc"},
		{"byte 2 forced, no room", forced(2),
			[]Range{{addr + 0x1000, addr + 0x20000}}, 0x40, 0, "no free range of 64 bytes within 2 GB with rel32 byte 2 = 0xcc"},
		{"free range 3 GB away", nil,
			[]Range{{addr + 3<<30, addr + 4<<30}}, 0x40, 0, "within 2 GB"},
		{"range too small", nil,
			[]Range{{addr + 0x1000, addr + 0x1010}}, 0x40, 0, "no free range"},
		{"range straddling the 2 GB limit", nil,
			[]Range{{addr + 0x7ffff000, addr + 0x90000000}}, 0x40, addr + 0x7ffff000, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Site{Addr: addr, Covered: 5, Forced: tt.forced}
			p, err := FindPadAddr(s, tt.free, tt.size)
			if tt.errSub != "" {
				if !errors.Is(err, ErrNoPadAddr) || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("FindPadAddr = %#x, %v; want an error containing %q", p, err, tt.errSub)
				}
				return
			}
			if err != nil {
				t.Fatalf("FindPadAddr: %v", err)
			}
			checkPad(t, s, tt.free, tt.size, p)
			if p != tt.want {
				t.Errorf("pad %#x (rel32 %#x), want %#x", p, int64(p-base), tt.want)
			}
		})
	}
}

// TestFindPadAddrRandom checks the constraints on random sites and free
// lists and, when at least two rel32 bytes are forced (at most 65536
// candidates), compares with a brute-force search over all candidates.
func TestFindPadAddrRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	found, compared := 0, 0
	for iter := 0; iter < 600; iter++ {
		addr := uint64(0x7f0000000000) + rng.Uint64()%(1<<40)
		var idx []int
		for i := 0; i < 4; i++ {
			if rng.Intn(2) == 0 {
				idx = append(idx, i)
			}
		}
		s := Site{Addr: addr, Covered: 5, Forced: forced(idx...)}
		var free []Range
		for n := rng.Intn(5) + 1; n > 0; n-- {
			start := addr - 3<<30 + rng.Uint64()%(6<<30)
			free = append(free, Range{start, start + 1 + rng.Uint64()%(1<<(rng.Intn(31)+1))})
		}
		size := uint64(1 + rng.Intn(0x2000))
		p, err := FindPadAddr(s, free, size)
		if err == nil {
			found++
			checkPad(t, s, free, size, p)
		}
		if len(idx) < 2 {
			continue
		}
		compared++
		bestFound, best := false, int64(0)
		var freeIdx []int
		for i := 0; i < 4; i++ {
			if _, ok := s.Forced[i]; !ok {
				freeIdx = append(freeIdx, i)
			}
		}
		for combo := 0; combo < 1<<(8*len(freeIdx)); combo++ {
			var b [4]byte
			for i, v := range s.Forced {
				b[i] = v
			}
			for k, i := range freeIdx {
				b[i] = byte(combo >> (8 * k))
			}
			rel := int64(int32(binary.LittleEndian.Uint32(b[:])))
			cand := addr + JumpLen + uint64(rel)
			for _, r := range free {
				if cand >= r.Start && cand+size <= r.End && cand+size > cand {
					if !bestFound || abs64(rel) < abs64(best) || abs64(rel) == abs64(best) && rel < best {
						bestFound, best = true, rel
					}
				}
			}
		}
		switch {
		case bestFound != (err == nil):
			t.Fatalf("site %#x forced %v free %x size %#x: FindPadAddr %#x, %v; brute force found=%v", addr, s.Forced, free, size, p, err, bestFound)
		case bestFound && abs64(int64(p-(addr+JumpLen))) != abs64(best):
			t.Fatalf("site %#x forced %v free %x size %#x: FindPadAddr rel32 %#x, brute force %#x", addr, s.Forced, free, size, int64(p-(addr+JumpLen)), best)
		}
	}
	t.Logf("%d/600 placed, %d compared with brute force", found, compared)
	if found < 60 || compared < 60 {
		t.Errorf("too few useful random cases: %d placed, %d compared", found, compared)
	}
}

func FuzzNextMatch(f *testing.F) {
	f.Add(uint16(0x1234), uint16(0xff00), uint16(0xcc00))
	f.Add(uint16(0xffff), uint16(0x00ff), uint16(0x00cc))
	f.Add(uint16(0), uint16(0xffff), uint16(0xcccc))
	f.Fuzz(func(t *testing.T, x16, mask16, val16 uint16) {
		x, mask, val := uint32(x16), uint32(mask16), uint32(val16&mask16)
		u, ok := nextMatch(x, mask, val)
		if !ok { // bit 16 and above are free: there is always an answer
			t.Fatalf("nextMatch(%#x, %#x, %#x) found nothing", x, mask, val)
		}
		if u < x || u&mask != val {
			t.Fatalf("nextMatch(%#x, %#x, %#x) = %#x", x, mask, val, u)
		}
		for v := x; v < u; v++ {
			if v&mask == val {
				t.Fatalf("nextMatch(%#x, %#x, %#x) = %#x, but %#x matches", x, mask, val, u, v)
			}
		}
		if p, ok := prevMatch(x, mask, val); ok {
			if p > x || p&mask != val {
				t.Fatalf("prevMatch(%#x) = %#x", x, p)
			}
			for v := p + 1; v <= x && v > p; v++ {
				if v&mask == val {
					t.Fatalf("prevMatch(%#x, %#x, %#x) = %#x, but %#x matches", x, mask, val, p, v)
				}
			}
		}
	})
}

func TestParseMaps(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []Range
		wantErr bool
	}{
		{"typical", "555555554000-555555555000 r--p 00000000 fe:01 1234 /usr/bin/cat\n" +
			"7ffff7dd3000-7ffff7df9000 r-xp 00000000 fe:01 99 /lib/x86_64-linux-gnu/ld.so\n" +
			"7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]\n",
			[]Range{{0x555555554000, 0x555555555000}, {0x7ffff7dd3000, 0x7ffff7df9000}, {0x7ffffffde000, 0x7ffffffff000}}, false},
		{"blank lines", "\n1000-2000 r--p 0 0:0 0\n\n", []Range{{0x1000, 0x2000}}, false},
		{"no dash", "10002000 r--p\n", nil, true},
		{"bad hex", "10g0-2000 r--p\n", nil, true},
		{"end below start", "2000-1000 r--p\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMaps([]byte(tt.text))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseMaps: %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && !slices.Equal(got, tt.want) {
				t.Errorf("got %x, want %x", got, tt.want)
			}
		})
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte("555555554000-555555555000 r--p 00000000 fe:01 1234 /usr/bin/cat\n"))
	f.Add([]byte("1000-2000\n\n3000-3000 x"))
	f.Add([]byte("-\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		rs, err := ParseMaps(text)
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.End < r.Start {
				t.Fatalf("range %x", r)
			}
		}
		free := FreeRanges(rs, 0x10000, 0x7ffffffff000)
		for i, fr := range free {
			if fr.Start >= fr.End || i > 0 && fr.Start <= free[i-1].End-1 {
				t.Fatalf("free ranges %x not sorted and disjoint", free)
			}
			for _, m := range rs {
				if m.Start < m.End && m.Start < fr.End && fr.Start < m.End {
					t.Fatalf("free %x overlaps mapped %x", fr, m)
				}
			}
		}
	})
}

func TestFreeRanges(t *testing.T) {
	tests := []struct {
		name   string
		mapped []Range
		lo, hi uint64
		want   []Range
	}{
		{"nothing mapped", nil, 0x10000, 0x100000, []Range{{0x10000, 0x100000}}},
		{"holes", []Range{{0x30000, 0x40000}, {0x20000, 0x28000}}, 0x10000, 0x100000,
			[]Range{{0x10000, 0x20000}, {0x28000, 0x30000}, {0x40000, 0x100000}}},
		{"overlapping and adjacent", []Range{{0x20000, 0x30000}, {0x28000, 0x38000}, {0x38000, 0x40000}}, 0x10000, 0x50000,
			[]Range{{0x10000, 0x20000}, {0x40000, 0x50000}}},
		{"mappings outside [lo, hi)", []Range{{0x1000, 0x12000}, {0x90000, 0xa0000}}, 0x10000, 0x80000,
			[]Range{{0x12000, 0x80000}}},
		{"everything mapped", []Range{{0, 0x200000}}, 0x10000, 0x100000, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FreeRanges(tt.mapped, tt.lo, tt.hi); !slices.Equal(got, tt.want) {
				t.Errorf("got %x, want %x", got, tt.want)
			}
		})
	}
}

// TestFindPadAddrOwnProcess places pads for sites in this test binary's
// text using its real address space.
func TestFindPadAddrOwnProcess(t *testing.T) {
	text, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	mapped, err := ParseMaps(text)
	if err != nil {
		t.Fatalf("ParseMaps: %v", err)
	}
	free := FreeRanges(mapped, 0x10000, 0x7ffffffff000)
	site := uint64(reflectFuncAddr())
	for _, f := range []map[int]byte{nil, forced(0), forced(1, 2), forced(0, 1, 2, 3)} {
		s := Site{Addr: site, Covered: 5, Forced: f}
		p, err := FindPadAddr(s, free, 4096)
		if len(f) == 4 && site < 0x33333334+0x10000 {
			// rel32 0xcccccccc reaches below 0x10000: nothing to find.
			if !errors.Is(err, ErrNoPadAddr) {
				t.Errorf("forced %v at %#x: %#x, %v; want ErrNoPadAddr", f, site, p, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("forced %v: %v", f, err)
			continue
		}
		checkPad(t, s, free, 4096, p)
	}
}

// TestAddSpare checks that spare memory stays in address order with
// touching or overlapping ranges merged, and that appendWithSpare interleaves
// it with free ranges in address order.
func TestAddSpare(t *testing.T) {
	for _, c := range []struct {
		name      string
		have, add []Range
		want      []Range
	}{
		{"into empty", nil, []Range{{0x100, 0x105}}, []Range{{0x100, 0x105}}},
		{"empty range left out", nil, []Range{{0x100, 0x100}, {0x200, 0x1ff}}, nil},
		{"before and after", []Range{{0x200, 0x210}}, []Range{{0x300, 0x310}, {0x100, 0x110}},
			[]Range{{0x100, 0x110}, {0x200, 0x210}, {0x300, 0x310}}},
		{"touching the previous", []Range{{0x100, 0x110}}, []Range{{0x110, 0x120}}, []Range{{0x100, 0x120}}},
		{"touching the next", []Range{{0x110, 0x120}}, []Range{{0x100, 0x110}}, []Range{{0x100, 0x120}}},
		{"filling a gap", []Range{{0x100, 0x110}, {0x120, 0x130}}, []Range{{0x110, 0x120}}, []Range{{0x100, 0x130}}},
		{"covering several", []Range{{0x100, 0x110}, {0x120, 0x130}, {0x140, 0x150}, {0x200, 0x210}},
			[]Range{{0x108, 0x148}}, []Range{{0x100, 0x150}, {0x200, 0x210}}},
		{"inside one", []Range{{0x100, 0x200}}, []Range{{0x120, 0x130}}, []Range{{0x100, 0x200}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &Installer{spare: slices.Clone(c.have)}
			in.addSpareLocked(c.add...)
			if !slices.Equal(in.spare, c.want) {
				t.Errorf("spare %v, want %v", in.spare, c.want)
			}
		})
	}
	free := []Range{{0x1000, 0x2000}, {0x5000, 0x6000}}
	spare := []Range{{0x100, 0x200}, {0x3000, 0x3005}, {0x7000, 0x7010}}
	want := []Range{{0x100, 0x200}, {0x1000, 0x2000}, {0x3000, 0x3005}, {0x5000, 0x6000}, {0x7000, 0x7010}}
	if got := appendWithSpare(nil, free, spare); !slices.Equal(got, want) {
		t.Errorf("appendWithSpare %v, want %v", got, want)
	}
}

// TestIdleSpare checks that the spare ranges a thread's pc lies in (from
// its first byte to before its end) are left out and the others kept in
// order.
func TestIdleSpare(t *testing.T) {
	spare := []Range{{0x100, 0x110}, {0x200, 0x210}, {0x300, 0x310}}
	for _, c := range []struct {
		name string
		pcs  []uint64
		want []Range
	}{
		{"no thread inside", []uint64{0x50, 0x110, 0x250, 0x400}, spare},
		{"inside the middle one", []uint64{0x208}, []Range{{0x100, 0x110}, {0x300, 0x310}}},
		{"at a range's first byte", []uint64{0x100}, []Range{{0x200, 0x210}, {0x300, 0x310}}},
		{"at a range's last byte", []uint64{0x30f}, []Range{{0x100, 0x110}, {0x200, 0x210}}},
		{"two threads, two ranges", []uint64{0x30a, 0x101}, []Range{{0x200, 0x210}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &Installer{spare: slices.Clone(spare), pcs: c.pcs}
			if got := in.idleSpareLocked(); !slices.Equal(got, c.want) {
				t.Errorf("idle %v, want %v", got, c.want)
			}
		})
	}
}

// TestHolding checks the search for the range holding another.
func TestHolding(t *testing.T) {
	rs := []Range{{0x100, 0x110}, {0x200, 0x210}, {0x300, 0x310}}
	for _, c := range []struct {
		r    Range
		want int
	}{
		{Range{0x100, 0x110}, 0},
		{Range{0x204, 0x208}, 1},
		{Range{0x300, 0x301}, 2},
		{Range{0x30f, 0x311}, -1},
		{Range{0x0f0, 0x101}, -1},
		{Range{0x110, 0x111}, -1},
		{Range{0x400, 0x401}, -1},
		{Range{0x050, 0x051}, -1},
	} {
		if got := holding(rs, c.r); got != c.want {
			t.Errorf("holding(%v) = %d, want %d", c.r, got, c.want)
		}
	}
	if holding(nil, Range{1, 2}) != -1 {
		t.Error("an empty list holds a range")
	}
}

// TestPadCandidatesWalkMatchesScan: on free lists in address order (as
// the installer's are) the outward walk of padCandidates — and so
// nearestPadAddr, its first — returns exactly what the scan of every
// range does, with and without sample points, for one candidate and for
// FindEvictAddrs' 64; the first is a valid pad.
func TestPadCandidatesWalkMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	found := 0
	for iter := range 3000 {
		addr := uint64(0x7f0000000000) + rng.Uint64()%(1<<40)
		var idx []int
		for i := range 4 {
			if rng.Intn(3) == 0 {
				idx = append(idx, i)
			}
		}
		s := Site{Addr: addr, Covered: 5, Forced: forced(idx...)}
		// Disjoint ranges in address order around the jump, some far
		// out of reach, some tiny.
		var free []Range
		at := addr - 3<<30 + rng.Uint64()%(1<<30)
		for n := rng.Intn(60) + 1; n > 0; n-- {
			at += uint64(rng.Intn(1 << (rng.Intn(28) + 1)))
			length := 1 + uint64(rng.Intn(1<<(rng.Intn(30)+1)))
			free = append(free, Range{at, at + length})
			at += length + 1
		}
		size := uint64(1 + rng.Intn(0x2000))
		samples, n := []int{0, evictSamples}[rng.Intn(2)], []int{1, maxEvictTries}[rng.Intn(2)]
		want := scanPadCandidates(s, free, size, samples, n)
		got := padCandidates(s, free, size, samples, n)
		if !slices.Equal(got, want) {
			t.Fatalf("case %d: site %#x forced %v size %#x samples %d n %d free %x:\nwalk %#x\nscan %#x", iter, addr, s.Forced, size, samples, n, free, got, want)
		}
		if len(got) > 0 {
			checkPad(t, s, free, size, got[0])
			found++
		}
	}
	if found < 300 {
		t.Errorf("only %d of 3000 random cases found a candidate", found)
	}
}

// TestTakeFreeLocked: the Batch's free list, updated as pads take parts
// of it, stays what rebuilding it (withoutRange) gives; a take that is
// not inside one free range makes the next search rebuild it.
func TestTakeFreeLocked(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for iter := range 500 {
		in := &Installer{batches: 1}
		var free []Range
		at := uint64(0x10000)
		for n := rng.Intn(20) + 1; n > 0; n-- {
			at += uint64(rng.Intn(0x10000)) + 1
			length := uint64(rng.Intn(0x10000)) + 1
			free = append(free, Range{at, at + length})
			at += length
		}
		want := slices.Clone(free)
		in.freeBuf, in.freeOK = slices.Clone(free), true
		for range 10 {
			f := want[rng.Intn(len(want))]
			start := f.Start + uint64(rng.Int63n(int64(f.End-f.Start)))
			r := Range{start, start + 1 + uint64(rng.Int63n(int64(f.End-start)))}
			if rng.Intn(10) == 0 {
				r.End = f.End + 1 // beyond its range: not a pad's place
			}
			in.takeFreeLocked(in.freeBuf, r)
			if r.End > f.End {
				if in.freeOK {
					t.Fatalf("case %d: a take beyond its free range %x left the list valid", iter, f)
				}
				break
			}
			want = withoutRange(want, r)
			if !in.freeOK || !slices.Equal(in.freeBuf, want) {
				t.Fatalf("case %d: after taking %x: %x (valid %v), want %x", iter, r, in.freeBuf, in.freeOK, want)
			}
			if len(want) == 0 {
				break
			}
		}
	}
}

// TestPadMappingLocked: within a Batch the memory mapped for a pad at a
// forced address is its 64 KiB window, clipped to the unmapped gap
// around the pad's pages less 1 MiB on either side (a heap's or a
// stack's room); outside a Batch, where the pages lie within such a
// margin, or where they are mapped already, just the pad's pages.
func TestPadMappingLocked(t *testing.T) {
	const g = padMapGranule
	below, above := Range{0x20000000, 0x20001000}, Range{0x202f8000, 0x202f9000}
	mapped := []Range{{0x400000, 0x401000}, below, above}
	for _, c := range []struct {
		name     string
		batches  int
		from, to uint64
		want     Range
	}{
		{"outside a batch", 0, 0x20145010, 0x20145015, Range{0x20145000, 0x20146000}},
		{"the whole window", 1, 0x20145010, 0x20145015, Range{0x20140000, 0x20140000 + g}},
		{"over a page boundary", 1, 0x1000fffe, 0x10010003, Range{0x10000000, 0x10011000}},
		{"clipped by the margin below", 1, 0x20105010, 0x20105015, Range{below.End + padMapMargin, 0x20110000}},
		{"clipped by the margin above", 1, 0x201f5010, 0x201f5015, Range{0x201f0000, above.Start - padMapMargin}},
		{"inside a margin", 1, 0x20001010, 0x20001015, Range{0x20001000, 0x20002000}},
		{"pages mapped already", 1, 0x20000ffe, 0x20001002, Range{0x20000000, 0x20002000}},
		{"the lowest window", 1, 0x10010, 0x10015, Range{minMapAddr, 0x20000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &Installer{mapped: slices.Clone(mapped), batches: c.batches}
			if got := in.padMappingLocked(c.from, c.to); got != c.want {
				t.Errorf("padMappingLocked(%#x, %#x) = %#x, want %#x", c.from, c.to, got, c.want)
			}
		})
	}
}

// BenchmarkPadCandidates: an evicting site's pad search (8 samples a
// range, 64 candidates) among the 3,000 free ranges a QTStart of a
// thousand tracepoints leaves: the outward walk against the scan.
func BenchmarkPadCandidates(b *testing.B) {
	addr := uint64(0x401000)
	s := Site{Addr: addr, Covered: 5, Forced: forced(0)}
	var free []Range
	for i := range 3000 {
		at := 0x10000000 + uint64(i)*0x2000
		free = append(free, Range{at, at + 0x1000})
	}
	for _, c := range []struct {
		name string
		f    func(Site, []Range, uint64, int, int) []uint64
	}{{"walk", padCandidates}, {"scan", scanPadCandidates}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if len(c.f(s, free, 0x400, evictSamples, maxEvictTries)) == 0 {
					b.Fatal("no candidate")
				}
			}
		})
	}
}
