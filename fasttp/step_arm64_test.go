package fasttp

import (
	"encoding/binary"
	"testing"
)

func TestArm64StoreExclusive(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    uint32
		want bool
	}{
		{"stlxr w3, x1, [x2]", 0xC803FC41, true},
		{"stxr w0, x1, [x2]", 0xC8007C41, true},
		{"stxr w5, w1, [sp]", 0x88057FE1, true},
		{"stlxrb w1, w2, [x3]", 0x0801FC62, true},
		{"ldaxr x0, [x9]", 0xC85FFD20, false},
		{"ldxr x0, [x9]", 0xC85F7D20, false},
		{"stlr x1, [x2]", 0xC89FFC41, false},
		{"stxp w0, x1, x2, [x3]", 0xC8200861, false},
		{"cas x0, x1, [x2] (LSE)", 0xC8A07C41, false},
		{"str x0, [sp]", 0xF90003E0, false},
	} {
		if got := isStoreExclusive(tc.w); got != tc.want {
			t.Errorf("%s (%#08x): %v, want %v", tc.name, tc.w, got, tc.want)
		}
	}
}

// TestArm64AtomicSequence: no tracepoint from a load-exclusive to its
// store-exclusive (refuseSite asks inAtomicSequence), read from the code
// around the site, also at the start of readable code.
func TestArm64AtomicSequence(t *testing.T) {
	const (
		page  = 0 // nothing before it to read
		ldaxr = 0x885ffc02
		stlxr = 0x8803fc02
		add   = 0x11000442
		cbnz  = 0x35ffffa3
	)
	code := make([]byte, codePage)
	for i := 0; i < codePage; i += 4 {
		binary.LittleEndian.PutUint32(code[i:], add)
	}
	put := func(off int, w uint32) { binary.LittleEndian.PutUint32(code[off:], w) }
	put(0, ldaxr) // at the page's start: nothing readable before it
	put(8, stlxr)
	put(0x100, ldaxr)
	put(0x110, stlxr)
	put(0x114, cbnz)
	in := &Installer{codePages: codeCache{page: code}}
	for _, tc := range []struct {
		off  uint64
		want bool
	}{
		{0, true}, {4, true}, {8, true}, {12, false},
		{0xfc, false}, {0x100, true}, {0x104, true}, {0x10c, true}, {0x110, true}, {0x114, false},
	} {
		if got := in.inAtomicSequence(page + tc.off); got != tc.want {
			t.Errorf("+%#x: %v, want %v", tc.off, got, tc.want)
		}
	}
}
