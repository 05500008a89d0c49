package agentexpr

import (
	"encoding/binary"
	"fmt"
)

// Memory reads target memory. An error makes the expression fail with an
// error wrapping ErrUnreadable.
type Memory interface {
	ReadMemory(addr uint64, buf []byte) error
}

// Registers reads target registers, numbered as GDB numbers them.
type Registers interface {
	Register(num int) (uint64, error)
}

// TSVs holds the trace state variables.
type TSVs interface {
	GetTSV(num int) (int64, bool)
	SetTSV(num int, v int64)
}

// Collector records data into the current trace frame.
type Collector interface {
	// CollectMemory records size bytes at addr (trace, trace_quick,
	// trace16, tracenz).
	CollectMemory(addr uint64, size uint64) error
	// CollectTSV records the value of trace state variable num (tracev).
	CollectTSV(num int) error
}

// Output receives printf requests: format is the format string exactly as
// GDB sent it, without its NUL and with C escapes such as \n still
// unprocessed (GDB sends it "as it appears in C source"), and args holds the
// arguments, args[0] for the first conversion. FormatC turns the pair into
// text (reading %s strings from memory); WriterOutput does that and writes
// the text out.
type Output interface {
	Printf(format string, args []uint64) error
}

// DefaultStepLimit is the number of instructions Eval executes before
// giving up when Env.StepLimit is 0.
const DefaultStepLimit = 1 << 20

// maxEvalStack bounds the stack Eval lets an expression use: DefaultMaxStack,
// or the expression's MaxDepth if Validate accepted a deeper one.
const maxEvalStack = DefaultMaxStack

// Env is what an expression can see and touch while it runs. Nil members
// make the instructions that need them fail (printf with a nil Out does
// nothing). An Env may be reused by successive Evals but not by two at
// once.
type Env struct {
	Mem       Memory
	Regs      Registers
	TSV       TSVs
	Collect   Collector
	Out       Output
	StepLimit int // instructions to execute at most; 0 means DefaultStepLimit

	// scratch is the buffer memory reads go through, kept here so that a
	// read through the Memory interface does not allocate. It makes an Env
	// unsafe to share between concurrent Evals (its TSVs and collector
	// usually are anyway).
	scratch [64]byte
}

// EvalError reports why Eval stopped.
type EvalError struct {
	Off int   // offset of the failing instruction (-1 if none)
	Op  Op    // its opcode
	Err error // the cause; errors.Is finds the class (ErrDivideByZero, ...)
}

// Error describes the failure with its offset and opcode.
func (e *EvalError) Error() string {
	return fmt.Sprintf("agentexpr: eval at offset %d (%s): %v", e.Off, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *EvalError) Unwrap() error { return e.Err }

// Eval runs e with the reference semantics described in the package
// documentation and returns the value on top of the stack at end (0 if the
// stack is empty). It does not require Validate to have been called: every
// check Validate makes statically is also made as the code runs, so any
// parsed expression either finishes or fails with an *EvalError.
func Eval(e *Expr, env *Env) (top uint64, err error) {
	if env == nil {
		env = &Env{}
	}
	if e == nil || len(e.Insns) == 0 {
		return 0, &EvalError{Off: -1, Err: ErrEmpty}
	}
	jumpIndex := e.jumpIndex
	if len(jumpIndex) != len(e.Insns) {
		c := *e
		c.summarize()
		jumpIndex = c.jumpIndex
	}
	limit := env.StepLimit
	if limit <= 0 {
		limit = DefaultStepLimit
	}
	stackLimit := maxEvalStack
	if e.MaxDepth > stackLimit {
		stackLimit = e.MaxDepth
	}
	var backing [32]uint64
	stack := backing[:0]
	fail := func(in Insn, err error) (uint64, error) {
		return 0, &EvalError{Off: in.Off, Op: in.Op, Err: err}
	}
	steps := 0
	for pc := 0; ; {
		if pc >= len(e.Insns) {
			last := e.Insns[len(e.Insns)-1]
			return fail(last, ErrNoEnd)
		}
		steps++
		in := e.Insns[pc]
		if steps > limit {
			return fail(in, fmt.Errorf("%w (%d instructions)", ErrStepLimit, limit))
		}
		needed, delta := in.StackEffect()
		if len(stack) < needed {
			return fail(in, fmt.Errorf("%w: needs %d items, stack has %d", ErrStackUnderflow, needed, len(stack)))
		}
		if len(stack)+delta > stackLimit {
			return fail(in, fmt.Errorf("%w: depth %d", ErrStackOverflow, len(stack)+delta))
		}
		n := len(stack)
		pc++
		switch in.Op {
		case OpAdd:
			stack[n-2] += stack[n-1]
			stack = stack[:n-1]
		case OpSub:
			stack[n-2] -= stack[n-1]
			stack = stack[:n-1]
		case OpMul:
			stack[n-2] *= stack[n-1]
			stack = stack[:n-1]
		case OpDivSigned, OpDivUnsigned, OpRemSigned, OpRemUnsigned:
			a, b := stack[n-2], stack[n-1]
			if b == 0 {
				return fail(in, ErrDivideByZero)
			}
			stack[n-2] = divide(in.Op, a, b)
			stack = stack[:n-1]
		case OpLsh:
			stack[n-2] = shiftLeft(stack[n-2], stack[n-1])
			stack = stack[:n-1]
		case OpRshSigned:
			stack[n-2] = shiftRightSigned(stack[n-2], stack[n-1])
			stack = stack[:n-1]
		case OpRshUnsigned:
			stack[n-2] = shiftRightUnsigned(stack[n-2], stack[n-1])
			stack = stack[:n-1]
		case OpLogNot:
			stack[n-1] = boolValue(stack[n-1] == 0)
		case OpBitAnd:
			stack[n-2] &= stack[n-1]
			stack = stack[:n-1]
		case OpBitOr:
			stack[n-2] |= stack[n-1]
			stack = stack[:n-1]
		case OpBitXor:
			stack[n-2] ^= stack[n-1]
			stack = stack[:n-1]
		case OpBitNot:
			stack[n-1] = ^stack[n-1]
		case OpEqual:
			stack[n-2] = boolValue(stack[n-2] == stack[n-1])
			stack = stack[:n-1]
		case OpLessSigned:
			stack[n-2] = boolValue(int64(stack[n-2]) < int64(stack[n-1]))
			stack = stack[:n-1]
		case OpLessUnsigned:
			stack[n-2] = boolValue(stack[n-2] < stack[n-1])
			stack = stack[:n-1]
		case OpExt:
			if in.Imm == 0 {
				return fail(in, fmt.Errorf("%w: ext 0", ErrBadOperand))
			}
			stack[n-1] = SignExtend(stack[n-1], in.Imm)
		case OpZeroExt:
			stack[n-1] = ZeroExtend(stack[n-1], in.Imm)
		case OpRef8, OpRef16, OpRef32, OpRef64:
			size := opInfos[in.Op].DataSize / 8
			addr := stack[n-1]
			if env.Mem == nil {
				return fail(in, fmt.Errorf("%w: %d bytes at %#x: no memory", ErrUnreadable, size, addr))
			}
			buf := env.scratch[:8]
			clear(buf)
			if err := env.Mem.ReadMemory(addr, buf[:size]); err != nil {
				return fail(in, fmt.Errorf("%w: %d bytes at %#x: %w", ErrUnreadable, size, addr, err))
			}
			stack[n-1] = binary.LittleEndian.Uint64(buf)
		case OpIfGoto:
			cond := stack[n-1]
			stack = stack[:n-1]
			if cond != 0 {
				if jumpIndex[pc-1] < 0 {
					return fail(in, fmt.Errorf("%w: target %d", ErrBadJump, in.Imm))
				}
				pc = jumpIndex[pc-1]
			}
		case OpGoto:
			if jumpIndex[pc-1] < 0 {
				return fail(in, fmt.Errorf("%w: target %d", ErrBadJump, in.Imm))
			}
			pc = jumpIndex[pc-1]
		case OpConst8, OpConst16, OpConst32, OpConst64:
			stack = append(stack, in.Imm)
		case OpReg:
			if env.Regs == nil {
				return fail(in, fmt.Errorf("%w: register %d: no registers", ErrBadRegister, in.Imm))
			}
			v, err := env.Regs.Register(int(in.Imm))
			if err != nil {
				return fail(in, fmt.Errorf("%w: register %d: %w", ErrBadRegister, in.Imm, err))
			}
			stack = append(stack, v)
		case OpEnd:
			if n == 0 {
				return 0, nil
			}
			return stack[n-1], nil
		case OpDup:
			stack = append(stack, stack[n-1])
		case OpPop:
			stack = stack[:n-1]
		case OpSwap:
			stack[n-2], stack[n-1] = stack[n-1], stack[n-2]
		case OpPick:
			stack = append(stack, stack[n-1-int(in.Imm)])
		case OpRot:
			a, b, c := stack[n-3], stack[n-2], stack[n-1]
			stack[n-3], stack[n-2], stack[n-1] = c, a, b
		case OpGetv:
			if env.TSV == nil {
				return fail(in, fmt.Errorf("%w: $%d: no trace state variables", ErrUnknownTSV, in.Imm))
			}
			v, ok := env.TSV.GetTSV(int(in.Imm))
			if !ok {
				return fail(in, fmt.Errorf("%w: number %d", ErrUnknownTSV, in.Imm))
			}
			stack = append(stack, uint64(v))
		case OpSetv:
			if env.TSV == nil {
				return fail(in, fmt.Errorf("%w: $%d: no trace state variables", ErrUnknownTSV, in.Imm))
			}
			env.TSV.SetTSV(int(in.Imm), int64(stack[n-1]))
		case OpTracev:
			if env.Collect == nil {
				return fail(in, ErrNoCollector)
			}
			if err := env.Collect.CollectTSV(int(in.Imm)); err != nil {
				return fail(in, fmt.Errorf("%w: variable %d: %w", ErrCollect, in.Imm, err))
			}
		case OpTrace:
			addr, size := stack[n-2], stack[n-1]
			stack = stack[:n-2]
			if err := collectMemory(env, addr, size); err != nil {
				return fail(in, err)
			}
		case OpTraceQuick, OpTrace16:
			if err := collectMemory(env, stack[n-1], in.Imm); err != nil {
				return fail(in, err)
			}
		case OpTracenz:
			addr, limit := stack[n-2], stack[n-1]
			stack = stack[:n-2]
			size, cost, err := stringExtent(env.Mem, addr, limit, &env.scratch)
			steps += cost
			if err != nil {
				return fail(in, err)
			}
			if size > 0 {
				if err := collectMemory(env, addr, size); err != nil {
					return fail(in, err)
				}
			}
		case OpPrintf:
			nargs := int(in.Imm)
			// Pop function and channel, then the arguments, first argument first.
			args := make([]uint64, nargs)
			for i := range args {
				args[i] = stack[n-3-i]
			}
			stack = stack[:n-2-nargs]
			if len(in.Str) == 0 || in.Str[len(in.Str)-1] != 0 {
				return fail(in, fmt.Errorf("%w: format not NUL-terminated", ErrBadFormat))
			}
			if env.Out != nil {
				if err := env.Out.Printf(formatOf(in), args); err != nil {
					return fail(in, fmt.Errorf("%w: %w", ErrOutput, err))
				}
			}
		case OpFloat, OpRefFloat, OpRefDouble, OpRefLongDouble, OpLToD, OpDToL:
			return fail(in, ErrFloat)
		case OpInvalid2:
			return fail(in, ErrInvalidOpcode)
		default:
			return fail(in, ErrUnknownOpcode)
		}
	}
}

// collectMemory hands one memory block to the collector.
func collectMemory(env *Env, addr, size uint64) error {
	if env.Collect == nil {
		return ErrNoCollector
	}
	if err := env.Collect.CollectMemory(addr, size); err != nil {
		return fmt.Errorf("%w: %d bytes at %#x: %w", ErrCollect, size, addr, err)
	}
	return nil
}

// stringExtent returns how many bytes tracenz records at addr: up to and
// including the first NUL, at most limit. cost is the number of extra
// interpreter steps charged (one per 64 bytes scanned), so a huge limit over
// memory without a NUL still hits the step limit eventually.
func stringExtent(mem Memory, addr, limit uint64, chunk *[64]byte) (size uint64, cost int, err error) {
	if limit == 0 {
		return 0, 0, nil
	}
	if mem == nil {
		return 0, 0, fmt.Errorf("%w: string at %#x: no memory", ErrUnreadable, addr)
	}
	for size < limit {
		n := uint64(len(chunk))
		if limit-size < n {
			n = limit - size
		}
		// Never cross a 64-byte boundary in one read, so a readable string
		// ending just before an unreadable page is still found; fall back
		// to single bytes when the chunk read fails.
		if rest := 64 - (addr+size)%64; rest < n {
			n = rest
		}
		cost++
		if mem.ReadMemory(addr+size, chunk[:n]) != nil {
			for i := uint64(0); i < n; i++ {
				if err := mem.ReadMemory(addr+size, chunk[:1]); err != nil {
					return 0, cost, fmt.Errorf("%w: string byte at %#x: %w", ErrUnreadable, addr+size, err)
				}
				size++
				if chunk[0] == 0 {
					return size, cost, nil
				}
			}
			continue
		}
		for i := uint64(0); i < n; i++ {
			size++
			if chunk[i] == 0 {
				return size, cost, nil
			}
		}
	}
	return size, cost, nil
}

func boolValue(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// divide implements div/rem signed and unsigned for a non-zero divisor b.
// Go defines INT64_MIN / -1 as INT64_MIN and INT64_MIN % -1 as 0.
func divide(op Op, a, b uint64) uint64 {
	switch op {
	case OpDivSigned:
		return uint64(int64(a) / int64(b))
	case OpDivUnsigned:
		return a / b
	case OpRemSigned:
		return uint64(int64(a) % int64(b))
	default:
		return a % b
	}
}

// shiftLeft is lsh: counts >= 64 give 0.
func shiftLeft(a, count uint64) uint64 { return a << count }

// shiftRightSigned is rsh_signed: counts >= 64 fill with the sign bit.
func shiftRightSigned(a, count uint64) uint64 { return uint64(int64(a) >> count) }

// shiftRightUnsigned is rsh_unsigned: counts >= 64 give 0.
func shiftRightUnsigned(a, count uint64) uint64 { return a >> count }

// SignExtend treats the low bits bits of v as a two's complement number and
// extends it to 64 bits; bits >= 64 returns v unchanged and bits == 0
// returns 0.
func SignExtend(v uint64, bits uint64) uint64 {
	if bits >= 64 {
		return v
	}
	if bits == 0 {
		return 0
	}
	s := 64 - bits
	return uint64(int64(v<<s) >> s)
}

// ZeroExtend keeps the low bits bits of v; bits >= 64 returns v unchanged.
func ZeroExtend(v uint64, bits uint64) uint64 {
	if bits >= 64 {
		return v
	}
	return v & (1<<bits - 1)
}
