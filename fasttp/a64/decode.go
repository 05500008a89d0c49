package a64

import (
	"errors"
	"fmt"
)

// Kind classifies an instruction by what executing it out of line needs.
type Kind uint8

// Instruction kinds. Every kind but KindPlain reads the pc (or writes it
// into the link register) and is rewritten by Relocate.
const (
	// KindPlain is a position-independent instruction, copied as is.
	KindPlain Kind = iota
	// KindADR is adr Xd, label.
	KindADR
	// KindADRP is adrp Xd, label (Target is the 4 KB page).
	KindADRP
	// KindLoadLit is ldr Wt/Xt or ldrsw Xt from a pc-relative literal.
	KindLoadLit
	// KindLoadLitFP is ldr St/Dt/Qt from a pc-relative literal.
	KindLoadLitFP
	// KindPrefetchLit is prfm from a pc-relative literal.
	KindPrefetchLit
	// KindB is b label.
	KindB
	// KindBL is bl label.
	KindBL
	// KindBCond is b.cond label or bc.cond label.
	KindBCond
	// KindCBZ is cbz or cbnz Rt, label (NonZero: cbnz).
	KindCBZ
	// KindTBZ is tbz or tbnz Rt, #bit, label (NonZero: tbnz).
	KindTBZ
	// KindBLR is blr Xn: it links the address after itself.
	KindBLR
)

var kindNames = [...]string{
	KindPlain: "plain", KindADR: "adr", KindADRP: "adrp", KindLoadLit: "ldr literal",
	KindLoadLitFP: "ldr literal (SIMD/FP)", KindPrefetchLit: "prfm literal", KindB: "b",
	KindBL: "bl", KindBCond: "b.cond", KindCBZ: "cbz/cbnz", KindTBZ: "tbz/tbnz", KindBLR: "blr",
}

// String names the kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ErrRefused is wrapped by every Decode error: the instruction must not
// be executed out of line (the message says why).
var ErrRefused = errors.New("a64: instruction cannot be relocated")

// Insn is a decoded instruction.
type Insn struct {
	Word uint32 // the instruction word
	PC   uint64 // its address
	Kind Kind
	// Target is the address a pc-relative instruction refers to: a
	// branch's destination, adr's result, adrp's page, a literal's address.
	Target uint64
	// Reg is Rd (adr, adrp), Rt (literal loads, cbz, tbz) or Rn (blr, br,
	// ret and the other branches to a register);
	// 31 is the zero register.
	Reg uint8
	// Size is the bytes a literal load reads (4, 8 or 16).
	Size uint8
	// Wide: a 64-bit register operand (ldr Xt, cbz Xt, tbz with bit >= 32).
	Wide bool
	// Signed: ldrsw.
	Signed bool
	// NonZero: cbnz, tbnz.
	NonZero bool
	// Cond is b.cond's condition (0-15).
	Cond uint8
	// Bit is the bit tbz and tbnz test.
	Bit uint8
	// Landing is set for instructions an indirect branch may land on in
	// a BTI-guarded page (bti, paciasp, pacibsp). Relocating them is
	// exact, but a site holding one must not be patched when its page is
	// guarded (PROT_BTI): the b that replaces it is no landing pad, so
	// an indirect call to the site would fault.
	Landing bool
}

// refuse returns the error of a refused word.
func refuse(word uint32, pc uint64, why string) error {
	return fmt.Errorf("%w: %#08x at %#x: %s", ErrRefused, word, pc, why)
}

// sext sign-extends the low n bits of v.
func sext(v uint64, n uint) int64 { return int64(v<<(64-n)) >> (64 - n) }

// Decode classifies the instruction word at pc. It fails (wrapping
// ErrRefused) on the words that must not run anywhere but at pc: see the
// package documentation for the list and the reasons.
func Decode(word uint32, pc uint64) (Insn, error) {
	in := Insn{Word: word, PC: pc}
	switch op1 := word >> 25 & 0xf; {
	case op1 == 0 && word>>31 == 0:
		return in, refuse(word, pc, "udf or reserved encoding")
	case op1 == 1 || op1 == 3:
		return in, refuse(word, pc, "unallocated encoding")
	case op1&0xe == 0xa:
		return decodeBranch(in)
	case op1&0x5 == 0x4:
		return decodeLoadStore(in)
	case op1&0xe == 0x8:
		return decodeDataImm(in), nil
	}
	return in, nil // data processing (register, SIMD/FP), SVE, SME
}

// decodeDataImm recognises adr and adrp among the data-processing
// (immediate) instructions.
func decodeDataImm(in Insn) Insn {
	w := in.Word
	if w&0x1f000000 != 0x10000000 {
		return in
	}
	imm := sext(uint64(w>>5&0x7ffff)<<2|uint64(w>>29&3), 21)
	in.Reg = uint8(w & 31)
	if w>>31 == 0 {
		in.Kind, in.Target = KindADR, in.PC+uint64(imm)
	} else {
		in.Kind, in.Target = KindADRP, in.PC&^0xfff+uint64(imm<<12)
	}
	return in
}

// decodeLoadStore recognises literal loads and refuses exclusives and
// memory copy/set sequences.
func decodeLoadStore(in Insn) (Insn, error) {
	w := in.Word
	switch {
	case w&0x3b000000 == 0x18000000:
		return decodeLiteral(in)
	case w&0x3f800000 == 0x08000000 && (w>>21&1 == 0 || w>>31 == 1):
		// Load/store exclusive register (o2=0, o1=0) or exclusive pair
		// (o2=0, o1=1, size 1x); o1=1 with size 0x is casp.
		return in, refuse(w, in.PC, "load/store exclusive: out of line it would break an ldxr/stxr loop's monitor")
	case w&0x3b200c00 == 0x19000400:
		return in, refuse(w, in.PC, "memory copy/set (FEAT_MOPS cpy*/set*): the prologue, main and epilogue must run consecutively, and after a MOPS exception the kernel restarts the sequence from pc-4 or pc-8")
	}
	return in, nil
}

// decodeLiteral decodes the load-register (literal) class.
func decodeLiteral(in Insn) (Insn, error) {
	w := in.Word
	opc, simd := w>>30, w>>26&1 == 1
	in.Target = in.PC + uint64(sext(uint64(w>>5&0x7ffff)<<2, 21))
	in.Reg = uint8(w & 31)
	switch {
	case simd && opc == 3:
		return in, refuse(w, in.PC, "unallocated ldr literal (SIMD/FP opc 11)")
	case simd:
		in.Kind, in.Size = KindLoadLitFP, 4<<opc
	case opc == 3:
		in.Kind = KindPrefetchLit
	default:
		in.Kind, in.Size = KindLoadLit, 4<<(opc&1)
		in.Wide, in.Signed = opc != 0, opc == 2
	}
	return in, nil
}

// decodeBranch decodes the branches, exception generation and system
// instructions group.
func decodeBranch(in Insn) (Insn, error) {
	w := in.Word
	switch {
	case w&0x7c000000 == 0x14000000:
		in.Kind = KindB
		if w>>31 == 1 {
			in.Kind = KindBL
		}
		in.Target = in.PC + uint64(sext(uint64(w&0x3ffffff)<<2, 28))
	case w&0x7e000000 == 0x34000000:
		in.Kind, in.Wide, in.NonZero, in.Reg = KindCBZ, w>>31 == 1, w>>24&1 == 1, uint8(w&31)
		in.Target = in.PC + uint64(sext(uint64(w>>5&0x7ffff)<<2, 21))
	case w&0x7e000000 == 0x36000000:
		in.Kind, in.NonZero, in.Reg = KindTBZ, w>>24&1 == 1, uint8(w&31)
		in.Bit = uint8(w>>31<<5 | w>>19&31)
		in.Wide = in.Bit >= 32
		in.Target = in.PC + uint64(sext(uint64(w>>5&0x3fff)<<2, 16))
	case w&0xff000000 == 0x54000000:
		in.Kind, in.Cond = KindBCond, uint8(w&15)
		in.Target = in.PC + uint64(sext(uint64(w>>5&0x7ffff)<<2, 21))
	case w&0xff000000 == 0xd4000000:
		return in, refuse(w, in.PC, exceptionWhy(w))
	case w&0xfe000000 == 0xd6000000:
		return decodeBranchReg(in)
	case w&0xffc00000 == 0xd5000000:
		in.Landing = isLanding(w)
	default:
		return in, refuse(w, in.PC, "unallocated branch/system encoding")
	}
	return in, nil
}

// exceptionWhy says why an exception-generating instruction is refused.
func exceptionWhy(w uint32) string {
	switch w & 0xffe0001f {
	case 0xd4000001:
		return "svc: a thread may block in the system call inside the pad, and syscall restarts and ptrace/seccomp stops would report the pad's pc"
	case 0xd4200000:
		return "brk: a breakpoint must trap at its own address"
	case 0xd4400000:
		return "hlt: a halting debug event must happen at its own address"
	}
	return "exception-generating instruction (hvc, smc, dcps, tcancel or unallocated): traps at EL0 and must report its own address"
}

// isLanding reports whether a system-class word is a BTI landing pad:
// bti (any target kind) or paciasp/pacibsp.
func isLanding(w uint32) bool {
	return w&0xffffff3f == 0xd503241f || w == 0xd503233f || w == 0xd503237f
}

// decodeBranchReg decodes the unconditional branch (register) class.
func decodeBranchReg(in Insn) (Insn, error) {
	w := in.Word
	opc, op2, op3, op4 := w>>21&15, w>>16&31, w>>10&63, w&31
	if op2 != 31 {
		return in, refuse(w, in.PC, "unallocated branch (register) encoding")
	}
	in.Reg = uint8(w >> 5 & 31)
	pac := op3&0x3e == 2 // pointer-authenticating forms
	switch {
	case opc == 1 && op3 == 0 && op4 == 0:
		if in.Reg == 30 {
			return in, refuse(w, in.PC, "blr x30: the link register is also the target")
		}
		in.Kind = KindBLR
		return in, nil
	case (opc == 0 || opc == 2) && op3 == 0 && op4 == 0: // br, ret
		return in, nil
	case opc == 0 && pac && op4 == 31, opc == 8 && pac: // braaz, brabz, braa, brab
		return in, nil
	case opc == 2 && pac && in.Reg == 31 && op4 == 31: // retaa, retab
		return in, nil
	case opc == 1 && pac && op4 == 31, opc == 9 && pac:
		return in, refuse(w, in.PC, "blraa/blrab: an authenticated call links the pad's address, and no link-free authenticated branch lands on a BTI c pad")
	case opc == 4 || opc == 5:
		return in, refuse(w, in.PC, "eret/drps: privileged")
	}
	return in, refuse(w, in.PC, "unallocated branch (register) encoding")
}
