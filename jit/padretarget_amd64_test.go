package jit

import (
	"bytes"
	"testing"
)

// TestPadRetarget: a pad built for one tracepoint, cloned and retargeted
// to another, is byte for byte the pad built for that one, whatever the
// spec; the original is unchanged.
func TestPadRetarget(t *testing.T) {
	cond := compileAX(t, "const8 1; reg 1; div_unsigned; end")
	collect := []*Code{compileAX(t, "reg 4; const8 16; trace; end")}
	specs := []struct {
		name string
		spec PadSpec
	}{
		{"compact", PadSpec{Compact: true, FSBase: true, Lanes: 4}},
		{"regs", PadSpec{CollectRegs: true, FSBase: true, Lanes: 4}},
		{"regs xsave tpload", PadSpec{CollectRegs: true, TPLoad: true, Lanes: 2, XSaveMask: 7, XSaveSize: 1088}},
		{"cond collect", PadSpec{Cond: cond, Collect: collect, CollectCap: 64, Lanes: 4}},
		{"after a push", PadSpec{CollectRegs: true, SPBias: 8, Lanes: 4}},
	}
	targets := []struct {
		addr uint64
		idx  uint32
	}{
		{0x401000, 0}, {0x401000, 1}, {0x5555555551a0, 7}, {0x7ffff7c29d90, RecCompactMaxTP}, {0x1000, 100},
	}
	var scratch *JumpPad // CloneTo's memory, shared by every spec and target
	for _, c := range specs {
		t.Run(c.name, func(t *testing.T) {
			base := c.spec
			base.Addr, base.TailAddr, base.Ctl = 0x7000_0000, 0x7000_4000, 0x7100_0000
			base.TPAddr, base.TPIndex = 0x400123, 3
			orig, err := BuildJumpPadAMD64(base)
			if err != nil {
				t.Fatal(err)
			}
			if orig.fixups == nil {
				t.Fatal("the pad cannot be retargeted")
			}
			saved := append([]byte(nil), orig.Code...)
			for i, tg := range targets {
				spec := base
				spec.TPAddr, spec.TPIndex = tg.addr, tg.idx
				want, err := BuildJumpPadAMD64(spec)
				if err != nil {
					t.Fatal(err)
				}
				got := orig.Clone()
				if i%2 == 1 {
					got = orig.CloneTo(scratch) // over the last pad's code
					scratch = got
				}
				if err := got.Retarget(tg.addr, tg.idx); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Code, want.Code) || got.Skip != want.Skip || len(got.Faults) != len(want.Faults) {
					t.Errorf("retargeted to %#x index %d: code differs from a pad built for it", tg.addr, tg.idx)
				}
			}
			if !bytes.Equal(orig.Code, saved) {
				t.Error("retargeting a clone changed the original")
			}
		})
	}
}
