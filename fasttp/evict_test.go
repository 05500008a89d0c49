package fasttp

import (
	"errors"
	"slices"
	"testing"
)

func TestEvictSite(t *testing.T) {
	const addr = 0x401000
	yes := func(uint64) bool { return true }
	tests := []struct {
		name   string
		code   []byte
		isCode CodeOracle
		ok     bool
		foot   int
		noPad  bool // planned, but its bytes fix the pad below address 0
	}{
		{"pop rbx; mov eax, 1", []byte{0x5b, 0xb8, 1, 0, 0, 0, 0x90, 0x90}, nil, true, 6, false},
		{"pop r14; call rel32", []byte{0x41, 0x5e, 0xe8, 0, 0, 0, 0, 0x90}, nil, true, 7, false},
		{"xor eax, eax; lea rdi, [rip+x] (7 bytes)", []byte{0x31, 0xc0, 0x48, 0x8d, 0x3d, 1, 2, 3, 4, 0x90}, nil, true, 9, false},
		{"pop rbx; pop rbp keeping ret, nop, nop", []byte{0x5b, 0x5d, 0xc3, 0x90, 0x90, 0x90, 0x90}, nil, true, 6, true},
		{"pop rbx; pop rbp; ret: too few bytes to keep", []byte{0x5b, 0x5d, 0xc3}, nil, false, 0, false},
		{"ret; mov eax, 1 without an oracle", []byte{0xc3, 0xb8, 1, 0, 0, 0, 0x90}, nil, false, 0, false},
		{"ret; mov eax, 1, code vouched for", []byte{0xc3, 0xb8, 1, 0, 0, 0, 0x90}, yes, true, 6, false},
		{"jmp rel8; call rel32, code vouched for", []byte{0xeb, 0x10, 0xe8, 0, 0, 0, 0, 0x90}, yes, true, 7, false},
		{"a plain jump fits", []byte{0xb8, 1, 0, 0, 0, 0x90}, nil, false, 0, false},
		{"jne into the evicted jump's bytes", []byte{0x75, 0x01, 0xb8, 1, 0, 0, 0, 0x90}, nil, false, 0, false},
		{"jmp rel8; endbr64; mov: the next one keeps a byte, vouched for", []byte{0xeb, 0x10, 0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x89, 0xc7}, yes, true, 7, false},
		{"jne to the evicted instruction", []byte{0x75, 0x00, 0xb8, 1, 0, 0, 0, 0x90}, nil, true, 7, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := EvictSite(tt.code, addr, tt.isCode)
			if !tt.ok {
				if !errors.Is(err, ErrSiteRefused) {
					t.Fatalf("EvictSite = %+v, %v; want a refusal", s, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Footprint() != tt.foot || s.Evicted == nil || s.Evicted.Addr != addr+uint64(s.Covered) {
				t.Fatalf("footprint %d (want %d), evicted %+v", s.Footprint(), tt.foot, s.Evicted)
			}
			// Both jumps must land where FindEvictAddrs put them.
			free := []Range{{0x10000, 0x400000}, {0x800000, 0x7ffff000}}
			pad, tramp, err := FindEvictAddrs(s, free, 1024)
			if tt.noPad {
				if !errors.Is(err, ErrNoPadAddr) {
					t.Fatalf("FindEvictAddrs = %#x, %#x, %v; want no pad address", pad, tramp, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pad/4096 == tramp/4096 {
				t.Errorf("pad %#x and trampoline %#x share a page", pad, tramp)
			}
			s.Tramp = tramp
			patch, err := s.PatchBytes(pad)
			if err != nil {
				t.Fatal(err)
			}
			if got := jumpTarget(patch, 0, addr); got != pad {
				t.Errorf("the jump goes to %#x, want the pad %#x", got, pad)
			}
			if got := jumpTarget(patch, s.Covered, addr); got != tramp {
				t.Errorf("the evicted jump goes to %#x, want the trampoline %#x", got, tramp)
			}
		})
	}
}

// jumpTarget decodes the jmp rel32 at patch[off] (patch is at addr).
func jumpTarget(patch []byte, off int, addr uint64) uint64 {
	if patch[off] != 0xe9 {
		return 0
	}
	rel := int32(uint32(patch[off+1]) | uint32(patch[off+2])<<8 | uint32(patch[off+3])<<16 | uint32(patch[off+4])<<24)
	return addr + uint64(off) + 5 + uint64(int64(rel))
}

func TestWithoutRange(t *testing.T) {
	free := []Range{{0, 100}, {200, 300}}
	got := withoutRange(free, Range{50, 250})
	want := []Range{{0, 50}, {250, 300}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("withoutRange = %v, want %v", got, want)
	}
}

func TestParseShapes(t *testing.T) {
	got, err := ParseShapes("plain, int3")
	if err != nil || len(got) != 2 || !got[ShapePlain] || !got[ShapeInt3] {
		t.Fatalf("ParseShapes(plain, int3) = %v, %v", got, err)
	}
	if all, err := ParseShapes("all"); err != nil || len(all) != 6 {
		t.Fatalf("ParseShapes(all) = %v, %v", all, err)
	}
	// A plain jump after an entry's push needs "push" too.
	for _, c := range []struct {
		list string
		want int
	}{{"plain", 1}, {"plain,push", 2}, {"push", 0}} {
		shapes, _ := ParseShapes(c.list)
		in := &Installer{shapes: shapes}
		out, _ := in.allowedShapes([]Site{{Addr: 0x1000}, {Addr: 0x2001, Lead: 1}})
		if len(out) != c.want {
			t.Errorf("--ftrace-shapes=%s: %d of a plain jump and one after a push allowed, want %d", c.list, len(out), c.want)
		}
	}
	if _, err := ParseShapes("plain,bogus"); err == nil {
		t.Fatal("ParseShapes accepted an unknown shape")
	}
	code := []byte{0x48, 0x83, 0xec, 0x20, 0x48, 0x89, 0xe5, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90}
	cands, err := SiteCandidates(nil, code, 0x401000, nil)
	if err != nil {
		t.Fatal(err)
	}
	var shapes []Shape
	for _, c := range cands {
		shapes = append(shapes, c.Shape())
	}
	want := []Shape{ShapeKept, ShapeKept, ShapeKept, ShapeKept, ShapeEvict, ShapeInt3, ShapeInt3, ShapeInt3, ShapeInt3}
	if !slices.Equal(shapes, want) {
		t.Errorf("shapes %v, want %v", shapes, want)
	}
}

// TestPadCandidatesFullyForced: a site whose four displacement bytes are
// all forced has one pad address; it is found in a free list in address
// order (binary search) and in one out of order (the scan), and not
// where no free range holds the pad whole.
func TestPadCandidatesFullyForced(t *testing.T) {
	s := Site{Addr: 0x401000, Covered: 5, Forced: forced(0, 1, 2, 3)}
	mask, val := forcedBits(s.Forced)
	if mask != 0xffffffff {
		t.Fatalf("mask %#x", mask)
	}
	p := s.JumpEnd() + uint64(int64(int32(val)))
	holds := Range{p - 0x100, p + 0x1000}
	for _, c := range []struct {
		name string
		free []Range
		want []uint64
	}{
		{"in order", []Range{{0x10000, 0x20000}, holds, {p + 0x2000, p + 0x3000}}, []uint64{p}},
		{"out of order", []Range{{p + 0x2000, p + 0x3000}, holds, {0x10000, 0x20000}}, []uint64{p}},
		{"too short", []Range{{0x10000, 0x20000}, {p - 0x100, p + 0x10}}, nil},
		{"before every range", []Range{{p + 1, p + 0x1000}}, nil},
		{"none", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := padCandidates(s, c.free, 0x20, 0, 1); !slices.Equal(got, c.want) {
				t.Errorf("padCandidates = %#x, want %#x", got, c.want)
			}
		})
	}
}
