package tdesc

import "encoding/binary"

// Layout of the XSAVE area (standard, non-compacted format, as XSAVE
// writes it and ptrace's NT_X86_XSTATE returns it).
const (
	FXSaveSize     = 512 // the legacy (FXSAVE) region
	XStateBVOffset = 512 // XSTATE_BV in the XSAVE header
	YMMHiOffset    = 576 // the YMM_Hi128 component
	XSaveAVXSize   = YMMHiOffset + 256
	XFeatureX87    = 1
	XFeatureSSE    = 2
	XFeatureAVX    = 4
)

// Short names inside the package.
const (
	fxsaveSize     = FXSaveSize
	xstateBVOffset = XStateBVOffset
	ymmHiOffset    = YMMHiOffset
	xsaveAVXSize   = XSaveAVXSize
	xfeatureX87    = XFeatureX87
	xfeatureSSE    = XFeatureSSE
	xfeatureAVX    = XFeatureAVX
)

// XSaveSize returns the bytes of the standard XSAVE area that hold the
// components XSaveMask(avx) selects.
func XSaveSize(avx bool) int {
	if avx {
		return xsaveAVXSize
	}
	return xstateBVOffset + 64
}

// XSaveMask returns the XSAVE requested-feature bitmap for the registers
// of the layout: x87 and SSE, and AVX when avx.
func XSaveMask(avx bool) uint64 {
	if avx {
		return xfeatureX87 | xfeatureSSE | xfeatureAVX
	}
	return xfeatureX87 | xfeatureSSE
}

// FillXSave copies the x87, SSE and AVX registers out of an XSAVE area in
// the standard (non-compacted) format — what ptrace's NT_X86_XSTATE gives
// and what the XSAVE instruction writes — or out of a 512-byte FXSAVE
// area. Components the header's XSTATE_BV marks as in their initial state
// get their initial values, whatever the area holds there.
func FillXSave(r *Regs, fp []byte) {
	if len(fp) < fxsaveSize {
		return
	}
	bv := uint64(xfeatureX87 | xfeatureSSE)
	if len(fp) >= xstateBVOffset+8 {
		bv = binary.LittleEndian.Uint64(fp[xstateBVOffset:])
	}
	le := binary.LittleEndian
	if bv&xfeatureX87 != 0 {
		for i := 0; i < 8; i++ {
			_ = r.Set(ST0+i, fp[32+16*i:32+16*i+10])
		}
		_ = r.SetUint64(FCTRL, uint64(le.Uint16(fp[0:])))
		_ = r.SetUint64(FSTAT, uint64(le.Uint16(fp[2:])))
		_ = r.SetUint64(FTAG, uint64(fullTag(fp)))
		_ = r.SetUint64(FOP, uint64(le.Uint16(fp[6:])&0x7ff))
		_ = r.SetUint64(FIOFF, uint64(le.Uint32(fp[8:])))
		_ = r.SetUint64(FISEG, uint64(le.Uint16(fp[12:])))
		_ = r.SetUint64(FOOFF, uint64(le.Uint32(fp[16:])))
		_ = r.SetUint64(FOSEG, uint64(le.Uint16(fp[20:])))
	} else {
		// The x87 unit is in its initial state.
		for i := 0; i < 8; i++ {
			_ = r.Set(ST0+i, make([]byte, 10))
		}
		for _, n := range []int{FSTAT, FOP, FIOFF, FISEG, FOOFF, FOSEG} {
			_ = r.SetUint64(n, 0)
		}
		_ = r.SetUint64(FCTRL, 0x37f)
		_ = r.SetUint64(FTAG, 0xffff)
	}
	for i := 0; i < 16; i++ {
		if bv&xfeatureSSE != 0 {
			_ = r.Set(XMM0+i, fp[160+16*i:176+16*i])
		} else {
			_ = r.Set(XMM0+i, make([]byte, 16))
		}
	}
	_ = r.SetUint64(MXCSR, uint64(le.Uint32(fp[24:])))
	if r.Layout.HasAVX {
		for i := 0; i < 16; i++ {
			if bv&xfeatureAVX != 0 && len(fp) >= xsaveAVXSize {
				_ = r.Set(YMM0H+i, fp[ymmHiOffset+16*i:ymmHiOffset+16*i+16])
			} else {
				_ = r.Set(YMM0H+i, make([]byte, 16))
			}
		}
	}
}

// fullTag expands the FXSAVE abridged tag byte into the x87 tag word,
// classifying each non-empty register from its contents.
func fullTag(fx []byte) uint16 {
	abridged := fx[4]
	top := (binary.LittleEndian.Uint16(fx[2:]) >> 11) & 7
	var tag uint16
	for phys := 0; phys < 8; phys++ {
		t := uint16(3) // empty
		if abridged&(1<<phys) != 0 {
			st := (phys - int(top) + 8) % 8
			raw := fx[32+16*st:]
			mant := binary.LittleEndian.Uint64(raw)
			exp := binary.LittleEndian.Uint16(raw[8:]) & 0x7fff
			switch {
			case exp == 0x7fff:
				t = 2
			case exp == 0 && mant == 0:
				t = 1
			case exp == 0:
				t = 2
			case mant>>63 == 0:
				t = 2
			default:
				t = 0
			}
		}
		tag |= t << (2 * phys)
	}
	return tag
}
