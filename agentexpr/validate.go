package agentexpr

import (
	"fmt"
)

// DefaultMaxStack is the stack limit Validate uses when Limits.MaxStack is 0.
const DefaultMaxStack = 1024

// Limits are the target's constraints Validate checks against.
type Limits struct {
	NumRegs    int  // registers are 0..NumRegs-1; 0 disables the check
	MaxStack   int  // deepest allowed stack; 0 means DefaultMaxStack
	AllowFloat bool // accept the float opcodes (Eval still cannot run them)
}

// ValidationError reports the first problem Validate found.
type ValidationError struct {
	Off int    // offset of the offending instruction (-1 for the whole expression)
	Op  Op     // its opcode
	Msg string // what is wrong
	Err error  // error class, e.g. ErrStackUnderflow, ErrBadJump
}

// Error describes the problem with its offset and opcode.
func (e *ValidationError) Error() string {
	if e.Off < 0 {
		return fmt.Sprintf("agentexpr: invalid expression: %s", e.Msg)
	}
	return fmt.Sprintf("agentexpr: offset %d (%s): %s", e.Off, e.Op, e.Msg)
}

// Unwrap returns the error class.
func (e *ValidationError) Unwrap() error { return e.Err }

// Validate checks e statically: opcodes are allowed and operands sane,
// jump targets are instruction boundaries inside the code, every path ends
// with end, no path underflows the stack or exceeds lim.MaxStack, every
// instruction is reached with one stack depth, and registers are below
// lim.NumRegs. On success it sets e.MaxDepth (and refreshes the derived
// fields RegsUsed, TSVsRead, TSVsWritten and Collects).
func Validate(e *Expr, lim Limits) error {
	if e == nil || len(e.Insns) == 0 {
		return &ValidationError{Off: -1, Msg: "empty expression", Err: ErrEmpty}
	}
	maxStack := lim.MaxStack
	if maxStack <= 0 {
		maxStack = DefaultMaxStack
	}
	e.summarize()
	codeLen := e.Insns[len(e.Insns)-1].Off + e.Insns[len(e.Insns)-1].Len
	for i, in := range e.Insns {
		if err := checkInsn(e, i, in, lim, codeLen); err != nil {
			return err
		}
	}

	depth := make([]int, len(e.Insns))
	for i := range depth {
		depth[i] = -1
	}
	maxDepth := 0
	work := []int{0}
	depth[0] = 0
	reach := func(from Insn, to, d int) error {
		if depth[to] == -1 {
			depth[to] = d
			work = append(work, to)
			return nil
		}
		if depth[to] != d {
			return &ValidationError{Off: from.Off, Op: from.Op, Err: ErrDepthMismatch,
				Msg: fmt.Sprintf("reaches offset %d with stack depth %d, another path reaches it with %d", e.Insns[to].Off, d, depth[to])}
		}
		return nil
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		in := e.Insns[i]
		d := depth[i]
		needed, delta := in.StackEffect()
		if d < needed {
			return &ValidationError{Off: in.Off, Op: in.Op, Err: ErrStackUnderflow,
				Msg: fmt.Sprintf("needs %d stack items, only %d on the stack", needed, d)}
		}
		nd := d + delta
		if nd > maxStack {
			return &ValidationError{Off: in.Off, Op: in.Op, Err: ErrStackOverflow,
				Msg: fmt.Sprintf("stack depth %d exceeds the limit %d", nd, maxStack)}
		}
		if nd > maxDepth {
			maxDepth = nd
		}
		if in.Op == OpEnd {
			continue
		}
		if in.IsJump() {
			if err := reach(in, e.jumpIndex[i], nd); err != nil {
				return err
			}
			if in.Op == OpGoto {
				continue
			}
		}
		if i+1 >= len(e.Insns) {
			return &ValidationError{Off: in.Off, Op: in.Op, Err: ErrNoEnd,
				Msg: "execution runs off the end of the code without end"}
		}
		if err := reach(in, i+1, nd); err != nil {
			return err
		}
	}
	e.MaxDepth = maxDepth
	return nil
}

// checkInsn applies the checks that need no flow analysis.
func checkInsn(e *Expr, i int, in Insn, lim Limits, codeLen int) error {
	bad := func(class error, format string, args ...any) error {
		return &ValidationError{Off: in.Off, Op: in.Op, Err: class, Msg: fmt.Sprintf(format, args...)}
	}
	switch in.Op {
	case OpFloat, OpRefFloat, OpRefDouble, OpRefLongDouble, OpLToD, OpDToL:
		if !lim.AllowFloat {
			return bad(ErrFloat, "floating-point opcode 0x%02x is not supported", byte(in.Op))
		}
	case OpInvalid2:
		return bad(ErrInvalidOpcode, "opcode 0x31 is a placeholder in ax.def, never a valid instruction")
	case OpGoto, OpIfGoto:
		if in.Imm >= uint64(codeLen) {
			return bad(ErrBadJump, "jump target %d is outside the code (length %d)", in.Imm, codeLen)
		}
		if e.jumpIndex[i] < 0 {
			return bad(ErrBadJump, "jump target %d is inside an instruction", in.Imm)
		}
	case OpReg:
		if lim.NumRegs > 0 && in.Imm >= uint64(lim.NumRegs) {
			return bad(ErrBadRegister, "register %d does not exist (the target has %d)", in.Imm, lim.NumRegs)
		}
	case OpExt:
		if in.Imm == 0 {
			return bad(ErrBadOperand, "sign extension from 0 bits is meaningless")
		}
	case OpPrintf:
		if len(in.Str) == 0 || in.Str[len(in.Str)-1] != 0 {
			return bad(ErrBadFormat, "printf format is not NUL-terminated")
		}
		n, err := FormatArgCount(formatOf(in))
		if err != nil {
			return bad(ErrBadFormat, "%v", err)
		}
		if uint64(n) != in.Imm {
			return bad(ErrBadFormat, "printf format %q takes %d arguments, instruction passes %d", formatOf(in), n, in.Imm)
		}
	}
	return nil
}
