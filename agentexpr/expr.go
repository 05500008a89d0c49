package agentexpr

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Insn is one decoded instruction.
type Insn struct {
	Off int // byte offset of the opcode within Expr.Code
	Op  Op  // the opcode
	// Imm is the raw unsigned immediate: the constant of const*, the
	// register number of reg, the target offset of goto/if_goto, the bit
	// width of ext/zero_ext, the depth of pick, the variable number of
	// getv/setv/tracev, the byte count of trace_quick/trace16, and the
	// argument count of printf. It is 0 for opcodes without an immediate.
	Imm uint64
	// Str is the printf format exactly as encoded (normally ending with its
	// NUL terminator); nil for every other opcode.
	Str []byte
	Len int // encoded length in bytes, opcode included
}

// Expr is a decoded agent expression.
type Expr struct {
	Code     []byte // the bytecode
	Insns    []Insn // the instructions in Code order
	MaxDepth int    // deepest stack reached on any path; set by Validate
	RegsUsed []int  // register numbers read by reg, sorted, no duplicates
	// TSVsRead lists trace state variables read by getv or recorded by
	// tracev; TSVsWritten those written by setv. Both sorted, no duplicates.
	TSVsRead, TSVsWritten []int
	Collects              bool // has trace, trace_quick, trace16, tracenz or tracev

	// jumpIndex[i] is the Insns index of the target of Insns[i] when it
	// is a goto or if_goto with a target on an instruction boundary, else -1.
	jumpIndex []int
}

// Errors reported by this package; test with errors.Is.
var (
	ErrUnknownOpcode  = errors.New("unknown opcode")
	ErrTruncated      = errors.New("truncated instruction")
	ErrBadHex         = errors.New("bad hex")
	ErrUnreadable     = errors.New("memory unreadable")
	ErrDivideByZero   = errors.New("division by zero")
	ErrStepLimit      = errors.New("step limit exceeded")
	ErrStackUnderflow = errors.New("stack underflow")
	ErrStackOverflow  = errors.New("stack overflow")
	ErrBadJump        = errors.New("jump target not on an instruction boundary inside the code")
	ErrNoEnd          = errors.New("execution runs off the end of the code")
	ErrFloat          = errors.New("floating-point opcodes are not supported")
	ErrInvalidOpcode  = errors.New("opcode is reserved and never valid")
	ErrBadOperand     = errors.New("bad operand")
	ErrBadRegister    = errors.New("register not available")
	ErrUnknownTSV     = errors.New("unknown trace state variable")
	ErrBadFormat      = errors.New("bad printf format")
	ErrDepthMismatch  = errors.New("stack depth differs between paths")
	ErrEmpty          = errors.New("empty expression")
	ErrNoCollector    = errors.New("trace opcode but no collector")
	ErrCollect        = errors.New("collection failed")
	ErrOutput         = errors.New("printf output failed")
)

// DecodeError reports why Parse rejected some bytecode.
type DecodeError struct {
	Off int   // offset of the offending opcode
	Op  Op    // the opcode byte
	Err error // ErrUnknownOpcode or ErrTruncated
}

// Error describes the failure with its offset and opcode.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("agentexpr: decode at offset %d (%s): %v", e.Off, e.Op, e.Err)
}

// Unwrap returns the error class.
func (e *DecodeError) Unwrap() error { return e.Err }

// Parse decodes bytecode into instructions. It fails on an undefined opcode
// byte or an immediate that runs past the end of code. It does not check
// stack discipline or jump targets: that is Validate's job.
func Parse(code []byte) (*Expr, error) {
	e := &Expr{Code: append([]byte(nil), code...)}
	code = e.Code
	for off := 0; off < len(code); {
		op := Op(code[off])
		info, ok := opInfos[op], opDefined[op]
		if !ok {
			return nil, &DecodeError{Off: off, Op: op, Err: ErrUnknownOpcode}
		}
		in := Insn{Off: off, Op: op, Len: 1 + info.ImmBytes}
		if op == OpPrintf {
			if off+4 > len(code) {
				return nil, &DecodeError{Off: off, Op: op, Err: fmt.Errorf("%w: printf header needs 3 bytes", ErrTruncated)}
			}
			in.Imm = uint64(code[off+1])
			slen := int(code[off+2])<<8 | int(code[off+3])
			if off+4+slen > len(code) {
				return nil, &DecodeError{Off: off, Op: op, Err: fmt.Errorf("%w: printf format of %d bytes", ErrTruncated, slen)}
			}
			in.Str = code[off+4 : off+4+slen : off+4+slen]
			in.Len = 4 + slen
		} else {
			if off+in.Len > len(code) {
				return nil, &DecodeError{Off: off, Op: op, Err: fmt.Errorf("%w: needs %d immediate bytes", ErrTruncated, info.ImmBytes)}
			}
			for _, b := range code[off+1 : off+in.Len] {
				in.Imm = in.Imm<<8 | uint64(b)
			}
		}
		e.Insns = append(e.Insns, in)
		off += in.Len
	}
	e.summarize()
	return e, nil
}

// DecodeHex parses the hex bytecode of a QTDP "X<len>,<hex>" action (the
// caller strips "X<len>,").
func DecodeHex(s string) (*Expr, error) {
	code, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("agentexpr: %w: %w", ErrBadHex, err)
	}
	e, err := Parse(code)
	if err != nil {
		return nil, fmt.Errorf("decode hex agent expression: %w", err)
	}
	return e, nil
}

// opInfos is OpTable as an array, for the hot paths; opDefined marks the
// bytes OpTable defines.
var (
	opInfos   [256]OpInfo
	opDefined [256]bool
)

func init() {
	for op, info := range OpTable {
		opInfos[op] = info
		opDefined[op] = true
	}
}

// summarize fills the derived fields that depend only on the instructions.
func (e *Expr) summarize() {
	var regs, read, written []int
	e.Collects = false
	codeLen := 0
	if n := len(e.Insns); n > 0 {
		codeLen = e.Insns[n-1].Off + e.Insns[n-1].Len
	}
	offIndex := make([]int32, codeLen+1)
	for i := range offIndex {
		offIndex[i] = -1
	}
	for i, in := range e.Insns {
		if in.Off >= 0 && in.Off < len(offIndex) {
			offIndex[in.Off] = int32(i)
		}
		switch in.Op {
		case OpReg:
			regs = append(regs, int(in.Imm))
		case OpGetv:
			read = append(read, int(in.Imm))
		case OpTracev:
			read = append(read, int(in.Imm))
			e.Collects = true
		case OpSetv:
			written = append(written, int(in.Imm))
		case OpTrace, OpTraceQuick, OpTrace16, OpTracenz:
			e.Collects = true
		}
	}
	e.RegsUsed = sortedUnique(regs)
	e.TSVsRead = sortedUnique(read)
	e.TSVsWritten = sortedUnique(written)
	e.jumpIndex = make([]int, len(e.Insns))
	for i, in := range e.Insns {
		e.jumpIndex[i] = -1
		if in.IsJump() && in.Imm < uint64(len(offIndex)) {
			e.jumpIndex[i] = int(offIndex[in.Imm])
		}
	}
}

// sortedUnique sorts s and removes duplicates; nil stays nil.
func sortedUnique(s []int) []int {
	if len(s) == 0 {
		return nil
	}
	sort.Ints(s)
	out := s[:1]
	for _, v := range s[1:] {
		if v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}

// StackEffect reports how many stack items the instruction needs to be
// present (needed) and the net change in depth it causes (delta). It is the
// authority on stack effects: it differs from OpTable for pick (needs n+1),
// printf (pops 2+nargs) and tracev (no change, as gdbserver executes it).
func (in Insn) StackEffect() (needed, delta int) {
	switch in.Op {
	case OpPick:
		return int(in.Imm) + 1, 1
	case OpPrintf:
		return int(in.Imm) + 2, -(int(in.Imm) + 2)
	case OpTracev:
		return 0, 0
	}
	info := &opInfos[in.Op]
	return info.Consumed, info.Produced - info.Consumed
}

// JumpTarget returns the index in e.Insns of the instruction that the jump
// e.Insns[i] goes to, or -1 if Insns[i] is not a jump or its target is not
// an instruction boundary (Validate rejects such code).
func (e *Expr) JumpTarget(i int) int {
	if len(e.jumpIndex) != len(e.Insns) {
		e.summarize()
	}
	if i < 0 || i >= len(e.jumpIndex) {
		return -1
	}
	return e.jumpIndex[i]
}

// IsJump reports whether the instruction is goto or if_goto.
func (in Insn) IsJump() bool { return in.Op == OpGoto || in.Op == OpIfGoto }

// Encode appends the encoding of insns to dst, recomputing nothing: each
// instruction's Imm (and Str for printf) is written as is, with the operand
// width its opcode requires. Off and Len are ignored.
func Encode(dst []byte, insns []Insn) ([]byte, error) {
	for _, in := range insns {
		info, ok := opInfos[in.Op], opDefined[in.Op]
		if !ok {
			return nil, fmt.Errorf("agentexpr: encode %s: %w", in.Op, ErrUnknownOpcode)
		}
		dst = append(dst, byte(in.Op))
		if in.Op == OpPrintf {
			if in.Imm > 0xff || len(in.Str) > 0xffff {
				return nil, fmt.Errorf("agentexpr: encode printf: %w: %d args, %d format bytes", ErrBadOperand, in.Imm, len(in.Str))
			}
			dst = append(dst, byte(in.Imm), byte(len(in.Str)>>8), byte(len(in.Str)))
			dst = append(dst, in.Str...)
			continue
		}
		n := info.ImmBytes
		if n < 8 && in.Imm>>(8*uint(n)) != 0 {
			return nil, fmt.Errorf("agentexpr: encode %s: %w: immediate %#x does not fit in %d bytes", in.Op, ErrBadOperand, in.Imm, n)
		}
		for i := n - 1; i >= 0; i-- {
			dst = append(dst, byte(in.Imm>>(8*uint(i))))
		}
	}
	return dst, nil
}

// Hex returns the bytecode as lower-case hex, as sent in QTDP.
func (e *Expr) Hex() string { return hex.EncodeToString(e.Code) }

// ConstOp returns the shortest const opcode whose zero-extended immediate
// holds v.
func ConstOp(v uint64) Op {
	switch {
	case v <= 0xff:
		return OpConst8
	case v <= 0xffff:
		return OpConst16
	case v <= 0xffffffff:
		return OpConst32
	}
	return OpConst64
}

// IsConst reports whether op pushes an immediate constant.
func IsConst(op Op) bool { return op >= OpConst8 && op <= OpConst64 }
