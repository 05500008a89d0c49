package a64

import (
	"errors"
	"fmt"
)

// ErrOutOfRange is wrapped when a branch of the relocated code cannot
// reach its destination (and no register-free form exists).
var ErrOutOfRange = errors.New("a64: branch out of range")

// MaxWords is the longest sequence Relocate returns (bl to a far target
// with Options.Veneer: four movz/movk for x30, four for x16, br).
const MaxWords = 9

// Options adjusts RelocateWith.
type Options struct {
	// Veneer lets a b or bl whose target is beyond ±128 MB of the
	// relocated code branch through x16 (movz/movk, br x16), clobbering
	// x16, as a linker's range-extension veneer for that b or bl would:
	// AAPCS64 allows it at a call or tail call to another function, but
	// not at a branch inside a function, which is why it is not the
	// default. Conditional branches and the branch back never use it.
	Veneer bool
}

// Relocate returns the instructions that, placed at address to, have the
// effect of in executed at in.PC followed by a branch to resume (normally
// in.PC+4) when in does not branch elsewhere. It never clobbers a
// register the original does not write, nor the flags; only an ldr
// literal into a SIMD/FP register (or the zero register) beyond ±1 MB of
// to spills x16 below sp for three instructions. It fails wrapping
// ErrOutOfRange when a branch cannot reach (b, bl and the branch back
// reach ±128 MB).
func Relocate(in Insn, to, resume uint64) ([]uint32, error) {
	return RelocateWith(in, to, resume, Options{})
}

// RelocateWith is Relocate with options.
func RelocateWith(in Insn, to, resume uint64, opt Options) ([]uint32, error) {
	if to&3 != 0 || resume&3 != 0 {
		return nil, fmt.Errorf("a64: misaligned relocation address %#x or resume address %#x", to, resume)
	}
	r := &reloc{in: in, to: to, code: make([]uint32, 0, MaxWords)}
	var err error
	switch in.Kind {
	case KindPlain:
		r.emit(in.Word)
	case KindADR, KindADRP:
		if in.Reg != 31 { // adr xzr writes nothing
			r.addr(in.Reg, in.Target, 1)
		}
	case KindLoadLit, KindLoadLitFP:
		r.load()
	case KindPrefetchLit:
		r.prefetch()
	case KindB:
		return r.finish(r.branch(in.Target, opt.Veneer))
	case KindBL:
		r.addr(regLR, in.PC+4, 1)
		return r.finish(r.branch(in.Target, opt.Veneer))
	case KindBLR:
		if in.Reg == regLR {
			return nil, fmt.Errorf("%w: blr x30", ErrRefused)
		}
		r.addr(regLR, in.PC+4, 1)
		r.emit(encRet(in.Reg))
		return r.code, nil
	case KindBCond, KindCBZ, KindTBZ:
		if in.Kind == KindBCond && in.Cond >= 14 { // al, nv: always taken
			return r.finish(r.branch(in.Target, false))
		}
		err = r.cond()
	default:
		return nil, fmt.Errorf("a64: unknown kind %v", in.Kind)
	}
	if err == nil {
		err = r.branch(resume, false)
	}
	return r.finish(err)
}

// reloc accumulates a relocated sequence.
type reloc struct {
	in   Insn
	to   uint64
	code []uint32
}

func (r *reloc) emit(w ...uint32) { r.code = append(r.code, w...) }

// pc is the address of the next instruction.
func (r *reloc) pc() uint64 { return r.to + 4*uint64(len(r.code)) }

func (r *reloc) finish(err error) ([]uint32, error) {
	if err != nil {
		return nil, fmt.Errorf("relocating %v %#08x from %#x to %#x: %w", r.in.Kind, r.in.Word, r.in.PC, r.to, err)
	}
	return r.code, nil
}

// branch emits b target, or with veneer the x16 far form.
func (r *reloc) branch(target uint64, veneer bool) error {
	if d, ok := disp(r.pc(), target, rangeB); ok {
		r.emit(encB(d))
		return nil
	}
	if !veneer {
		return fmt.Errorf("%w: b %#x from %#x", ErrOutOfRange, target, r.pc())
	}
	r.movImm(regIP0, target)
	r.emit(wordBRIP0)
	return nil
}

// addr sets xd (not 31) to v without touching anything else and returns
// the offset still to add, with adrp, when a load of v could fold it:
// fold is the load's size (1 when nothing folds). Flags are untouched.
func (r *reloc) addr(rd uint8, v uint64, fold uint64) uint32 {
	if d := int64(v - r.pc()); d >= -rangeCond && d < rangeCond {
		r.emit(encADR(rd, d))
		return 0
	}
	if p := int64(v>>12 - r.pc()>>12); p >= -rangeCond && p < rangeCond {
		r.emit(encADRP(rd, p))
		lo := uint32(v & 0xfff)
		if fold > 1 && uint64(lo)%fold == 0 || lo == 0 {
			return lo
		}
		r.emit(encAddImm(rd, rd, lo))
		return 0
	}
	r.movImm(rd, v)
	return 0
}

// movImm sets xd to v with movz and up to three movk.
func (r *reloc) movImm(rd uint8, v uint64) {
	first := true
	for hw := uint(0); hw < 4; hw++ {
		h := uint16(v >> (16 * hw))
		switch {
		case first && (h != 0 || v>>(16*hw) == 0):
			r.emit(encMovz(rd, h, hw))
			first = false
		case !first && h != 0:
			r.emit(encMovk(rd, h, hw))
		}
	}
}

// load relocates an ldr (or ldrsw) literal: the same literal form when in
// reach, else the address into the destination itself (a GPR) or into x16
// spilled below sp (a SIMD/FP register, or the zero register whose load
// still accesses memory), then an unsigned-offset load.
func (r *reloc) load() {
	in := r.in
	if d, ok := disp(r.pc(), in.Target, rangeCond); ok {
		r.emit(withImm19(in.Word, d))
		return
	}
	if in.Kind == KindLoadLit && in.Reg != 31 {
		off := r.addr(in.Reg, in.Target, uint64(in.Size))
		r.emit(encLoad(in, in.Reg, off))
		return
	}
	r.emit(wordPushIP0)
	off := r.addr(regIP0, in.Target, uint64(in.Size))
	r.emit(encLoad(in, regIP0, off), wordPopIP0)
}

// prefetch relocates prfm literal: the same form when in reach, else
// nothing (a prefetch has no architectural effect and never faults).
func (r *reloc) prefetch() {
	if d, ok := disp(r.pc(), r.in.Target, rangeCond); ok {
		r.emit(withImm19(r.in.Word, d))
	}
}

// cond relocates b.cond, cbz/cbnz, tbz/tbnz: the same instruction when
// its target is in reach, else the inverted one skipping a b to it.
func (r *reloc) cond() error {
	in := r.in
	limit, with, invert := int64(rangeCond), withImm19, uint32(1)<<24
	switch in.Kind {
	case KindTBZ:
		limit, with = rangeTBZ, withImm14
	case KindBCond:
		invert = 1
	}
	if d, ok := disp(r.pc(), in.Target, limit); ok {
		r.emit(with(in.Word, d))
		return nil
	}
	r.emit(with(in.Word^invert, 8))
	return r.branch(in.Target, false)
}
