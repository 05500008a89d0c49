package arm64

import (
	"encoding/binary"
	"errors"
	"testing"

	"gotpstub/tdesc"
	"gotpstub/trapfallback/displace"
)

func word(w uint32) []byte { return binary.LittleEndian.AppendUint32(nil, w) }

func TestAnalyse(t *testing.T) {
	const pc = 0x400000
	tests := []struct {
		name    string
		code    []byte
		addr    uint64
		how     displace.How
		wantErr bool
	}{
		{name: "nop", code: word(0xd503201f), how: displace.Skip},
		{name: "bti c", code: word(0xd503245f), how: displace.Skip},
		{name: "bti jc", code: word(0xd50324df), how: displace.Skip},
		{name: "paciasp is not a nop", code: word(0xd503233f), how: displace.CopyAndStep},
		{name: "add x0, x0, #1", code: word(0x91000400), how: displace.CopyAndStep},
		{name: "adrp x2", code: word(0x90000002), how: displace.CopyAndStep},
		{name: "bl", code: word(0x94000010), how: displace.CopyAndStep},
		{name: "b.lt", code: word(0x5400004b), how: displace.CopyAndStep},
		{name: "ldxr x0, [x1]", code: word(0xc85f7c20), wantErr: true},
		{name: "svc #0", code: word(0xd4000001), how: displace.CopyAndStep},
		{name: "hvc #0", code: word(0xd4000002), wantErr: true},
		{name: "brk #0", code: word(0xd4200000), wantErr: true},
		{name: "short", code: []byte{0x1f, 0x20, 0x03}, wantErr: true},
		{name: "misaligned", code: word(0xd503201f), addr: pc + 2, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr
			if addr == 0 {
				addr = pc
			}
			d, err := Analyse(addr, tc.code)
			if tc.wantErr {
				if !errors.Is(err, displace.ErrUnsupported) {
					t.Fatalf("err = %v, want ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.How() != tc.how || d.Len() != 4 || string(d.Bytes()) != string(tc.code) {
				t.Errorf("how %v len %d bytes % x; want %v 4 % x", d.How(), d.Len(), d.Bytes(), tc.how, tc.code)
			}
		})
	}
}

// TestRelocateBranches: the copy of a pc-relative instruction still
// refers to the original target from its slot, ends by branching home,
// fits a slot, and a slot beyond b's reach is refused.
func TestRelocateBranches(t *testing.T) {
	const pc = 0x400000
	d, err := Analyse(pc, word(0x94000010)) // bl pc+0x40
	if err != nil {
		t.Fatal(err)
	}
	slot := uint64(pc + 0x100000)
	code, err := d.Relocate(slot)
	if err != nil {
		t.Fatal(err)
	}
	if len(code) == 0 || len(code)%4 != 0 || len(code) > ISA.SlotSize {
		t.Fatalf("copy of %d bytes (slot %d)", len(code), ISA.SlotSize)
	}
	// The last word is b to the target pc+0x40 (bl's link register was
	// set to pc+4 before it).
	last := binary.LittleEndian.Uint32(code[len(code)-4:])
	if last>>26 != 0x05 {
		t.Fatalf("last word %#08x is not b", last)
	}
	off := int64(int32(last<<6)) >> 4
	if got := int64(slot) + int64(len(code)-4) + off; got != pc+0x40 {
		t.Errorf("the copy branches to %#x, want %#x", got, pc+0x40)
	}
	if _, err := d.Relocate(pc + 1<<28); !errors.Is(err, displace.ErrUnsupported) {
		t.Errorf("slot 256 MB away: %v, want ErrUnsupported", err)
	}
}

// TestAfterStep: stepping is done once the pc has left the copy.
func TestAfterStep(t *testing.T) {
	d, err := Analyse(0x400000, word(0x5400004b)) // b.lt pc+8
	if err != nil {
		t.Fatal(err)
	}
	const slot, size = 0x500000, 12
	regs := tdesc.AArch64Linux().NewRegs()
	for _, tc := range []struct {
		pc   uint64
		done bool
	}{{slot + 4, false}, {slot + 8, false}, {slot + size, true}, {0x400004, true}, {0x400008, true}, {slot - 4, true}} {
		if err := regs.SetUint64(tdesc.AArch64PC, tc.pc); err != nil {
			t.Fatal(err)
		}
		done, err := d.AfterStep(regs, nil, slot, size)
		if err != nil || done != tc.done {
			t.Errorf("pc %#x: done %v, %v; want %v", tc.pc, done, err, tc.done)
		}
	}
}
