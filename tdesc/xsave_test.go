package tdesc

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestX87Tags(t *testing.T) {
	fx := make([]byte, 512)
	binary.LittleEndian.PutUint16(fx[2:], 7<<11) // top = 7
	fx[4] = 0x80 | 0x40                          // physical 7 and 6 in use
	// st0 = physical 7: 1.0 (valid); st7 = physical 6: zero.
	copy(fx[32:], []byte{0, 0, 0, 0, 0, 0, 0, 0x80, 0xff, 0x3f})
	tag := fullTag(fx)
	want := uint16(0x0fff) | 0<<14 | 1<<12
	if tag != want {
		t.Errorf("tag %#04x, want %#04x", tag, want)
	}
}

func TestFillXSave(t *testing.T) {
	l := AMD64Linux(true)
	area := make([]byte, XSaveSize(true))
	for i := range area {
		area[i] = 0xee // stale bytes: only what XSTATE_BV marks may be read
	}
	binary.LittleEndian.PutUint32(area[24:], 0x1f80)              // mxcsr
	copy(area[160+16*3:], bytes.Repeat([]byte{3}, 16))            // xmm3
	copy(area[ymmHiOffset+16*3:], bytes.Repeat([]byte{0x33}, 16)) // ymm3h
	cases := []struct {
		name     string
		bv       uint64
		xmm3     byte
		ymm3h    byte
		fctrl    uint64
		mxcsrSet bool
	}{
		{"all in use", 7, 3, 0x33, 0xeeee, true},
		{"AVX in its initial state", 3, 3, 0, 0xeeee, true},
		{"SSE and AVX initial", 1, 0, 0, 0xeeee, true},
		{"x87 initial", 6, 3, 0x33, 0x37f, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			binary.LittleEndian.PutUint64(area[xstateBVOffset:], c.bv)
			r := &Regs{Layout: l, Data: make([]byte, l.Size)}
			FillXSave(r, area)
			if got := r.Get(XMM0 + 3); got[0] != c.xmm3 || got[15] != c.xmm3 {
				t.Errorf("xmm3 %x, want bytes %#x", got, c.xmm3)
			}
			if got := r.Get(YMM0H + 3); got[0] != c.ymm3h {
				t.Errorf("ymm3h %x, want bytes %#x", got, c.ymm3h)
			}
			if got := r.Uint64(FCTRL); got != c.fctrl {
				t.Errorf("fctrl %#x, want %#x", got, c.fctrl)
			}
			if got := r.Uint64(MXCSR); got != 0x1f80 {
				t.Errorf("mxcsr %#x", got)
			}
		})
	}
	if XSaveMask(true) != 7 || XSaveMask(false) != 3 || XSaveSize(false) != 576 || XSaveSize(true) != 832 {
		t.Errorf("XSaveMask/XSaveSize: %d %d %d %d", XSaveMask(true), XSaveMask(false), XSaveSize(false), XSaveSize(true))
	}
}
