package fasttp

import (
	"encoding/binary"
	"errors"
	"math/rand"
	"strings"
	"testing"
)

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
