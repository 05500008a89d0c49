package inferior

import (
	"math/rand/v2"
	"testing"
)

// TestPatchSetOverlapping checks the sorted index against a scan of
// every patch, for random patches and queries.
func TestPatchSetOverlapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newPatchSet()
	var all []*codePatch
	for range 300 {
		c := &codePatch{addr: 0x1000 + rng.Uint64N(4096), code: make([]byte, 1+rng.IntN(15))}
		if len(s.overlapping(c.addr, uint64(len(c.code)))) != 0 {
			continue // patches never overlap
		}
		s.add(c)
		all = append(all, c)
		if rng.IntN(4) == 0 { // and some go again
			k := rng.IntN(len(all))
			s.remove(all[k].addr)
			all = append(all[:k], all[k+1:]...)
		}
	}
	if len(s.byAddr) != len(all) || len(s.starts) != len(all) {
		t.Fatalf("%d patches in the map, %d starts, want %d", len(s.byAddr), len(s.starts), len(all))
	}
	for range 5000 {
		addr, n := 0xf00+rng.Uint64N(4400), 1+rng.Uint64N(40)
		var want []*codePatch
		for _, c := range all {
			if c.overlaps(addr, n) {
				want = append(want, c)
			}
		}
		got := s.overlapping(addr, n)
		if len(got) != len(want) {
			t.Fatalf("[%#x, +%d): %d patches, want %d", addr, n, len(got), len(want))
		}
		for i := 1; i < len(got); i++ {
			if got[i-1].addr >= got[i].addr {
				t.Fatalf("[%#x, +%d): not by address", addr, n)
			}
		}
	}
	if got := s.overlapping(3, 10); len(got) != 0 { // addr below maxLen: no wrap
		t.Errorf("%d patches near 0", len(got))
	}
}
