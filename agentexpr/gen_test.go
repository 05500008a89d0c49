package agentexpr

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// progBuilder emits bytecode with forward and backward labels.
type progBuilder struct {
	code   []byte
	labels []int      // label → offset (-1 until placed)
	fixups [][2]int   // (offset of 2-byte target, label)
	rng    *rand.Rand //
	depth  int        // current stack depth (for pick/rot budgeting)
	budget int        // instructions left to spend on nesting
}

func (b *progBuilder) op(op Op, imm uint64) {
	var err error
	b.code, err = Encode(b.code, []Insn{{Op: op, Imm: imm}})
	if err != nil {
		panic(err)
	}
	_, delta := Insn{Op: op, Imm: imm}.StackEffect()
	b.depth += delta
}

func (b *progBuilder) newLabel() int {
	b.labels = append(b.labels, -1)
	return len(b.labels) - 1
}

func (b *progBuilder) place(l int) { b.labels[l] = len(b.code) }

func (b *progBuilder) jump(op Op, l int) {
	b.fixups = append(b.fixups, [2]int{len(b.code) + 1, l})
	b.code = append(b.code, byte(op), 0, 0)
	if op == OpIfGoto {
		b.depth--
	}
}

func (b *progBuilder) finish() []byte {
	for _, f := range b.fixups {
		t := b.labels[f[1]]
		b.code[f[0]], b.code[f[0]+1] = byte(t>>8), byte(t)
	}
	return b.code
}

// interesting constants for folding and edge cases.
var genConstants = []uint64{0, 1, 2, 3, 7, 8, 31, 32, 63, 64, 65, 127, 128, 255, 256,
	0x7fff, 0x8000, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff, 1 << 63, 1<<63 - 1,
	^uint64(0), ^uint64(1), 0x1000, 0x1004, 0x2000, 0x2003}

func (b *progBuilder) constant() {
	r := b.rng
	var v uint64
	switch r.IntN(4) {
	case 0:
		v = genConstants[r.IntN(len(genConstants))]
	case 1:
		v = uint64(r.IntN(16))
	case 2:
		v = r.Uint64() >> (r.IntN(64))
	default:
		v = r.Uint64()
	}
	op := ConstOp(v)
	if r.IntN(4) == 0 { // deliberately non-minimal encoding
		op = OpConst64
	}
	b.op(op, v)
	if r.IntN(5) == 0 {
		b.op(OpExt, uint64([]int{8, 16, 32, 64}[r.IntN(4)]))
	}
}

// address pushes an address that is usually readable.
func (b *progBuilder) address() {
	r := b.rng
	switch r.IntN(6) {
	case 0:
		b.value() // anything: usually unreadable
	case 1:
		b.op(OpReg, 3) // register 3 holds a valid address
		b.op(OpConst8, uint64(r.IntN(8)))
		b.op(OpAdd, 0)
	default:
		base := []uint64{0x1000, 0x2000, 0x1000 - 1, 0x3000}[r.IntN(4)]
		b.op(ConstOp(base), base)
		if r.IntN(2) == 0 {
			b.op(OpConst8, uint64(r.IntN(64)))
			b.op(OpAdd, 0)
		}
	}
}

var genBinary = []Op{OpAdd, OpSub, OpMul, OpDivSigned, OpDivUnsigned, OpRemSigned, OpRemUnsigned,
	OpLsh, OpRshSigned, OpRshUnsigned, OpBitAnd, OpBitOr, OpBitXor, OpEqual, OpLessSigned, OpLessUnsigned}

// value emits code that pushes exactly one value.
func (b *progBuilder) value() {
	r := b.rng
	b.budget--
	if b.budget <= 0 || b.depth > 40 {
		if r.IntN(3) == 0 {
			b.op(OpReg, uint64(r.IntN(6)))
		} else {
			b.constant()
		}
		return
	}
	switch r.IntN(22) {
	case 0, 1, 2:
		b.constant()
	case 3:
		b.op(OpReg, uint64(r.IntN(9))) // register 8 does not exist
	case 4:
		b.address()
		b.op([]Op{OpRef8, OpRef16, OpRef32, OpRef64}[r.IntN(4)], 0)
	case 5, 6, 7:
		b.value()
		b.value()
		b.op(genBinary[r.IntN(len(genBinary))], 0)
	case 8:
		b.value()
		switch r.IntN(4) {
		case 0:
			b.op(OpLogNot, 0)
		case 1:
			b.op(OpBitNot, 0)
		case 2:
			b.op(OpExt, uint64(1+r.IntN(70)))
		default:
			b.op(OpZeroExt, uint64(r.IntN(70)))
		}
	case 9:
		b.op(OpGetv, uint64(r.IntN(4))) // 3 is unknown
	case 10:
		b.value()
		b.op(OpSetv, uint64(r.IntN(3)))
	case 11: // if/else
		b.value()
		then, end := b.newLabel(), b.newLabel()
		b.jump(OpIfGoto, then)
		b.value()
		b.jump(OpGoto, end)
		b.depth--
		b.place(then)
		b.value()
		b.place(end)
	case 12:
		b.value()
		if r.IntN(3) == 0 {
			b.op(OpPick, 0)
		} else {
			b.op(OpDup, 0)
		}
		if r.IntN(3) == 0 {
			b.op(OpSwap, 0)
		}
		b.op(genBinary[r.IntN(len(genBinary))], 0)
	case 13:
		b.value()
		b.value()
		if r.IntN(2) == 0 {
			b.op(OpSwap, 0)
		}
		if r.IntN(3) == 0 {
			b.op(OpSwap, 0)
		}
		b.op(genBinary[r.IntN(len(genBinary))], 0)
	case 14:
		b.value()
		b.value()
		b.op(OpPick, 1)
		b.op(genBinary[r.IntN(len(genBinary))], 0)
		b.op(genBinary[r.IntN(len(genBinary))], 0)
	case 15:
		b.value()
		b.value()
		b.value()
		b.op(OpRot, 0)
		b.op(genBinary[r.IntN(len(genBinary))], 0)
		b.op(genBinary[r.IntN(len(genBinary))], 0)
	case 16: // collection, then a value
		switch r.IntN(5) {
		case 0:
			b.address()
			b.op(OpTraceQuick, uint64(r.IntN(256)))
			b.op(OpPop, 0)
		case 1:
			b.address()
			b.op(OpTrace16, uint64(r.IntN(1000)))
			b.op(OpPop, 0)
		case 2:
			b.address()
			b.op(OpConst8, uint64(r.IntN(40)))
			b.op(OpTrace, 0)
		case 3:
			b.address()
			b.op(OpConst8, uint64(r.IntN(40)))
			b.op(OpTracenz, 0)
		default:
			b.op(OpTracev, uint64(r.IntN(4)))
		}
		b.value()
	case 17: // push and discard
		b.value()
		b.value()
		b.op(OpPop, 0)
	case 18: // bounded loop: acc k; L: dup; log_not; if_goto exit; swap; acc op= v; swap; k--; goto L
		b.value()
		b.op(OpConst8, uint64(r.IntN(4)))
		top, exit := b.newLabel(), b.newLabel()
		b.place(top)
		b.op(OpDup, 0)
		b.op(OpLogNot, 0)
		b.jump(OpIfGoto, exit)
		b.op(OpSwap, 0)
		b.value()
		b.op(genBinary[r.IntN(3)], 0) // add, sub, mul: never fails
		b.op(OpSwap, 0)
		b.op(OpConst8, 1)
		b.op(OpSub, 0)
		b.jump(OpGoto, top)
		b.place(exit)
		b.op(OpPop, 0)
	case 19: // printf then a value
		n := r.IntN(3)
		for range n {
			b.value()
		}
		b.op(OpConst8, 0)
		b.op(OpConst8, 0)
		format := []string{"x\\n", "%d\\n", "%lx %u\\n"}[n]
		var err error
		b.code, err = Encode(b.code, []Insn{{Op: OpPrintf, Imm: uint64(n), Str: append([]byte(format), 0)}})
		if err != nil {
			panic(err)
		}
		b.depth -= n + 2
		b.value()
	case 20: // constant condition
		b.constant()
		skip := b.newLabel()
		b.value()
		b.op(OpSwap, 0)
		b.jump(OpIfGoto, skip)
		b.op(OpConst8, 1)
		b.op(OpAdd, 0)
		b.place(skip)
	default: // useless extensions after refs
		b.address()
		w := []Op{OpRef8, OpRef16, OpRef32}[r.IntN(3)]
		b.op(w, 0)
		if r.IntN(2) == 0 {
			b.op(OpZeroExt, uint64(OpTable[w].DataSize+r.IntN(40)))
		} else {
			b.op(OpExt, uint64(OpTable[w].DataSize+r.IntN(40)))
		}
	}
}

// randomProgram returns a valid random expression.
func randomProgram(r *rand.Rand) []byte {
	b := &progBuilder{rng: r, budget: 1 + r.IntN(30)}
	b.value()
	b.op(OpEnd, 0)
	if r.IntN(4) == 0 { // dead code after end
		b.op(OpConst8, 1)
		b.op(OpEnd, 0)
	}
	return b.finish()
}

// randomEnv returns an environment with random registers and memory.
func randomEnv(r *rand.Rand) (*Env, *recorder, fakeTSVs) {
	mem := &fakeMemory{regions: map[uint64][]byte{}}
	a := make([]byte, 96)
	for i := range a {
		a[i] = byte(r.IntN(256))
	}
	mem.regions[0x1000] = a
	s := make([]byte, 48)
	for i := range s {
		if r.IntN(5) == 0 {
			s[i] = 0
		} else {
			s[i] = byte('a' + r.IntN(26))
		}
	}
	mem.regions[0x2000] = s
	regs := fakeRegisters{}
	for i := 0; i < 8; i++ {
		regs[i] = genConstants[r.IntN(len(genConstants))] ^ uint64(r.IntN(3))
	}
	regs[3] = 0x1000 + uint64(r.IntN(32))
	tsv := fakeTSVs{0: int64(r.Uint64()), 1: int64(r.IntN(10)), 2: -1}
	rec := &recorder{}
	return &Env{Mem: mem, Regs: regs, TSV: tsv, Collect: rec, Out: rec, StepLimit: 20000}, rec, tsv
}

// errorClass names the sentinel an evaluation error belongs to.
func errorClass(err error) string {
	if err == nil {
		return "ok"
	}
	for _, c := range []error{ErrDivideByZero, ErrUnreadable, ErrStepLimit, ErrStackUnderflow,
		ErrStackOverflow, ErrBadRegister, ErrUnknownTSV, ErrBadJump, ErrNoEnd, ErrBadFormat, ErrFloat,
		ErrInvalidOpcode, ErrBadOperand, ErrEmpty, ErrNoCollector, ErrCollect, ErrOutput, ErrUnknownOpcode} {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return "other: " + err.Error()
}

// evalOutcome is everything observable about one evaluation.
type evalOutcome struct {
	Top     uint64
	Class   string
	Blocks  []block
	Printfs []string
	TSVs    []string
}

func runOutcome(e *Expr, seed uint64) evalOutcome {
	env, rec, tsv := randomEnv(rand.New(rand.NewPCG(seed, 99)))
	top, err := Eval(e, env)
	o := evalOutcome{Top: top, Class: errorClass(err), Blocks: rec.blocks, Printfs: rec.printfs, TSVs: sortedTSVs(tsv)}
	if err != nil {
		o.Top = 0
	}
	return o
}

func TestOptimizeDifferential(t *testing.T) {
	n := 100000
	if testing.Short() {
		n = 5000
	}
	r := rand.New(rand.NewPCG(1, 2))
	shrunk, classes := 0, map[string]int{}
	for i := 0; i < n; i++ {
		code := randomProgram(r)
		e, err := Parse(code)
		if err != nil {
			t.Fatalf("program %d: Parse: %v", i, err)
		}
		if err := Validate(e, Limits{}); err != nil {
			t.Fatalf("program %d: generator made an invalid program: %v\n%s", i, err, Disassemble(e))
		}
		o, err := Optimize(e)
		if err != nil {
			t.Fatalf("program %d: Optimize: %v\n%s", i, err, Disassemble(e))
		}
		if len(o.Code) > len(e.Code) {
			t.Fatalf("program %d: optimised code grew from %d to %d bytes\n%s", i, len(e.Code), len(o.Code), Explain(e))
		}
		if len(o.Code) < len(e.Code) {
			shrunk++
		}
		seed := r.Uint64()
		want, got := runOutcome(e, seed), runOutcome(o, seed)
		classes[want.Class]++
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("program %d (seed %d): original %+v\noptimised %+v\n%s", i, seed, want, got, Explain(e))
		}
	}
	t.Logf("%d programs, %d shrunk; outcomes %v", n, shrunk, classes)
	if shrunk < n/4 {
		t.Errorf("only %d of %d programs got smaller: the optimiser or the generator is broken", shrunk, n)
	}
	if classes["ok"] < n/4 {
		t.Errorf("only %d of %d programs ran to completion: the generator is too error-prone", classes["ok"], n)
	}
}

func TestRandomProgramsValidateDepth(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		e, err := Parse(randomProgram(r))
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(e, Limits{}); err != nil {
			t.Fatal(err)
		}
		if e.MaxDepth < 1 {
			t.Fatalf("MaxDepth %d for a program that pushes a value\n%s", e.MaxDepth, Disassemble(e))
		}
		// A stack limit one below MaxDepth must be rejected.
		if err := Validate(e, Limits{MaxStack: e.MaxDepth - 1 + boolInt(e.MaxDepth == 1)}); e.MaxDepth > 1 && !errors.Is(err, ErrStackOverflow) {
			t.Fatalf("MaxStack %d accepted for MaxDepth %d: %v", e.MaxDepth-1, e.MaxDepth, err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ExampleOptimize() {
	e, _ := Parse(MustAssemble("const8 1; if_goto yes; const8 2; end; yes:; const8 3; const8 4; mul; end"))
	o, _ := Optimize(e)
	fmt.Print(Disassemble(o))
	// Output:
	//     0  const8  12 (0xc)
	//     2  end
}
