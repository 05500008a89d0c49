package fasttp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrNotRelocatable is wrapped by every error about an instruction that
// cannot be executed out of line safely.
var ErrNotRelocatable = errors.New("instruction cannot be relocated")

// ErrOutOfReach is wrapped when a rewritten displacement does not fit in 32
// bits (the relocated copy is more than 2 GB away from what it references).
var ErrOutOfReach = errors.New("target out of rel32 reach")

// rel32 returns the displacement that, stored in an instruction ending at
// end, reaches target.
func rel32(end, target uint64) (int32, error) {
	d := int64(target - end)
	if d < math.MinInt32 || d > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %#x from %#x", ErrOutOfReach, target, end)
	}
	return int32(d), nil
}

// appendJmpRel32 appends `jmp rel32` (e9), located at at, to target.
func appendJmpRel32(code []byte, at, target uint64) ([]byte, error) {
	d, err := rel32(at+5, target)
	if err != nil {
		return nil, fmt.Errorf("jmp at %#x: %w", at, err)
	}
	return binary.LittleEndian.AppendUint32(append(code, 0xe9), uint32(d)), nil
}

// appendPushConst appends code that pushes the 64-bit value v without
// touching any register but rsp and without changing the flags:
//
//	lea rsp, [rsp-8]
//	mov dword [rsp], lo32
//	mov dword [rsp+4], hi32
func appendPushConst(code []byte, v uint64) []byte {
	code = append(code, 0x48, 0x8d, 0x64, 0x24, 0xf8)
	code = binary.LittleEndian.AppendUint32(append(code, 0xc7, 0x04, 0x24), uint32(v))
	return binary.LittleEndian.AppendUint32(append(code, 0xc7, 0x44, 0x24, 0x04), uint32(v>>32))
}

// branchPrefixesOK reports whether the legacy prefixes of a relative
// branch are only ones without effect in 64-bit mode (the branch-hint
// segment prefixes 2e/3e and the MPX bnd prefix f2), which the rewritten
// branch drops.
func branchPrefixesOK(in Insn) bool {
	for _, p := range in.Bytes[:in.PrefixLen] {
		if p != 0x2e && p != 0x3e && p != 0xf2 {
			return false
		}
	}
	return true
}

// RelocateInsn returns code that, executed at address to, has exactly the
// effect of executing in at in.Addr, and then falls through to the end of
// the returned code unless the instruction itself transfers control.
//
//   - A rip-relative operand gets a new disp32 reaching the same address.
//   - jmp rel8/rel32 becomes jmp rel32 to the original target; jcc rel8/rel32
//     becomes jcc rel32 to the original target (branch-hint and bnd
//     prefixes are dropped, anything else is refused).
//   - call rel32 becomes a push of the original return address (in.Next())
//     done with lea/mov, which change neither flags nor any register but
//     rsp, followed by jmp rel32 to the target.
//   - call r/m64 (ff /2, including [rip+disp] and rsp-based operands) becomes
//     push r/m64 (the operand is evaluated before rsp moves, as call does);
//     push [rsp]; the original return address is then written over the
//     first pushed copy and ret jumps to the target, leaving the stack
//     exactly as the call would. (A CET shadow stack would object to the
//     ret; this stub does not support shadow-stack processes.)
//   - loop/loope/loopne/jrcxz rel8 becomes the same instruction hopping
//     over a short jmp to a jmp rel32 to the original target.
//   - Everything else (ret, indirect jmp, syscall, position-independent
//     instructions) is copied verbatim.
//
// int3, xbegin and far calls/jumps are refused, as is any displacement that
// does not fit in 32 bits; such errors wrap ErrNotRelocatable or
// ErrOutOfReach.
func RelocateInsn(in Insn, to uint64) ([]byte, error) {
	if in.Len <= 0 || len(in.Bytes) != in.Len {
		return nil, fmt.Errorf("relocate %#x: %w: malformed Insn (len %d, %d bytes)", in.Addr, ErrNotRelocatable, in.Len, len(in.Bytes))
	}
	switch in.Kind {
	case KindInt3:
		return nil, fmt.Errorf("relocate %#x: %w: int3 (another debugger's breakpoint?)", in.Addr, ErrNotRelocatable)
	case KindXBegin:
		return nil, fmt.Errorf("relocate %#x: %w: xbegin", in.Addr, ErrNotRelocatable)
	case KindFarTransfer:
		return nil, fmt.Errorf("relocate %#x: %w: far call/jmp", in.Addr, ErrNotRelocatable)
	case KindJmpRel8, KindJmpRel32, KindJccRel8, KindJccRel32:
		if !branchPrefixesOK(in) {
			return nil, fmt.Errorf("relocate %#x: %w: prefixed branch % x", in.Addr, ErrNotRelocatable, in.Bytes)
		}
		var code []byte
		var err error
		if in.Kind == KindJmpRel8 || in.Kind == KindJmpRel32 {
			code, err = appendJmpRel32(nil, to, in.Target)
		} else {
			var d int32
			d, err = rel32(to+6, in.Target)
			code = binary.LittleEndian.AppendUint32([]byte{0x0f, 0x80 | in.Cond}, uint32(d))
		}
		if err != nil {
			return nil, fmt.Errorf("relocate %#x: %w", in.Addr, err)
		}
		return code, nil
	case KindCallRel32:
		if !branchPrefixesOK(in) {
			return nil, fmt.Errorf("relocate %#x: %w: prefixed call % x", in.Addr, ErrNotRelocatable, in.Bytes)
		}
		code := appendPushConst(nil, in.Next())
		code, err := appendJmpRel32(code, to+uint64(len(code)), in.Target)
		if err != nil {
			return nil, fmt.Errorf("relocate call at %#x: %w", in.Addr, err)
		}
		return code, nil
	case KindLoopRel8:
		// prefixes (67h: use ecx) are kept: op +2; jmp +5; jmp rel32 target
		for _, p := range in.Bytes[:in.PrefixLen] {
			if p != 0x67 && p != 0x2e && p != 0x3e {
				return nil, fmt.Errorf("relocate %#x: %w: prefix %#02x on %v", in.Addr, ErrNotRelocatable, p, in.Kind)
			}
		}
		code := append([]byte(nil), in.Bytes[:in.Len-1]...)
		code = append(code, 0x02, 0xeb, 0x05)
		code, err := appendJmpRel32(code, to+uint64(len(code)), in.Target)
		if err != nil {
			return nil, fmt.Errorf("relocate loop at %#x: %w", in.Addr, err)
		}
		return code, nil
	case KindIndirectCall:
		return relocateIndirectCall(in, to)
	}
	code := append([]byte(nil), in.Bytes...)
	if err := fixRIP(in, code, in.RIPDispOffset, to+uint64(in.Len)); err != nil {
		return nil, err
	}
	return code, nil
}

// fixRIP rewrites the rip-relative disp32 at off in code (an instruction
// ending at end) so that it references what in's operand does.
func fixRIP(in Insn, code []byte, off int, end uint64) error {
	target, ok := in.RIPTarget()
	if !ok {
		return nil
	}
	d, err := rel32(end, target)
	if err != nil {
		return fmt.Errorf("relocate rip-relative operand at %#x: %w", in.Addr, err)
	}
	binary.LittleEndian.PutUint32(code[off:], uint32(d))
	return nil
}

// relocateIndirectCall rewrites call r/m64 as
//
//	push r/m64                 ; the call target, operand read as call would
//	push qword [rsp]           ; a second copy
//	mov dword [rsp+8], lo32    ; overwrite the first with the return address
//	mov dword [rsp+12], hi32
//	ret                        ; pop the target and go there
func relocateIndirectCall(in Insn, to uint64) ([]byte, error) {
	if in.ModRMOffset < 0 {
		return nil, fmt.Errorf("relocate %#x: %w: indirect call without ModRM", in.Addr, ErrNotRelocatable)
	}
	var code []byte
	for _, p := range in.Bytes[:in.PrefixLen] {
		switch p {
		case 0xf2, 0x2e, 0x3e: // bnd, branch hints: no effect on push
		case 0x26, 0x36, 0x64, 0x65:
			code = append(code, p)
		default:
			return nil, fmt.Errorf("relocate %#x: %w: prefix %#02x on indirect call", in.Addr, ErrNotRelocatable, p)
		}
	}
	if in.REX != 0 {
		code = append(code, in.REX)
	}
	code = append(code, 0xff, in.Bytes[in.ModRMOffset]&^0x38|0x30)
	modrmAt := len(code) - 1
	code = append(code, in.Bytes[in.ModRMOffset+1:]...)
	if in.RIPDispOffset >= 0 {
		if err := fixRIP(in, code, modrmAt+1+(in.RIPDispOffset-in.ModRMOffset-1), to+uint64(len(code))); err != nil {
			return nil, err
		}
	}
	ret := in.Next()
	code = append(code, 0xff, 0x34, 0x24)
	code = binary.LittleEndian.AppendUint32(append(code, 0xc7, 0x44, 0x24, 0x08), uint32(ret))
	code = binary.LittleEndian.AppendUint32(append(code, 0xc7, 0x44, 0x24, 0x0c), uint32(ret>>32))
	return append(code, 0xc3), nil
}

// RelocateRun relocates consecutive instructions to address to, one after
// the other, and appends `jmp rel32 resume`. heads maps each original
// instruction address to the address of its relocated copy (a thread found
// at an original instruction boundary can be moved to its head).
func RelocateRun(insns []Insn, to uint64, resume uint64) (code []byte, heads map[uint64]uint64, err error) {
	heads = make(map[uint64]uint64, len(insns))
	for i, in := range insns {
		if i > 0 && in.Addr != insns[i-1].Next() {
			return nil, nil, fmt.Errorf("relocate run: instruction at %#x does not follow the one at %#x", in.Addr, insns[i-1].Addr)
		}
		at := to + uint64(len(code))
		c, err := RelocateInsn(in, at)
		if err != nil {
			return nil, nil, fmt.Errorf("relocate run: %w", err)
		}
		heads[in.Addr] = at
		code = append(code, c...)
	}
	code, err = appendJmpRel32(code, to+uint64(len(code)), resume)
	if err != nil {
		return nil, nil, fmt.Errorf("relocate run: back to %#x: %w", resume, err)
	}
	return code, heads, nil
}
