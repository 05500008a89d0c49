// Package arm64 runs AArch64 instructions out of line for the trap
// installer (displace.Insn).
//
// nop and bti are skipped. Every other instruction package fasttp/a64
// accepts is copied to a slot within ±128 MB (b's reach) as a64.Relocate
// rewrites it, pc-relative operands (adr, adrp, literal loads, b, bl,
// b.cond, cbz, tbz, blr's link) re-encoded so it computes what it did at
// its own address, followed by a branch back. The copy is single-stepped
// until the pc leaves it: it has then executed the instruction and
// branched home, or wherever the instruction branched, so no pc needs
// mapping back. svc is stepped in its slot too (the system call made
// there). What else a64.Decode refuses (exclusives, whose monitor a
// single-step clears; brk, MOPS sequences, udf) is refused here too.
//
// The package is pure Go and builds for every GOARCH.
package arm64

import (
	"encoding/binary"
	"fmt"

	"gotpstub/fasttp/a64"
	"gotpstub/tdesc"
	"gotpstub/trapfallback/displace"
)

// ISA describes AArch64 to the trap installer.
var ISA = displace.ISA{
	MaxInsnLen: 4,
	SlotSize:   4 * 16, // a64.MaxWords (9) rounded up
	Reach:      1 << 27,
	Analyse:    Analyse,
}

const (
	nop     = 0xd503201f
	btiMask = 0xffffff3f // bti, bti c, bti j, bti jc: hint #32, #34, #36, #38
	bti     = 0xd503241f
	svcMask = 0xffe0001f // svc #imm16
	svc     = 0xd4000001
)

// insn is one analysed instruction.
type insn struct {
	in   a64.Insn
	how  displace.How
	orig []byte
}

// Analyse decodes the instruction at addr.
func Analyse(addr uint64, code []byte) (displace.Insn, error) {
	if len(code) < 4 {
		return nil, fmt.Errorf("%w: %d bytes at %#x, an instruction has 4", displace.ErrUnsupported, len(code), addr)
	}
	if addr&3 != 0 {
		return nil, fmt.Errorf("%w: misaligned address %#x", displace.ErrUnsupported, addr)
	}
	word := binary.LittleEndian.Uint32(code)
	in, err := a64.Decode(word, addr)
	if err != nil && word&svcMask == svc {
		// Refused for pads (a thread could block in one), but a slot
		// is never freed, so a trap may step a system call there: a
		// restart rewinds to the svc in the slot, a signal handler
		// returns after it, and the branch back follows.
		in, err = a64.Insn{Word: word, PC: addr, Kind: a64.KindPlain}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", displace.ErrUnsupported, err)
	}
	d := &insn{in: in, how: displace.CopyAndStep, orig: append([]byte(nil), code[:4]...)}
	if word == nop || word&btiMask == bti {
		d.how = displace.Skip
	}
	return d, nil
}

// How implements displace.Insn.
func (d *insn) How() displace.How { return d.how }

// Len implements displace.Insn.
func (d *insn) Len() int { return 4 }

// Bytes implements displace.Insn.
func (d *insn) Bytes() []byte { return d.orig }

// Emulate implements displace.Insn: nothing is emulated on arm64.
func (d *insn) Emulate(*tdesc.Regs, displace.Memory) error {
	return fmt.Errorf("%w: %#08x is not emulated", displace.ErrUnsupported, d.in.Word)
}

// Relocate implements displace.Insn.
func (d *insn) Relocate(slot uint64) ([]byte, error) {
	words, err := a64.Relocate(d.in, slot, d.in.PC+4)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", displace.ErrUnsupported, err)
	}
	code := make([]byte, 0, 4*len(words))
	for _, w := range words {
		code = binary.LittleEndian.AppendUint32(code, w)
	}
	return code, nil
}

// AfterStep implements displace.Insn: the copy is done once the pc has
// left it (the copy branches home, or where the instruction branched).
func (d *insn) AfterStep(regs *tdesc.Regs, _ displace.Memory, slot uint64, size int) (bool, error) {
	pc := regs.Uint64(regs.Layout.PC)
	return pc < slot || pc >= slot+uint64(size), nil
}
