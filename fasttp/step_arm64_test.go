package fasttp

import "testing"

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
