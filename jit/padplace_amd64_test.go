package jit

import (
	"bytes"
	"slices"
	"testing"

	"gotpstub/agentexpr"
)

// A pad built at one address and placed at another is the pad built
// there: same code, Skip and Faults.
func TestJumpPadPlace(t *testing.T) {
	faulting := func(t *testing.T, src string) *Code {
		bc, err := agentexpr.Assemble(src)
		if err != nil {
			t.Fatal(err)
		}
		e, err := agentexpr.Parse(bc)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Compile(e, "amd64", Options{FaultLoads: true})
		if err != nil || c.Fallback != "" || len(c.Faults) == 0 {
			t.Fatalf("compile %q: %v %q, %d faults", src, err, c.Fallback, len(c.Faults))
		}
		return c
	}
	const ctl = 0x7f0000100000
	cases := []struct {
		name string
		spec func(t *testing.T) PadSpec
	}{
		{"no actions", func(*testing.T) PadSpec { return PadSpec{Compact: true, FSBase: true} }},
		{"regs and xsave", func(*testing.T) PadSpec {
			return PadSpec{CollectRegs: true, XSaveMask: 7, XSaveSize: 832, TPLoad: true}
		}},
		{"condition and collection that may fault", func(t *testing.T) PadSpec {
			return PadSpec{Cond: faulting(t, "reg 0; ref32; end"), Collect: []*Code{faulting(t, "reg 0; const8 8; trace; end")},
				CollectCap: 64, FSBase: true}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := c.spec(t)
			spec.TPAddr, spec.Ctl, spec.Lanes, spec.TPIndex = 0x401000, ctl, 16, 3
			probe, err := BuildJumpPadAMD64(spec)
			if err != nil {
				t.Fatal(err)
			}
			for _, at := range []struct{ addr, tail uint64 }{
				{0x10000000, 0x10000000 + 0x800},
				{0x7f0000200000, 0x7f0000200000 + 0x1000},
				{0x500000, 0x480000}, // the tail below the pad
			} {
				spec.Addr, spec.TailAddr = at.addr, at.tail
				want, err := BuildJumpPadAMD64(spec)
				if err != nil {
					t.Fatal(err)
				}
				got := &JumpPad{Code: slices.Clone(probe.Code), Skip: probe.Skip, Faults: slices.Clone(probe.Faults),
					StackBytes: probe.StackBytes, at: probe.at, tailRels: probe.tailRels}
				if err := got.Place(at.addr, at.tail); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Code, want.Code) || got.Skip != want.Skip || !slices.Equal(got.Faults, want.Faults) {
					t.Errorf("placed at %#x, tail %#x: code equal %v, skip %#x want %#x, faults %x want %x",
						at.addr, at.tail, bytes.Equal(got.Code, want.Code), got.Skip, want.Skip, got.Faults, want.Faults)
				}
				if len(want.Faults) == 0 && c.name != "no actions" {
					t.Errorf("no faults listed: the case checks nothing of them")
				}
			}
			if err := probe.Place(0x7f0000000000, 0x1000); err == nil {
				t.Errorf("a tail 127 TB away was accepted")
			}
		})
	}
}
