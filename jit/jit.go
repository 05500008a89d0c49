package jit

import (
	"fmt"
	"sort"

	"gotpstub/agentexpr"
)

// Layout of the context block (struct ctx) the generated code receives as
// its second argument. Every field is 8 bytes, little-endian.
const (
	CtxErr       = 0  // out: 0 or an Err* code
	CtxResult    = 8  // out: the value also returned in rax
	CtxTSVs      = 16 // in: address of an int64 array indexed by TSV number
	CtxNumTSVs   = 24 // in: number of elements of that array
	CtxFrameBuf  = 32 // in: address of the collection buffer
	CtxFrameCap  = 40 // in: its capacity in bytes
	CtxFrameUsed = 48 // in/out: bytes used; blocks are appended here
	CtxPid       = 56 // in: pid for process_vm_readv (the inferior's own pid)
	CtxDirectLo  = 64 // in: start of a range known mapped (Options.DirectLoads)
	CtxDirectHi  = 72 // in: its end (exclusive); lo == hi disables it
	CtxReadMem   = 80 // in: 0, or a function int64 read(ctx, dst, src, len)
	CtxJumpLimit = 88 // in: backward jumps allowed before ErrSteps (0: DefaultJumpLimit)
	CtxSize      = 96 // size of the block
)

// Error codes stored at CtxErr.
const (
	ErrNone      = 0 // success
	ErrMemory    = 1 // a memory read failed (EFAULT from process_vm_readv)
	ErrDivZero   = 2 // div/rem by zero
	ErrFrameFull = 3 // a collection block did not fit in the frame buffer
	ErrTSV       = 4 // getv of a variable number >= CtxNumTSVs
	ErrCollect   = 5 // trace*: memory unreadable; tracev: unknown variable
	ErrSteps     = 6 // more backward jumps than CtxJumpLimit (a loop)
)

// DefaultJumpLimit bounds the backward jumps one run may take when
// CtxJumpLimit is 0.
const DefaultJumpLimit = 1 << 20

// Frame block tags written by collection opcodes.
const (
	BlockMemory = 'M' // 'M', addr u64, len u16, len bytes
	BlockTSV    = 'V' // 'V', number u32, value i64
)

// PadRegs is the number of 8-byte register slots of the pad layout: GDB's
// amd64 numbering rax rbx rcx rdx rsi rdi rbp rsp r8..r15 rip eflags cs ss
// ds es fs gs (regnums 0..23). Segment registers and eflags occupy the low
// 4 bytes of their slot, the rest zero.
const PadRegs = 24

// DefaultMaxStack is the default limit on agent-expression stack entries
// the generated code may hold on the machine stack (8 bytes each).
const DefaultMaxStack = 256

// Options tunes compilation.
type Options struct {
	// MaxStack limits the expression's static stack depth (entries); 0
	// means DefaultMaxStack. Deeper expressions fall back.
	MaxStack int
	// NumRegs is the number of register slots in the pad (0: PadRegs);
	// reg n with n >= NumRegs falls back.
	NumRegs int
	// DirectLoads makes ref* load directly when [addr, addr+size) lies in
	// [CtxDirectLo, CtxDirectHi), a range the caller knows is mapped.
	DirectLoads bool
	// NoFuse disables fusing equal/less_* with a following if_goto.
	NoFuse bool
	// ZeroUnreadable gives memory the code cannot read the trace engine's
	// semantics instead of failing: ref* reads unreadable bytes as 0 (a
	// partially readable value keeps its readable low-address bytes),
	// trace/trace_quick/trace16 record only the readable prefix (nothing
	// if none) and stop there, and tracenz treats the first unreadable
	// byte as its terminator (recording the readable bytes before it).
	// ErrMemory and ErrCollect for unreadable memory then never occur.
	// Both backends implement it.
	ZeroUnreadable bool
	// FaultLoads (amd64) reads memory for ref8/16/32/64 and the collection
	// opcodes with plain loads (ref*) and a REP MOVSB copy (collections)
	// instead of the safe-read helper. Every instruction that may fault on
	// a bad address is listed in Code.Faults: whoever runs the code must
	// catch SIGSEGV/SIGBUS at such an instruction and resume the thread at
	// its Recover offset with the registers as at the fault; the recovery
	// code redoes that read through the safe path, so results are exactly
	// those of the safe path (ZeroUnreadable included). Without a tracer
	// that does this, a bad pointer kills the process: use it only where
	// faults are caught. DirectLoads is then irrelevant for ref*. The arm64
	// backend ignores it (it always uses safe reads and reports no Faults).
	FaultLoads bool

	// faultAlways (tests only, with FaultLoads) jumps to the recovery
	// code instead of executing each faulting instruction, as if every
	// fast-path read faulted (a copy as if it had faulted half-way).
	faultAlways bool
}

// FaultFixup is one instruction of Code.Text that may fault
// (Options.FaultLoads): a SIGSEGV or SIGBUS at offset Off must resume at
// offset Recover with every register as it was at the fault.
type FaultFixup struct {
	Off     int // offset of the faulting instruction in Text
	Recover int // offset of its recovery code in Text
}

// Reloc describes a place in Text that must be fixed up when the code is
// placed. The amd64 backend emits position-independent code and no relocs;
// the type exists so that a backend that needs them can report them.
type Reloc struct {
	Off  int    // offset in Text
	Kind string // backend-specific relocation kind
}

// Code is the result of compiling one expression.
type Code struct {
	Arch   string  // "amd64", ...
	Text   []byte  // machine code; nil when Fallback is set
	Relocs []Reloc // fix-ups needed when placing Text (none for amd64)
	// RegsRead lists the pad register slots the code reads (sorted): the
	// pad needs to save only these (plus what it needs itself).
	RegsRead []int
	// StackBytes bounds the machine stack the code uses below its
	// caller's stack pointer.
	StackBytes int
	// Faults lists the instructions that may fault and where to resume
	// (Options.FaultLoads only; sorted by Off). A fault in Text anywhere
	// else is a bug.
	Faults []FaultFixup
	// Fallback says why the expression was not compiled ("" if it was);
	// the caller must then use agentexpr.Eval.
	Fallback string
}

// Backend compiles agent expressions for one architecture.
type Backend interface {
	Compile(e *agentexpr.Expr, opts Options) (*Code, error)
}

// ForArch returns the backend for a GOARCH name, or an error.
func ForArch(arch string) (Backend, error) {
	switch arch {
	case "amd64":
		return amd64Backend{}, nil
	case "arm64":
		return arm64Backend{}, nil
	}
	return nil, fmt.Errorf("jit: no backend for architecture %q", arch)
}

// Compile compiles e for arch. A nil error with Code.Fallback set means the
// expression is valid but needs the interpreter.
func Compile(e *agentexpr.Expr, arch string, opts Options) (*Code, error) {
	b, err := ForArch(arch)
	if err != nil {
		return nil, err
	}
	return b.Compile(e, opts)
}

// flow is the result of the static stack analysis shared by backends.
type flow struct {
	depth    []int       // stack depth before each insn; -1 if unreachable
	index    map[int]int // byte offset -> insn index
	isTarget []bool      // insn is the target of some jump
	target   []int       // for jumps: insn index of the target
	maxDepth int
	regs     []int
}

// analyze computes stack depths and jump targets, and decides whether the
// expression can be compiled (fallback != "") or is invalid (err != nil).
func analyze(e *agentexpr.Expr, opts Options) (f *flow, fallback string, err error) {
	if e == nil || len(e.Insns) == 0 {
		return nil, "", fmt.Errorf("jit: empty expression")
	}
	maxStack := opts.MaxStack
	if maxStack <= 0 {
		maxStack = DefaultMaxStack
	}
	numRegs := opts.NumRegs
	if numRegs <= 0 {
		numRegs = PadRegs
	}
	n := len(e.Insns)
	f = &flow{depth: make([]int, n), index: make(map[int]int, n), isTarget: make([]bool, n), target: make([]int, n)}
	for i, in := range e.Insns {
		f.index[in.Off] = i
		f.depth[i] = -1
		f.target[i] = -1
	}
	regs := map[int]bool{}
	for i, in := range e.Insns {
		switch in.Op {
		case agentexpr.OpPrintf:
			return nil, "printf needs the interpreter", nil
		case agentexpr.OpFloat, agentexpr.OpRefFloat, agentexpr.OpRefDouble, agentexpr.OpRefLongDouble,
			agentexpr.OpLToD, agentexpr.OpDToL:
			return nil, fmt.Sprintf("floating-point opcode %s needs the interpreter", in.Op), nil
		case agentexpr.OpInvalid2:
			return nil, "", fmt.Errorf("jit: insn %d: invalid opcode %s", i, in.Op)
		case agentexpr.OpReg:
			if in.Imm >= uint64(numRegs) {
				return nil, fmt.Sprintf("register %d is not in the pad", in.Imm), nil
			}
			regs[int(in.Imm)] = true
		case agentexpr.OpExt:
			if in.Imm == 0 {
				return nil, "", fmt.Errorf("jit: insn %d: ext 0", i)
			}
		case agentexpr.OpGoto, agentexpr.OpIfGoto:
			t, ok := f.index[int(in.Imm)]
			if !ok {
				return nil, "", fmt.Errorf("jit: insn %d: jump to %d is not an instruction", i, in.Imm)
			}
			f.target[i] = t
			f.isTarget[t] = true
		case agentexpr.OpGetv, agentexpr.OpSetv, agentexpr.OpTracev:
			if in.Imm > 0xffff {
				return nil, "", fmt.Errorf("jit: insn %d: variable %d", i, in.Imm)
			}
		case agentexpr.OpPick:
			if in.Imm > 0xff {
				return nil, "", fmt.Errorf("jit: insn %d: pick %d", i, in.Imm)
			}
		}
	}
	// Propagate depths; every path must agree.
	work := []int{0}
	f.depth[0] = 0
	set := func(i, d int) error {
		if i >= n {
			return fmt.Errorf("jit: execution runs off the end of the code")
		}
		if f.depth[i] == -1 {
			f.depth[i] = d
			work = append(work, i)
			return nil
		}
		if f.depth[i] != d {
			return fmt.Errorf("jit: insn %d reached with stack depth %d and %d", i, f.depth[i], d)
		}
		return nil
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		in := e.Insns[i]
		d := f.depth[i]
		need, delta := in.StackEffect()
		if d < need {
			return nil, "", fmt.Errorf("jit: insn %d (%s): stack underflow", i, in.Op)
		}
		nd := d + delta
		if nd > f.maxDepth {
			f.maxDepth = nd
		}
		if nd > maxStack {
			return nil, fmt.Sprintf("stack depth %d exceeds the limit %d", nd, maxStack), nil
		}
		switch in.Op {
		case agentexpr.OpEnd:
		case agentexpr.OpGoto:
			if err := set(f.target[i], nd); err != nil {
				return nil, "", err
			}
		case agentexpr.OpIfGoto:
			if err := set(f.target[i], nd); err != nil {
				return nil, "", err
			}
			if err := set(i+1, nd); err != nil {
				return nil, "", err
			}
		default:
			if err := set(i+1, nd); err != nil {
				return nil, "", err
			}
		}
	}
	for r := range regs {
		f.regs = append(f.regs, r)
	}
	sort.Ints(f.regs)
	return f, "", nil
}
