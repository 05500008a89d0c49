package jit

import (
	"encoding/binary"
	"errors"
)

// Pads that differ only in their tracepoint.
//
// A pad's code depends on its tracepoint's address (the register block's
// rip) and table index (its record headers, its table entry, its stop
// word) only through a few immediates, which the builder emits in
// value-independent encodings and lists (tpFixup). A pad built once for
// one tracepoint is then copied for another with the same spec
// otherwise (Clone, then Retarget): building one costs microseconds, and
// a tstart may place a thousand of them.

// fixKind says what a tpFixup's field holds.
type fixKind uint8

const (
	fixAddr   fixKind = iota // imm64: the tracepoint address
	fixWord64                // imm64: base | index << shift
	fixIdx32                 // imm32: the index
	fixDisp32                // disp32: CtlTPs + index * CtlTPSize
)

// tpFixup is a field of a pad's code that holds a value of its
// tracepoint's.
type tpFixup struct {
	off   int
	kind  fixKind
	base  uint64
	shift uint
}

// value is f's field for tracepoint address addr and index idx.
func (f tpFixup) value(addr uint64, idx uint32) uint64 {
	switch f.kind {
	case fixAddr:
		return addr
	case fixWord64:
		return f.base | uint64(idx)<<f.shift
	case fixIdx32:
		return uint64(idx)
	}
	return uint64(CtlTPs) + uint64(idx)*CtlTPSize
}

// size is the byte length of f's field.
func (f tpFixup) size() int {
	if f.kind == fixAddr || f.kind == fixWord64 {
		return 8
	}
	return 4
}

// put writes f's field into code.
func (f tpFixup) put(code []byte, addr uint64, idx uint32) {
	v := f.value(addr, idx)
	if f.size() == 8 {
		binary.LittleEndian.PutUint64(code[f.off:], v)
	} else {
		binary.LittleEndian.PutUint32(code[f.off:], uint32(v))
	}
}

// holds reports whether code holds f's field for addr and idx (what the
// builder emitted).
func (f tpFixup) holds(code []byte, addr uint64, idx uint32) bool {
	if f.off < 0 || f.off+f.size() > len(code) {
		return false
	}
	if f.size() == 8 {
		return binary.LittleEndian.Uint64(code[f.off:]) == f.value(addr, idx)
	}
	return binary.LittleEndian.Uint32(code[f.off:]) == uint32(f.value(addr, idx))
}

// fixAt records fixup f of the field that ends at the current position.
func (b *padBuilder) fixAt(f tpFixup) {
	f.off = b.a.pos() - f.size()
	b.fixups = append(b.fixups, f)
}

// movTPImm64 loads f's value into dst with a 10-byte mov whatever the
// value, and records f.
func (b *padBuilder) movTPImm64(dst gpr, f tpFixup) {
	b.a.rex(true, 0, 0, dst, false)
	b.a.byte1(0xb8 + byte(dst&7))
	b.a.imm64(f.value(b.spec.TPAddr, b.spec.TPIndex))
	b.fixAt(f)
}

// retargetable reports whether every recorded field holds what the spec
// put there (an encoding that changed with the value would not).
func (b *padBuilder) retargetable() bool {
	for _, f := range b.fixups {
		if !f.holds(b.a.buf, b.spec.TPAddr, b.spec.TPIndex) {
			return false
		}
	}
	return true
}

// Clone returns a copy of p that Place and Retarget change apart from p.
func (p *JumpPad) Clone() *JumpPad { return p.CloneTo(nil) }

// CloneTo copies p into dst, reusing dst's memory, and returns dst (a
// new pad when dst is nil): a tstart placing a thousand pads of one key
// copies each into the same memory before writing it to the inferior.
func (p *JumpPad) CloneTo(dst *JumpPad) *JumpPad {
	if dst == nil {
		dst = new(JumpPad)
	}
	code, faults := dst.Code[:0], dst.Faults[:0]
	*dst = *p
	dst.Code = append(code, p.Code...)
	dst.Faults = append(faults, p.Faults...)
	return dst
}

// Retarget makes p the pad of the tracepoint at addr, table index idx,
// with the same spec otherwise: the code BuildJumpPadAMD64 would make
// for it.
func (p *JumpPad) Retarget(addr uint64, idx uint32) error {
	if p.fixups == nil {
		return errors.New("jit: jump pad: not retargetable")
	}
	if uint64(CtlTPs)+uint64(idx)*CtlTPSize > 1<<31-1 || p.compact && idx > RecCompactMaxTP {
		return errors.New("jit: jump pad: tracepoint index too large")
	}
	for _, f := range p.fixups {
		f.put(p.Code, addr, idx)
	}
	return nil
}

// PadKey is what a pad's code depends on besides its address, its
// tail's and its tracepoint's: pads of equal keys are Clone and Retarget
// of each other.
type PadKey struct {
	ctl                  uint64
	collectCap           uint32
	collectRegs          bool
	xsaveMask            uint64
	xsaveSize            int
	lanes                int
	fsBase, compact, tpl bool
	frameBase            uint32
	uncounted            int
	spBias               int32
}

// Key returns spec's PadKey; false when spec has a condition or
// collection code (their compiled code is not compared).
func (s PadSpec) Key() (PadKey, bool) {
	if s.Cond != nil || len(s.Collect) > 0 {
		return PadKey{}, false
	}
	return PadKey{ctl: s.Ctl, collectCap: s.CollectCap, collectRegs: s.CollectRegs, xsaveMask: s.XSaveMask,
		xsaveSize: s.XSaveSize, lanes: s.Lanes, fsBase: s.FSBase, compact: s.Compact, tpl: s.TPLoad,
		frameBase: s.FrameBase, uncounted: s.Uncounted, spBias: s.SPBias}, true
}
