package fasttp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// MaxInsnLen is the architectural limit on the length of an x86-64
// instruction.
const MaxInsnLen = 15

// InsnKind classifies an instruction by what relocating it requires.
type InsnKind int

// Instruction kinds. Only the relative branches, calls and the kinds marked
// "refused" need anything beyond copying the bytes (and re-encoding a
// rip-relative displacement, see Insn.RIPDispOffset).
const (
	// KindPlain is any instruction that does not transfer control
	// (possibly with a rip-relative memory operand).
	KindPlain InsnKind = iota
	// KindJmpRel8 is jmp rel8 (eb).
	KindJmpRel8
	// KindJmpRel32 is jmp rel32 (e9).
	KindJmpRel32
	// KindJccRel8 is a conditional jump with an 8-bit displacement (70-7f).
	KindJccRel8
	// KindJccRel32 is a conditional jump with a 32-bit displacement (0f 80-8f).
	KindJccRel32
	// KindCallRel32 is call rel32 (e8).
	KindCallRel32
	// KindLoopRel8 is loopne/loope/loop/jrcxz rel8 (e0-e3).
	KindLoopRel8
	// KindRet is a near or far return or iret (c2, c3, ca, cb, cf).
	KindRet
	// KindIndirectJmp is jmp r/m64 (ff /4).
	KindIndirectJmp
	// KindIndirectCall is call r/m64 (ff /2).
	KindIndirectCall
	// KindInt3 is the one-byte breakpoint instruction (cc); refused by
	// RelocateInsn.
	KindInt3
	// KindSyscall is syscall (0f 05).
	KindSyscall
	// KindXBegin is xbegin rel16/rel32 (c7 f8); refused by RelocateInsn.
	KindXBegin
	// KindFarTransfer is a far call or jmp through memory (ff /3, ff /5);
	// refused by RelocateInsn because a far call pushes the relocated
	// return address.
	KindFarTransfer
)

var kindNames = [...]string{
	KindPlain: "plain", KindJmpRel8: "jmp rel8", KindJmpRel32: "jmp rel32",
	KindJccRel8: "jcc rel8", KindJccRel32: "jcc rel32", KindCallRel32: "call rel32",
	KindLoopRel8: "loop/jrcxz rel8", KindRet: "ret", KindIndirectJmp: "indirect jmp",
	KindIndirectCall: "indirect call", KindInt3: "int3", KindSyscall: "syscall",
	KindXBegin: "xbegin", KindFarTransfer: "far call/jmp",
}

// String names the kind.
func (k InsnKind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("InsnKind(%d)", int(k))
}

// Encoding is the instruction-encoding family of an instruction.
type Encoding int

// Encoding families.
const (
	// EncLegacy is legacy prefixes, optional REX, and a one-, two- or
	// three-byte opcode.
	EncLegacy Encoding = iota
	// EncVEX is a two- (c5) or three-byte (c4) VEX prefix.
	EncVEX
	// EncEVEX is the four-byte EVEX prefix (62).
	EncEVEX
)

// Insn is one decoded x86-64 instruction with what relocation needs to know.
type Insn struct {
	// Addr is the address the instruction was decoded at.
	Addr uint64
	// Len is the instruction length in bytes (1..15).
	Len int
	// Bytes are the instruction's bytes (a copy, Len long).
	Bytes []byte
	// Kind says how the instruction transfers control, if at all.
	Kind InsnKind
	// Encoding is the encoding family.
	Encoding Encoding
	// PrefixLen is the number of legacy prefix bytes before the REX
	// prefix or opcode.
	PrefixLen int
	// REX is the REX prefix byte, or 0 when there is none.
	REX byte
	// OpcodeOffset is the index in Bytes of the (first) opcode byte for
	// legacy encodings, or of the first VEX/EVEX byte.
	OpcodeOffset int
	// ModRMOffset is the index in Bytes of the ModRM byte, or -1.
	ModRMOffset int
	// RIPDispOffset is the index in Bytes of the disp32 of a rip-relative
	// memory operand (mod=00, rm=101, no SIB), or -1 when there is none.
	RIPDispOffset int
	// RelOffset and RelSize locate the relative displacement of a relative
	// branch (jmp, jcc, call, loop, xbegin); RelSize is 0 for other kinds.
	RelOffset, RelSize int
	// Target is the absolute destination of a relative branch.
	Target uint64
	// Cond is the condition code (0..15) of a conditional jump.
	Cond byte

	vzero bool // vzeroupper/vzeroall: not cross-checked with x86asm
}

// Next returns the address of the instruction that follows.
func (in Insn) Next() uint64 { return in.Addr + uint64(in.Len) }

// RIPTarget returns the absolute address referenced by the rip-relative
// operand; ok is false when the instruction has none.
func (in Insn) RIPTarget() (target uint64, ok bool) {
	if in.RIPDispOffset < 0 {
		return 0, false
	}
	disp := int32(binary.LittleEndian.Uint32(in.Bytes[in.RIPDispOffset:]))
	return in.Next() + uint64(int64(disp)), true
}

// ErrRefused is wrapped by every DecodeInsn error about an instruction that
// is (or may be) valid but is not handled: the caller should fall back to a
// trap tracepoint rather than relocate it.
var ErrRefused = errors.New("instruction refused")

// ErrTruncated is wrapped when the code ends in the middle of an instruction.
var ErrTruncated = errors.New("truncated instruction")

// immediate-size codes used by the opcode tables.
const (
	immNone = iota
	imm8
	imm16
	immZ    // 16 bits with 66h, else 32
	immV    // 64 bits with REX.W, 16 with 66h, else 32
	imm16_8 // enter: imm16 + imm8
	immRel8
	immRelZ
)

// opInfo describes one opcode of a legacy map: whether it has a ModRM byte,
// its immediate, and whether it is invalid in 64-bit mode.
type opInfo struct {
	modrm   bool
	imm     uint8
	invalid bool
}

// decoder walks the instruction bytes.
type decoder struct {
	code []byte
	pos  int
	in   Insn
	// legacy state
	opsize, addrsize, rep, repne, lock bool
	rexW                               bool
}

func (d *decoder) byteAt(i int) (byte, error) {
	if i >= len(d.code) || i >= MaxInsnLen {
		if i >= MaxInsnLen {
			return 0, fmt.Errorf("%w: longer than %d bytes", ErrRefused, MaxInsnLen)
		}
		return 0, fmt.Errorf("%w after %d bytes", ErrTruncated, i)
	}
	return d.code[i], nil
}

// DecodeInsn decodes the instruction at the start of code, which is located
// at addr, and classifies it for relocation.
//
// The length comes from this package's own decoder for the legacy, REX, VEX
// and EVEX encodings; for legacy encodings it is cross-checked against
// golang.org/x/arch/x86/x86asm and the instruction is refused (error
// wrapping ErrRefused) when the two disagree or x86asm cannot decode it.
// x86asm's known mistakes (endbr64/endbr32 decoded as one byte, VEX/EVEX
// rip-relative operands not reported, some VEX lengths) are why this
// decoder exists; VEX/EVEX instructions are cross-checked for length only,
// when x86asm decodes them at all. 3DNow! (0f 0f), XOP (8f with a map select) and prefixes in
// unusual orders are refused.
func DecodeInsn(code []byte, addr uint64) (Insn, error) {
	d := decoder{code: code}
	d.in = Insn{Addr: addr, ModRMOffset: -1, RIPDispOffset: -1}
	if err := d.decode(); err != nil {
		return Insn{}, fmt.Errorf("decode at %#x: %w", addr, err)
	}
	d.in.Len = d.pos
	d.in.Bytes = append([]byte(nil), code[:d.pos]...)
	if d.in.RelSize > 0 {
		var rel int64
		switch d.in.RelSize {
		case 1:
			rel = int64(int8(d.in.Bytes[d.in.RelOffset]))
		case 2:
			rel = int64(int16(binary.LittleEndian.Uint16(d.in.Bytes[d.in.RelOffset:])))
		case 4:
			rel = int64(int32(binary.LittleEndian.Uint32(d.in.Bytes[d.in.RelOffset:])))
		}
		d.in.Target = d.in.Next() + uint64(rel)
	}
	if err := crossCheck(d.in, code[:min(len(code), MaxInsnLen)]); err != nil {
		return Insn{}, fmt.Errorf("decode at %#x: %w", addr, err)
	}
	return d.in, nil
}

// isEndbr reports whether b is endbr64 or endbr32 (which x86asm v0.32
// decodes as a lone one-byte rep prefix).
func isEndbr(b []byte) bool {
	return len(b) == 4 && b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && (b[3] == 0xfa || b[3] == 0xfb)
}

// crossCheck decodes the instruction with x86asm and refuses it when the
// length or the pc-relative field disagrees with ours. VEX/EVEX
// instructions are only checked for length, and only when x86asm knows
// them: x86asm does not report their rip-relative operands and does not
// know every one of them.
//
// x86asm is given the whole window (code) so that it decodes as far as it
// believes the instruction goes.
func crossCheck(in Insn, code []byte) error {
	if isEndbr(in.Bytes) || in.vzero {
		return nil
	}
	inst, err := x86asm.Decode(code, 64)
	if in.Encoding != EncLegacy {
		if err == nil && inst.Op != 0 && inst.Len != in.Len {
			return fmt.Errorf("%w: length disagreement on % x: %d here, %d from x86asm (%v)", ErrRefused, in.Bytes, in.Len, inst.Len, inst)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: x86asm cannot decode % x: %v", ErrRefused, in.Bytes, err)
	}
	if inst.Op == 0 {
		return fmt.Errorf("%w: x86asm does not recognise % x", ErrRefused, in.Bytes)
	}
	if inst.Len != in.Len {
		return fmt.Errorf("%w: length disagreement on % x: %d here, %d from x86asm (%v)", ErrRefused, in.Bytes, in.Len, inst.Len, inst)
	}
	ourPCRel, ourOff := 0, 0
	switch {
	case in.RelSize > 0:
		ourPCRel, ourOff = in.RelSize, in.RelOffset
	case in.RIPDispOffset >= 0:
		ourPCRel, ourOff = 4, in.RIPDispOffset
	}
	if inst.PCRel != ourPCRel || (ourPCRel != 0 && inst.PCRelOff != ourOff) {
		return fmt.Errorf("%w: pc-relative field disagreement on % x: %d bytes at %d here, %d at %d from x86asm",
			ErrRefused, in.Bytes, ourPCRel, ourOff, inst.PCRel, inst.PCRelOff)
	}
	return nil
}

func (d *decoder) decode() error {
	// Legacy prefixes.
	for {
		b, err := d.byteAt(d.pos)
		if err != nil {
			return err
		}
		switch b {
		case 0x66:
			d.opsize = true
		case 0x67:
			d.addrsize = true
		case 0xf0:
			d.lock = true
		case 0xf2:
			d.repne = true
		case 0xf3:
			d.rep = true
		case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65:
		default:
			goto prefixesDone
		}
		d.pos++
	}
prefixesDone:
	d.in.PrefixLen = d.pos
	b, err := d.byteAt(d.pos)
	if err != nil {
		return err
	}
	if b&0xf0 == 0x40 {
		d.in.REX = b
		d.rexW = b&0x08 != 0
		d.pos++
		if b, err = d.byteAt(d.pos); err != nil {
			return err
		}
		switch b {
		case 0x66, 0x67, 0xf0, 0xf2, 0xf3, 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65:
			return fmt.Errorf("%w: legacy prefix %#02x after REX", ErrRefused, b)
		}
		if b&0xf0 == 0x40 {
			return fmt.Errorf("%w: two REX prefixes", ErrRefused)
		}
	}
	d.in.OpcodeOffset = d.pos
	switch b {
	case 0xc4, 0xc5:
		return d.decodeVEX(b)
	case 0x62:
		return d.decodeEVEX()
	case 0x0f:
		return d.decodeMap0F()
	}
	return d.decodeMap0(b)
}

// checkVEXPrefixes refuses VEX/EVEX after prefixes that make it #UD.
func (d *decoder) checkVEXPrefixes(name string) error {
	if d.in.REX != 0 || d.opsize || d.rep || d.repne || d.lock {
		return fmt.Errorf("%w: %s after a REX/66/f2/f3/f0 prefix", ErrRefused, name)
	}
	return nil
}

func (d *decoder) decodeVEX(first byte) error {
	d.in.Encoding = EncVEX
	if err := d.checkVEXPrefixes("VEX"); err != nil {
		return err
	}
	var mapSel byte = 1
	var last byte // the VEX byte holding vvvv
	if first == 0xc5 {
		p, err := d.byteAt(d.pos + 1)
		if err != nil {
			return err
		}
		last = p
		d.pos += 2
	} else {
		p1, err := d.byteAt(d.pos + 1)
		if err != nil {
			return err
		}
		p2, err := d.byteAt(d.pos + 2)
		if err != nil {
			return err
		}
		last = p2
		mapSel = p1 & 0x1f
		d.pos += 3
	}
	op, err := d.byteAt(d.pos)
	if err != nil {
		return err
	}
	d.pos++
	switch mapSel {
	case 1:
		if op == 0x77 { // vzeroupper / vzeroall: no ModRM
			if last&0x78 != 0x78 {
				return fmt.Errorf("%w: vzeroupper/vzeroall with VEX.vvvv != 1111", ErrRefused)
			}
			d.in.vzero = true // x86asm v0.32 gets some of these lengths wrong
			return nil
		}
		if err := d.modrm(); err != nil {
			return err
		}
		switch op {
		case 0x70, 0x71, 0x72, 0x73, 0xc2, 0xc4, 0xc5, 0xc6:
			return d.skip(1)
		}
		return nil
	case 2:
		return d.modrm()
	case 3:
		if err := d.modrm(); err != nil {
			return err
		}
		return d.skip(1)
	}
	return fmt.Errorf("%w: VEX opcode map %d", ErrRefused, mapSel)
}

func (d *decoder) decodeEVEX() error {
	d.in.Encoding = EncEVEX
	if err := d.checkVEXPrefixes("EVEX"); err != nil {
		return err
	}
	p0, err := d.byteAt(d.pos + 1)
	if err != nil {
		return err
	}
	p1, err := d.byteAt(d.pos + 2)
	if err != nil {
		return err
	}
	if _, err := d.byteAt(d.pos + 3); err != nil {
		return err
	}
	if p0&0x08 != 0 || p1&0x04 == 0 {
		return fmt.Errorf("%w: EVEX with reserved bits set (APX or invalid)", ErrRefused)
	}
	mapSel := p0 & 0x07
	d.pos += 4
	op, err := d.byteAt(d.pos)
	if err != nil {
		return err
	}
	d.pos++
	if err := d.modrm(); err != nil {
		return err
	}
	switch mapSel {
	case 1:
		switch op {
		case 0x70, 0x71, 0x72, 0x73, 0xc2, 0xc4, 0xc5, 0xc6:
			return d.skip(1)
		}
		return nil
	case 2, 5, 6:
		return nil
	case 3:
		return d.skip(1)
	}
	return fmt.Errorf("%w: EVEX opcode map %d", ErrRefused, mapSel)
}

// skip consumes n bytes (an immediate or displacement).
func (d *decoder) skip(n int) error {
	if _, err := d.byteAt(d.pos + n - 1); err != nil {
		return err
	}
	d.pos += n
	return nil
}

// modrm consumes ModRM, SIB and displacement, recording a rip-relative
// operand.
func (d *decoder) modrm() error {
	m, err := d.byteAt(d.pos)
	if err != nil {
		return err
	}
	d.in.ModRMOffset = d.pos
	d.pos++
	mod, rm := m>>6, m&7
	if mod == 3 {
		return nil
	}
	if rm == 4 {
		sib, err := d.byteAt(d.pos)
		if err != nil {
			return err
		}
		d.pos++
		if mod == 0 && sib&7 == 5 {
			return d.skip(4)
		}
	}
	switch mod {
	case 0:
		if rm == 5 {
			if d.addrsize {
				return fmt.Errorf("%w: eip-relative operand (67h prefix)", ErrRefused)
			}
			d.in.RIPDispOffset = d.pos
			return d.skip(4)
		}
	case 1:
		return d.skip(1)
	case 2:
		return d.skip(4)
	}
	return nil
}

func (d *decoder) modrmReg() byte {
	return (d.code[d.in.ModRMOffset] >> 3) & 7
}

// immediate consumes an immediate of the given size code.
func (d *decoder) immediate(kind uint8) error {
	switch kind {
	case immNone:
		return nil
	case imm8:
		return d.skip(1)
	case imm16:
		return d.skip(2)
	case immZ:
		if d.opsize {
			return d.skip(2)
		}
		return d.skip(4)
	case immV:
		switch {
		case d.rexW:
			return d.skip(8)
		case d.opsize:
			return d.skip(2)
		}
		return d.skip(4)
	case imm16_8:
		return d.skip(3)
	case immRel8:
		d.in.RelOffset, d.in.RelSize = d.pos, 1
		return d.skip(1)
	case immRelZ:
		if d.opsize {
			return fmt.Errorf("%w: 66h-prefixed relative branch", ErrRefused)
		}
		d.in.RelOffset, d.in.RelSize = d.pos, 4
		return d.skip(4)
	}
	return fmt.Errorf("internal error: immediate kind %d", kind)
}

// map0 is the one-byte opcode map (prefix and escape bytes are handled
// before the table is consulted).
var map0 = func() (t [256]opInfo) {
	for op := 0; op < 0x40; op++ {
		switch op & 7 {
		case 0, 1, 2, 3:
			t[op] = opInfo{modrm: true}
		case 4:
			t[op] = opInfo{imm: imm8}
		case 5:
			t[op] = opInfo{imm: immZ}
		default: // push/pop seg, daa/das/aaa/aas, prefixes: invalid here
			t[op] = opInfo{invalid: true}
		}
	}
	for op := 0x50; op <= 0x5f; op++ {
		t[op] = opInfo{}
	}
	t[0x60], t[0x61] = opInfo{invalid: true}, opInfo{invalid: true}
	t[0x63] = opInfo{modrm: true}
	t[0x68] = opInfo{imm: immZ}
	t[0x69] = opInfo{modrm: true, imm: immZ}
	t[0x6a] = opInfo{imm: imm8}
	t[0x6b] = opInfo{modrm: true, imm: imm8}
	for op := 0x70; op <= 0x7f; op++ {
		t[op] = opInfo{imm: immRel8}
	}
	t[0x80] = opInfo{modrm: true, imm: imm8}
	t[0x81] = opInfo{modrm: true, imm: immZ}
	t[0x82] = opInfo{invalid: true}
	t[0x83] = opInfo{modrm: true, imm: imm8}
	for op := 0x84; op <= 0x8f; op++ {
		t[op] = opInfo{modrm: true}
	}
	t[0x9a] = opInfo{invalid: true}
	t[0xa0], t[0xa1], t[0xa2], t[0xa3] = opInfo{imm: immV}, opInfo{imm: immV}, opInfo{imm: immV}, opInfo{imm: immV} // moffs: handled specially
	t[0xa8] = opInfo{imm: imm8}
	t[0xa9] = opInfo{imm: immZ}
	for op := 0xb0; op <= 0xb7; op++ {
		t[op] = opInfo{imm: imm8}
	}
	for op := 0xb8; op <= 0xbf; op++ {
		t[op] = opInfo{imm: immV}
	}
	t[0xc0] = opInfo{modrm: true, imm: imm8}
	t[0xc1] = opInfo{modrm: true, imm: imm8}
	t[0xc2] = opInfo{imm: imm16}
	t[0xc6] = opInfo{modrm: true, imm: imm8}
	t[0xc7] = opInfo{modrm: true, imm: immZ}
	t[0xc8] = opInfo{imm: imm16_8}
	t[0xca] = opInfo{imm: imm16}
	t[0xcd] = opInfo{imm: imm8}
	t[0xce] = opInfo{invalid: true}
	t[0xd0], t[0xd1], t[0xd2], t[0xd3] = opInfo{modrm: true}, opInfo{modrm: true}, opInfo{modrm: true}, opInfo{modrm: true}
	t[0xd4], t[0xd5], t[0xd6] = opInfo{invalid: true}, opInfo{invalid: true}, opInfo{invalid: true}
	for op := 0xd8; op <= 0xdf; op++ {
		t[op] = opInfo{modrm: true}
	}
	for op := 0xe0; op <= 0xe3; op++ {
		t[op] = opInfo{imm: immRel8}
	}
	t[0xe4], t[0xe5], t[0xe6], t[0xe7] = opInfo{imm: imm8}, opInfo{imm: imm8}, opInfo{imm: imm8}, opInfo{imm: imm8}
	t[0xe8] = opInfo{imm: immRelZ}
	t[0xe9] = opInfo{imm: immRelZ}
	t[0xea] = opInfo{invalid: true}
	t[0xeb] = opInfo{imm: immRel8}
	t[0xf6] = opInfo{modrm: true} // immediate depends on ModRM.reg
	t[0xf7] = opInfo{modrm: true}
	t[0xfe] = opInfo{modrm: true}
	t[0xff] = opInfo{modrm: true}
	return t
}()

func (d *decoder) decodeMap0(op byte) error {
	info := map0[op]
	if info.invalid {
		return fmt.Errorf("%w: opcode %#02x is invalid in 64-bit mode", ErrRefused, op)
	}
	d.pos++
	if op >= 0xa0 && op <= 0xa3 { // mov al/ax/eax/rax <-> moffs
		if d.addrsize {
			return d.skip(4)
		}
		return d.skip(8)
	}
	if op == 0x8f { // pop r/m64; anything else is XOP
		m, err := d.byteAt(d.pos)
		if err != nil {
			return err
		}
		if (m>>3)&7 != 0 {
			return fmt.Errorf("%w: XOP-encoded instruction", ErrRefused)
		}
	}
	if info.modrm {
		if err := d.modrm(); err != nil {
			return err
		}
	}
	if err := d.immediate(info.imm); err != nil {
		return err
	}
	reg := byte(0)
	if info.modrm {
		reg = d.modrmReg()
	}
	switch op {
	case 0xf6:
		if reg <= 1 {
			return d.skip(1)
		}
	case 0xf7:
		if reg <= 1 {
			return d.immediate(immZ)
		}
	case 0xc6, 0xc7:
		m := d.code[d.in.ModRMOffset]
		if m == 0xf8 && op == 0xc7 { // xbegin rel16/32: the immediate is a displacement
			if d.opsize {
				d.in.RelOffset, d.in.RelSize = d.pos-2, 2
			} else {
				d.in.RelOffset, d.in.RelSize = d.pos-4, 4
			}
			d.in.Kind = KindXBegin
			return nil
		}
		if reg != 0 && m != 0xf8 {
			return fmt.Errorf("%w: opcode %#02x /%d", ErrRefused, op, reg)
		}
	case 0xeb:
		d.in.Kind = KindJmpRel8
	case 0xe9:
		d.in.Kind = KindJmpRel32
	case 0xe8:
		d.in.Kind = KindCallRel32
	case 0xe0, 0xe1, 0xe2, 0xe3:
		d.in.Kind = KindLoopRel8
	case 0xc2, 0xc3, 0xca, 0xcb, 0xcf:
		d.in.Kind = KindRet
	case 0xcc:
		d.in.Kind = KindInt3
	case 0xff:
		switch reg {
		case 2:
			d.in.Kind = KindIndirectCall
		case 4:
			d.in.Kind = KindIndirectJmp
		case 3, 5:
			d.in.Kind = KindFarTransfer
		case 7:
			return fmt.Errorf("%w: opcode ff /7", ErrRefused)
		}
	case 0xfe:
		if reg > 1 {
			return fmt.Errorf("%w: opcode fe /%d", ErrRefused, reg)
		}
	}
	if op >= 0x70 && op <= 0x7f {
		d.in.Kind, d.in.Cond = KindJccRel8, op&0x0f
	}
	return nil
}

// map0F is the two-byte (0f xx) opcode map; 0f 38 and 0f 3a are the
// three-byte maps.
var map0F = func() (t [256]opInfo) {
	for op := range t {
		t[op] = opInfo{modrm: true}
	}
	for _, op := range []int{0x04, 0x0a, 0x0c, 0x24, 0x25, 0x26, 0x27, 0x36, 0x39, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x7a, 0x7b, 0xa6, 0xa7} {
		t[op] = opInfo{invalid: true}
	}
	for _, op := range []int{0x05, 0x06, 0x07, 0x08, 0x09, 0x0b, 0x0e, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x37, 0x77, 0xa0, 0xa1, 0xa2, 0xa8, 0xa9, 0xaa} {
		t[op] = opInfo{}
	}
	for op := 0xc8; op <= 0xcf; op++ {
		t[op] = opInfo{}
	}
	for op := 0x80; op <= 0x8f; op++ {
		t[op] = opInfo{imm: immRelZ}
	}
	for _, op := range []int{0x70, 0x71, 0x72, 0x73, 0xa4, 0xac, 0xba, 0xc2, 0xc4, 0xc5, 0xc6} {
		t[op] = opInfo{modrm: true, imm: imm8}
	}
	return t
}()

func (d *decoder) decodeMap0F() error {
	op, err := d.byteAt(d.pos + 1)
	if err != nil {
		return err
	}
	d.pos += 2
	switch op {
	case 0x0f:
		return fmt.Errorf("%w: 3DNow! instruction", ErrRefused)
	case 0x38, 0x3a:
		op3, err := d.byteAt(d.pos)
		if err != nil {
			return err
		}
		_ = op3
		d.pos++
		if err := d.modrm(); err != nil {
			return err
		}
		if op == 0x3a {
			return d.skip(1)
		}
		return nil
	case 0x78, 0x79:
		if d.opsize || d.repne {
			return fmt.Errorf("%w: SSE4a extrq/insertq", ErrRefused)
		}
	}
	info := map0F[op]
	if info.invalid {
		return fmt.Errorf("%w: opcode 0f %02x", ErrRefused, op)
	}
	if info.modrm {
		if err := d.modrm(); err != nil {
			return err
		}
	}
	if err := d.immediate(info.imm); err != nil {
		return err
	}
	switch {
	case op == 0x05:
		d.in.Kind = KindSyscall
	case op >= 0x80 && op <= 0x8f:
		d.in.Kind, d.in.Cond = KindJccRel32, op&0x0f
	}
	return nil
}

// NoFallThrough reports whether the instruction never goes on to the
// next one: a jmp (rel8, rel32 or indirect) or a return. The bytes after
// it need not be code of the same function.
func (in Insn) NoFallThrough() bool {
	switch in.Kind {
	case KindJmpRel8, KindJmpRel32, KindRet, KindIndirectJmp:
		return true
	}
	return false
}

// IsNop reports whether the instruction is a nop: 0x90 (not xchg with
// r8: no REX.B) or 0f 1f /0, with operand-size or segment prefixes only.
func (in Insn) IsNop() bool {
	if in.Encoding != EncLegacy || in.REX&1 != 0 {
		return false
	}
	for _, p := range in.Bytes[:in.PrefixLen] {
		switch p {
		case 0x66, 0x2e, 0x3e, 0x26, 0x36, 0x64, 0x65:
		default:
			return false
		}
	}
	op := in.Bytes[in.OpcodeOffset:]
	switch {
	case op[0] == 0x90:
		return in.PrefixLen == 0 || in.Bytes[0] == 0x66
	case len(op) > 2 && op[0] == 0x0f && op[1] == 0x1f:
		return in.ModRMOffset > 0 && in.Bytes[in.ModRMOffset]>>3&7 == 0
	}
	return false
}
