package jit

import (
	"fmt"
	"sort"

	"gotpstub/agentexpr"
)

// amd64Backend compiles to x86-64 machine code (see the package doc for the
// calling contract and register use).
type amd64Backend struct{}

// Register roles in generated amd64 code.
const (
	regTop  = rAX // cached top of the expression stack
	regPad  = r12 // saved-register block (first argument)
	regCtx  = r13 // context block (second argument)
	regSave = r14 // rsp saved by the memory-read helper while it realigns
	regAddr = rBX // collection helpers: address
	regLen  = r15 // collection helpers: remaining length
)

// Frame layout below rbp: the callee-saved registers the code uses (r12
// r13 always; rbx r14 r15 too when memory or collection helpers are
// emitted) at rbp-8..rbp-40, then scratch slots; rsp = rbp-frameSize,
// 16-aligned either way (2 or 5 pushes, sub 96 or 72).
const (
	slotJumps   = -104 // backward jumps left
	slotSave1   = -96  // helper spill
	slotSave2   = -88  // helper spill
	slotLocalIO = -80  // struct iovec local {base, len}
	slotRemIO   = -64  // struct iovec remote {base, len}
	slotValue   = -48  // destination of ref reads
	frameSize   = 112
)

// pureOps need no helper: expressions made only of them save only r12
// and r13.
var pureOps = map[agentexpr.Op]bool{
	agentexpr.OpAdd: true, agentexpr.OpSub: true, agentexpr.OpMul: true,
	agentexpr.OpDivSigned: true, agentexpr.OpDivUnsigned: true,
	agentexpr.OpRemSigned: true, agentexpr.OpRemUnsigned: true,
	agentexpr.OpLsh: true, agentexpr.OpRshSigned: true, agentexpr.OpRshUnsigned: true,
	agentexpr.OpLogNot: true, agentexpr.OpBitAnd: true, agentexpr.OpBitOr: true,
	agentexpr.OpBitXor: true, agentexpr.OpBitNot: true, agentexpr.OpEqual: true,
	agentexpr.OpLessSigned: true, agentexpr.OpLessUnsigned: true, agentexpr.OpExt: true,
	agentexpr.OpZeroExt: true, agentexpr.OpIfGoto: true, agentexpr.OpGoto: true,
	agentexpr.OpConst8: true, agentexpr.OpConst16: true, agentexpr.OpConst32: true,
	agentexpr.OpConst64: true, agentexpr.OpReg: true, agentexpr.OpEnd: true,
	agentexpr.OpDup: true, agentexpr.OpPop: true, agentexpr.OpSwap: true,
	agentexpr.OpGetv: true, agentexpr.OpSetv: true, agentexpr.OpPick: true,
	agentexpr.OpRot: true,
}

// savedGPRs returns the callee-saved registers the code must preserve.
func (g *x86gen) savedGPRs() []gpr {
	for _, in := range g.e.Insns {
		if !pureOps[in.Op] {
			return []gpr{rBX, r12, r13, r14, r15}
		}
	}
	return []gpr{r12, r13}
}

// Syscall number of process_vm_readv on x86-64 Linux.
const sysProcessVMReadv = 310

type jumpFix struct {
	field  int // rel32 field
	target int // insn index
}

type x86gen struct {
	a       asm
	e       *agentexpr.Expr
	f       *flow
	opts    Options
	labels  []int // code offset of each insn
	jumps   []jumpFix
	errFix  map[int][]int // error code -> rel32 fields jumping to its stub
	callFix map[string][]int
	exitFix []int // jumps to the common exit
	// FaultLoads: inline ref loads waiting for their recovery stubs, the
	// fault table, and the safe entry of the readmem helper.
	faultRefs []faultRef
	faults    []FaultFixup
	safeRead  int
}

// faultRef is one inline ref load (Options.FaultLoads).
type faultRef struct {
	load, resume int // offsets of the load and of the instruction after it
	size         int // bytes
	always       int // faultAlways: rel32 field of the jump to the stub; -1 otherwise
}

// Compile implements Backend.
func (amd64Backend) Compile(e *agentexpr.Expr, opts Options) (*Code, error) {
	f, fallback, err := analyze(e, opts)
	if err != nil {
		return nil, err
	}
	if fallback != "" {
		return &Code{Arch: "amd64", Fallback: fallback}, nil
	}
	g := &x86gen{e: e, f: f, opts: opts, labels: make([]int, len(e.Insns)),
		errFix: map[int][]int{}, callFix: map[string][]int{}}
	if err := g.gen(); err != nil {
		return nil, err
	}
	sort.Slice(g.faults, func(i, j int) bool { return g.faults[i].Off < g.faults[j].Off })
	return &Code{
		Arch:       "amd64",
		Text:       g.a.buf,
		Faults:     g.faults,
		RegsRead:   f.regs,
		StackBytes: 8 + frameSize + 8*f.maxDepth + 48, // return address, frame (rbp, saved regs, scratch), expression stack, helper calls and realignment
	}, nil
}

func (g *x86gen) jccErr(c cond, code int) {
	g.errFix[code] = append(g.errFix[code], g.a.jcc32(c))
}

func (g *x86gen) callHelper(name string) {
	g.callFix[name] = append(g.callFix[name], g.a.call32())
}

// pushTop spills the cached top before a push when the stack is not empty.
func (g *x86gen) pushTop(d int) {
	if d >= 1 {
		g.a.push(regTop)
	}
}

// popTop reloads the cached top after the stack shrank to d entries.
func (g *x86gen) popTop(d int) {
	if d >= 1 {
		g.a.pop(regTop)
	}
}

func (g *x86gen) gen() error {
	a := &g.a
	// Prologue.
	a.push(rBP)
	a.movRR(rBP, rSP)
	saved := g.savedGPRs()
	savedBytes := int32(8 * len(saved))
	for _, r := range saved {
		a.push(r)
	}
	a.aluRI(aluSub, rSP, frameSize-savedBytes)
	a.movRR(regPad, rDI)
	a.movRR(regCtx, rSI)
	a.aluRR32(aluXor, rAX, rAX)
	a.store64(at(regCtx, CtxErr), rAX)
	if g.hasBackwardJump() {
		// Only loops need the backward-jump budget.
		a.load64(rCX, at(regCtx, CtxJumpLimit))
		a.movImm(rDX, DefaultJumpLimit)
		a.testRR(rCX, rCX)
		a.cmovcc(condE, rCX, rDX)
		a.store64(at(rBP, slotJumps), rCX)
	}

	insns := g.e.Insns
	for i := 0; i < len(insns); i++ {
		g.labels[i] = a.pos()
		d := g.f.depth[i]
		if d < 0 {
			continue // unreachable
		}
		in := insns[i]
		if n := g.atomicAdd(i); n > 0 {
			i += n
			continue
		}
		// Fused compare-and-branch.
		if !g.opts.NoFuse && i+1 < len(insns) && insns[i+1].Op == agentexpr.OpIfGoto && !g.f.isTarget[i+1] {
			var c cond
			fuse := true
			switch in.Op {
			case agentexpr.OpEqual:
				c = condE
			case agentexpr.OpLessSigned:
				c = condL
			case agentexpr.OpLessUnsigned:
				c = condB
			case agentexpr.OpLogNot:
				c = condE
			default:
				fuse = false
			}
			if fuse {
				if in.Op == agentexpr.OpLogNot {
					a.testRR(regTop, regTop)
					g.popTop(d - 1)
				} else {
					a.pop(rCX)
					a.aluRR(aluCmp, rCX, regTop)
					g.popTop(d - 2)
				}
				g.labels[i+1] = a.pos()
				g.condJump(c, i+1)
				i++
				continue
			}
		}
		if err := g.insn(i, in, d); err != nil {
			return err
		}
	}
	// The exit comes right after the body (a final `end` falls into
	// it), the error stubs after the exit.
	exit := a.pos()
	a.store64(at(regCtx, CtxResult), rAX)
	a.lea(rSP, at(rBP, -savedBytes))
	for i := len(saved) - 1; i >= 0; i-- {
		a.pop(saved[i])
	}
	a.pop(rBP)
	a.ret()
	exitErr := map[int]int{}
	for _, code := range []int{ErrMemory, ErrDivZero, ErrFrameFull, ErrTSV, ErrCollect, ErrSteps} {
		if len(g.errFix[code]) == 0 {
			continue
		}
		exitErr[code] = a.pos()
		a.movImm(rCX, uint64(code))
		a.store64(at(regCtx, CtxErr), rCX)
		a.aluRR32(aluXor, rAX, rAX)
		g.exitFix = append(g.exitFix, a.jmp32())
	}
	// Recovery stubs of inline ref loads: redo the read with the safe
	// helper (same stack as at the load), then continue after the load.
	for _, fr := range g.faultRefs {
		rec := a.pos()
		g.callHelper(fmt.Sprintf("ref%d", fr.size))
		a.patch32(a.jmp32(), fr.resume)
		g.faults = append(g.faults, FaultFixup{Off: fr.load, Recover: rec})
		if fr.always >= 0 {
			a.patch32(fr.always, rec)
		}
	}
	helpers := map[string]int{}
	for _, name := range []string{"ref1", "ref2", "ref4", "ref8", "collect", "collectStr", "readmem"} {
		if name != "readmem" && len(g.callFix[name]) == 0 {
			continue
		}
		if name == "readmem" && len(helpers) == 0 {
			continue
		}
		helpers[name] = a.pos()
		g.helper(name)
	}
	if g.opts.FaultLoads && len(helpers) > 0 {
		helpers["readmemSafe"] = g.safeRead
	}
	// The helpers may reference error stubs emitted above only through
	// errFix recorded before the stubs were laid out; lay out any new ones.
	for _, code := range []int{ErrMemory, ErrDivZero, ErrFrameFull, ErrTSV, ErrCollect, ErrSteps} {
		if _, ok := exitErr[code]; ok || len(g.errFix[code]) == 0 {
			continue
		}
		exitErr[code] = a.pos()
		a.movImm(rCX, uint64(code))
		a.store64(at(regCtx, CtxErr), rCX)
		a.aluRR32(aluXor, rAX, rAX)
		g.exitFix = append(g.exitFix, a.jmp32())
	}
	for code, fields := range g.errFix {
		for _, fl := range fields {
			a.patch32(fl, exitErr[code])
		}
	}
	for _, fl := range g.exitFix {
		a.patch32(fl, exit)
	}
	if len(saved) < 5 && len(g.callFix) > 0 {
		return fmt.Errorf("jit: internal error: helpers emitted but rbx/r14/r15 not saved")
	}
	for name, fields := range g.callFix {
		for _, fl := range fields {
			a.patch32(fl, helpers[name])
		}
	}
	for _, j := range g.jumps {
		a.patch32(j.field, g.labels[j.target])
	}
	return nil
}

// insn emits the snippet of one instruction; d is the depth before it.
func (g *x86gen) insn(i int, in agentexpr.Insn, d int) error {
	a := &g.a
	switch in.Op {
	case agentexpr.OpAdd, agentexpr.OpSub, agentexpr.OpMul, agentexpr.OpBitAnd, agentexpr.OpBitOr,
		agentexpr.OpBitXor, agentexpr.OpEqual, agentexpr.OpLessSigned, agentexpr.OpLessUnsigned:
		a.pop(rCX) // rcx = next, rax = top; result = next OP top
		switch in.Op {
		case agentexpr.OpAdd:
			a.aluRR(aluAdd, rAX, rCX)
		case agentexpr.OpSub:
			a.aluRR(aluSub, rCX, rAX)
			a.movRR(rAX, rCX)
		case agentexpr.OpMul:
			a.imulRR(rAX, rCX)
		case agentexpr.OpBitAnd:
			a.aluRR(aluAnd, rAX, rCX)
		case agentexpr.OpBitOr:
			a.aluRR(aluOr, rAX, rCX)
		case agentexpr.OpBitXor:
			a.aluRR(aluXor, rAX, rCX)
		default:
			c := map[agentexpr.Op]cond{agentexpr.OpEqual: condE, agentexpr.OpLessSigned: condL, agentexpr.OpLessUnsigned: condB}[in.Op]
			a.aluRR(aluCmp, rCX, rAX)
			a.setcc(c, rAX)
			a.movzxRR8(rAX, rAX)
		}
	case agentexpr.OpLsh, agentexpr.OpRshSigned, agentexpr.OpRshUnsigned:
		a.pop(rDX)        // value
		a.movRR(rCX, rAX) // count
		a.movRR(rAX, rDX) // value
		op := shiftShl
		switch in.Op {
		case agentexpr.OpRshSigned:
			op = shiftSar
			a.shiftImm(shiftSar, rDX, 63) // fill for counts >= 64
		case agentexpr.OpRshUnsigned:
			op = shiftShr
			a.aluRR32(aluXor, rDX, rDX)
		default:
			a.aluRR32(aluXor, rDX, rDX)
		}
		a.shiftCL(op, rAX)
		a.aluRI(aluCmp, rCX, 64)
		a.cmovcc(condAE, rAX, rDX)
	case agentexpr.OpDivSigned, agentexpr.OpRemSigned, agentexpr.OpDivUnsigned, agentexpr.OpRemUnsigned:
		a.pop(rCX) // dividend; rax = divisor
		a.testRR(rAX, rAX)
		g.jccErr(condE, ErrDivZero)
		rem := in.Op == agentexpr.OpRemSigned || in.Op == agentexpr.OpRemUnsigned
		if in.Op == agentexpr.OpDivSigned || in.Op == agentexpr.OpRemSigned {
			// x / -1 = -x (wrapping) and x % -1 = 0, without idiv's trap.
			a.aluRI(aluCmp, rAX, -1)
			normal := a.jcc8(condNE)
			if rem {
				a.aluRR32(aluXor, rAX, rAX)
			} else {
				a.movRR(rAX, rCX)
				a.neg(rAX)
			}
			done := a.jmp8()
			a.here8(normal)
			a.movRR(r8, rAX)
			a.movRR(rAX, rCX)
			a.cqo()
			a.idiv(r8)
			if rem {
				a.movRR(rAX, rDX)
			}
			a.here8(done)
		} else {
			a.movRR(r8, rAX)
			a.movRR(rAX, rCX)
			a.aluRR32(aluXor, rDX, rDX)
			a.div(r8)
			if rem {
				a.movRR(rAX, rDX)
			}
		}
	case agentexpr.OpLogNot:
		a.testRR(rAX, rAX)
		a.setcc(condE, rAX)
		a.movzxRR8(rAX, rAX)
	case agentexpr.OpBitNot:
		a.not(rAX)
	case agentexpr.OpExt:
		if in.Imm < 64 {
			s := uint8(64 - in.Imm)
			a.shiftImm(shiftShl, rAX, s)
			a.shiftImm(shiftSar, rAX, s)
		}
	case agentexpr.OpZeroExt:
		switch {
		case in.Imm >= 64:
		case in.Imm == 0:
			a.aluRR32(aluXor, rAX, rAX)
		case in.Imm == 32:
			a.movRR32(rAX, rAX)
		default:
			s := uint8(64 - in.Imm)
			a.shiftImm(shiftShl, rAX, s)
			a.shiftImm(shiftShr, rAX, s)
		}
	case agentexpr.OpRef8, agentexpr.OpRef16, agentexpr.OpRef32, agentexpr.OpRef64:
		size := map[agentexpr.Op]int{agentexpr.OpRef8: 1, agentexpr.OpRef16: 2, agentexpr.OpRef32: 4, agentexpr.OpRef64: 8}[in.Op]
		if !g.opts.FaultLoads {
			g.callHelper(fmt.Sprintf("ref%d", size))
			break
		}
		// A plain load; a fault resumes at a stub that redoes it safely.
		fr := faultRef{size: size, always: -1}
		if g.opts.faultAlways {
			fr.always = a.jmp32()
		}
		fr.load = a.pos()
		a.loadZX(rAX, at(rAX, 0), size)
		fr.resume = a.pos()
		g.faultRefs = append(g.faultRefs, fr)
	case agentexpr.OpIfGoto:
		a.testRR(rAX, rAX)
		g.popTop(d - 1)
		g.condJump(condNE, i)
	case agentexpr.OpGoto:
		if g.f.target[i] <= i {
			g.countJump()
		}
		g.jumps = append(g.jumps, jumpFix{a.jmp32(), g.f.target[i]})
	case agentexpr.OpConst8, agentexpr.OpConst16, agentexpr.OpConst32, agentexpr.OpConst64:
		g.pushTop(d)
		a.movImm(rAX, in.Imm)
	case agentexpr.OpReg:
		g.pushTop(d)
		a.load64(rAX, at(regPad, int32(8*in.Imm)))
	case agentexpr.OpEnd:
		if d == 0 {
			a.aluRR32(aluXor, rAX, rAX)
		}
		if i != len(g.e.Insns)-1 {
			g.exitFix = append(g.exitFix, a.jmp32())
		} // else: the exit follows

	case agentexpr.OpDup:
		a.push(rAX)
	case agentexpr.OpPop:
		g.popTop(d - 1)
	case agentexpr.OpPick:
		a.push(rAX)
		if in.Imm > 0 {
			a.load64(rAX, at(rSP, int32(8*in.Imm)))
		}
	case agentexpr.OpSwap:
		a.load64(rCX, at(rSP, 0))
		a.store64(at(rSP, 0), rAX)
		a.movRR(rAX, rCX)
	case agentexpr.OpRot:
		// a b c (c = rax, b = [rsp], a = [rsp+8]) -> c a b.
		a.load64(rCX, at(rSP, 0))
		a.load64(rDX, at(rSP, 8))
		a.store64(at(rSP, 8), rAX)
		a.store64(at(rSP, 0), rDX)
		a.movRR(rAX, rCX)
	case agentexpr.OpGetv:
		g.pushTop(d)
		g.tsvSlot(in.Imm)
		a.load64(rAX, at(rCX, int32(8*in.Imm)))
	case agentexpr.OpSetv:
		// Like gdbserver, setting an unknown variable does nothing.
		a.aluMI(aluCmp, at(regCtx, CtxNumTSVs), int32(in.Imm))
		skip := a.jcc8(condBE)
		a.load64(rCX, at(regCtx, CtxTSVs))
		a.store64(at(rCX, int32(8*in.Imm)), rAX)
		a.here8(skip)
	case agentexpr.OpTracev:
		a.aluMI(aluCmp, at(regCtx, CtxNumTSVs), int32(in.Imm))
		g.jccErr(condBE, ErrCollect)
		a.load64(rCX, at(regCtx, CtxTSVs))
		a.load64(rSI, at(rCX, int32(8*in.Imm)))
		a.load64(rDX, at(regCtx, CtxFrameUsed))
		a.lea(rCX, at(rDX, 13))
		a.aluRM(aluCmp, rCX, at(regCtx, CtxFrameCap))
		g.jccErr(condA, ErrFrameFull)
		a.aluRM(aluAdd, rDX, at(regCtx, CtxFrameBuf))
		a.store8Imm(at(rDX, 0), BlockTSV)
		a.store64(at(rDX, 5), rSI)
		a.movImm(rSI, in.Imm)
		a.store32(at(rDX, 1), rSI)
		a.store64(at(regCtx, CtxFrameUsed), rCX)
	case agentexpr.OpTraceQuick, agentexpr.OpTrace16:
		a.push(rAX)
		a.movRR(regAddr, rAX)
		a.movImm(regLen, in.Imm)
		g.callHelper("collect")
		a.pop(rAX)
	case agentexpr.OpTrace, agentexpr.OpTracenz:
		a.movRR(regLen, rAX)
		a.pop(regAddr)
		if in.Op == agentexpr.OpTrace {
			g.callHelper("collect")
		} else {
			g.callHelper("collectStr")
		}
		g.popTop(d - 2)
	default:
		return fmt.Errorf("jit: amd64: insn %d: opcode %s not supported", i, in.Op)
	}
	return nil
}

// condJump emits a conditional jump for the if_goto at insn i. A backward
// jump is taken only while the jump budget lasts.
func (g *x86gen) condJump(c cond, i int) {
	a := &g.a
	if g.f.target[i] > i {
		g.jumps = append(g.jumps, jumpFix{a.jcc32(c), g.f.target[i]})
		return
	}
	skip := a.jcc8(c ^ 1) // not taken
	g.countJump()
	g.jumps = append(g.jumps, jumpFix{a.jmp32(), g.f.target[i]})
	a.here8(skip)
}

// hasBackwardJump reports whether any goto/if_goto jumps backwards (or to
// itself): only then can the code loop, and need the jump budget.
func (g *x86gen) hasBackwardJump() bool {
	for i, in := range g.e.Insns {
		if (in.Op == agentexpr.OpGoto || in.Op == agentexpr.OpIfGoto) && g.f.target[i] <= i {
			return true
		}
	}
	return false
}

// countJump spends one unit of the backward-jump budget or fails.
func (g *x86gen) countJump() {
	a := &g.a
	a.aluMI(aluSub, at(rBP, slotJumps), 1)
	g.jccErr(condE, ErrSteps)
}

// atomicAdd emits gdb's `teval $n = $n + K` at instruction i (tsvAdd)
// as one LOCK XADD on the variable; it returns how many instructions
// after i it took (0: no such sequence there).
func (g *x86gen) atomicAdd(i int) int {
	n, k, last, ok := tsvAdd(g.e, g.f, i)
	if !ok {
		return 0
	}
	a := &g.a
	g.pushTop(g.f.depth[i])
	g.tsvSlot(n) // getv's check: ErrTSV for an unknown variable
	a.movImm(rAX, k)
	a.lockXadd(at(rCX, int32(8*n)), rAX)
	a.aluRI(aluAdd, rAX, int32(k))
	for j := i + 1; j <= last; j++ {
		g.labels[j] = a.pos()
	}
	return last - i
}

// tsvSlot checks variable n against CtxNumTSVs and leaves the array base
// in rcx.
func (g *x86gen) tsvSlot(n uint64) {
	a := &g.a
	a.aluMI(aluCmp, at(regCtx, CtxNumTSVs), int32(n))
	g.jccErr(condBE, ErrTSV)
	a.load64(rCX, at(regCtx, CtxTSVs))
}

// helper emits one out-of-line subroutine (entered with CALL).
func (g *x86gen) helper(name string) {
	a := &g.a
	switch name {
	case "ref1", "ref2", "ref4", "ref8":
		size := int(name[3] - '0')
		// In: rax = address. Out: rax = zero-extended value.
		// Under FaultLoads only the recovery stubs call this: no fast
		// path, and the safe entry of readmem.
		if g.opts.DirectLoads && !g.opts.FaultLoads {
			a.aluRM(aluCmp, rAX, at(regCtx, CtxDirectLo))
			slow1 := a.jcc8(condB)
			a.lea(rCX, at(rAX, int32(size)))
			a.aluRR(aluCmp, rCX, rAX)
			slow2 := a.jcc8(condB) // wrapped around
			a.aluRM(aluCmp, rCX, at(regCtx, CtxDirectHi))
			slow3 := a.jcc8(condA)
			a.loadZX(rAX, at(rAX, 0), size)
			a.ret()
			a.here8(slow1)
			a.here8(slow2)
			a.here8(slow3)
		}
		a.lea(rDX, at(rBP, slotValue))
		a.movImm(rCX, uint64(size))
		if g.opts.FaultLoads {
			g.callHelper("readmemSafe")
		} else {
			g.callHelper("readmem")
		}
		if g.opts.ZeroUnreadable {
			// Keep the readable prefix (rax bytes), zero the rest.
			a.movRR(rCX, rAX)
			a.loadZX(rAX, at(rBP, slotValue), size)
			a.aluRI(aluCmp, rCX, int32(size))
			whole := a.jcc8(condGE)
			a.testRR(rCX, rCX)
			none := a.jcc8(condLE)
			a.shiftImm(shiftShl, rCX, 3)
			a.movImm(rDX, 1)
			a.shiftCL(shiftShl, rDX)
			a.aluRI(aluSub, rDX, 1)
			a.aluRR(aluAnd, rAX, rDX)
			a.ret()
			a.here8(none)
			a.aluRR32(aluXor, rAX, rAX)
			a.here8(whole)
			a.ret()
			return
		}
		a.aluRI(aluCmp, rAX, int32(size))
		g.jccErr(condNE, ErrMemory)
		a.loadZX(rAX, at(rBP, slotValue), size)
		a.ret()
	case "collect":
		if g.opts.ZeroUnreadable {
			g.collectReadable()
			return
		}
		// In: rbx = address, r15 = length. Appends 'M' blocks of at most
		// 65535 bytes each.
		loop := a.pos()
		a.testRR(regLen, regLen)
		done := a.jcc32(condE)
		a.movImm(rCX, 65535)
		a.aluRR(aluCmp, regLen, rCX)
		a.cmovcc(condB, rCX, regLen) // rcx = min(len, 65535)
		a.store64(at(rBP, slotSave1), rCX)
		a.load64(rDX, at(regCtx, CtxFrameUsed))
		a.lea(rSI, mem{base: rDX, index: int(rCX), scale: 1, disp: 11})
		a.aluRM(aluCmp, rSI, at(regCtx, CtxFrameCap))
		full := a.jcc32(condA)
		a.aluRM(aluAdd, rDX, at(regCtx, CtxFrameBuf))
		a.store8Imm(at(rDX, 0), BlockMemory)
		a.store64(at(rDX, 1), regAddr)
		a.store16(at(rDX, 9), rCX)
		a.lea(rDX, at(rDX, 11))
		a.movRR(rAX, regAddr)
		g.callHelper("readmem")
		a.aluRM(aluCmp, rAX, at(rBP, slotSave1))
		g.jccErr(condNE, ErrCollect)
		a.load64(rCX, at(rBP, slotSave1))
		a.load64(rDX, at(regCtx, CtxFrameUsed))
		a.lea(rDX, mem{base: rDX, index: int(rCX), scale: 1, disp: 11})
		a.store64(at(regCtx, CtxFrameUsed), rDX)
		a.aluRR(aluAdd, regAddr, rCX)
		a.aluRR(aluSub, regLen, rCX)
		a.patch32(a.jmp32(), loop)
		a.patch32(done, a.pos())
		a.ret()
		// The block does not fit: report unreadable memory if it is
		// (the interpreter reads before it records), else frame full.
		a.patch32(full, a.pos())
		g.probe()
		g.jccErr(condE, ErrFrameFull)
		g.jccErr(condNE, ErrCollect)
	case "collectStr":
		// In: rbx = address, r15 = limit. Reads byte by byte (like
		// gdbserver) up to and including the first NUL; one 'M' block per
		// 65535 bytes.
		loop := a.pos()
		a.testRR(regLen, regLen)
		done := a.jcc32(condE)
		a.movImm(rCX, 65535)
		a.aluRR(aluCmp, regLen, rCX)
		a.cmovcc(condB, rCX, regLen)
		a.store64(at(rBP, slotSave1), rCX) // chunk limit
		a.aluRR32(aluXor, rAX, rAX)
		a.store64(at(rBP, slotSave2), rAX) // bytes found so far
		inner := a.pos()
		// Read one byte at rbx+found into slotValue.
		a.load64(rAX, at(rBP, slotSave2))
		a.aluRR(aluAdd, rAX, regAddr)
		a.lea(rDX, at(rBP, slotValue))
		a.movImm(rCX, 1)
		g.callHelper("readmem")
		a.aluRI(aluCmp, rAX, 1)
		unreadable := -1
		if g.opts.ZeroUnreadable {
			// An unreadable byte ends the string, unrecorded.
			ok := a.jcc8(condE)
			a.load64(rCX, at(rBP, slotSave2))
			unreadable = a.jmp32()
			a.here8(ok)
		} else {
			g.jccErr(condNE, ErrMemory)
		}
		a.load64(rCX, at(rBP, slotSave2))
		a.aluRI(aluAdd, rCX, 1)
		a.store64(at(rBP, slotSave2), rCX)
		a.loadZX(rAX, at(rBP, slotValue), 1)
		a.testRR(rAX, rAX)
		gotNul := a.jcc32(condE)
		a.aluRM(aluCmp, rCX, at(rBP, slotSave1))
		a.patch32(a.jcc32(condB), inner)
		a.patch32(gotNul, a.pos())
		// rcx = block length; zero flag from test/cmp is lost, recompute
		// "NUL seen" later from the last byte.
		nothing := -1
		if unreadable >= 0 {
			a.patch32(unreadable, a.pos())
			a.testRR(rCX, rCX)
			nothing = a.jcc32(condE)
		}
		a.load64(rDX, at(regCtx, CtxFrameUsed))
		a.lea(rSI, mem{base: rDX, index: int(rCX), scale: 1, disp: 11})
		a.aluRM(aluCmp, rSI, at(regCtx, CtxFrameCap))
		g.jccErr(condA, ErrFrameFull)
		a.store64(at(regCtx, CtxFrameUsed), rSI)
		a.aluRM(aluAdd, rDX, at(regCtx, CtxFrameBuf))
		a.store8Imm(at(rDX, 0), BlockMemory)
		a.store64(at(rDX, 1), regAddr)
		a.store16(at(rDX, 9), rCX)
		a.lea(rDX, at(rDX, 11))
		a.movRR(rAX, regAddr)
		g.callHelper("readmem") // the bytes were readable a moment ago
		a.load64(rCX, at(rBP, slotSave2))
		a.aluRR(aluAdd, regAddr, rCX)
		a.aluRR(aluSub, regLen, rCX)
		// Stop after a NUL: the block's last byte.
		a.loadZX(rAX, at(rBP, slotValue), 1)
		a.testRR(rAX, rAX)
		a.patch32(a.jcc32(condNE), loop)
		a.patch32(done, a.pos())
		if nothing >= 0 {
			a.patch32(nothing, a.pos())
		}
		a.ret()
	case "readmem":
		// In: rdx = destination, rax = source, rcx = length.
		// Out: rax = bytes read or -errno. Clobbers the SysV caller-saved
		// registers. Realigns rsp to 16 bytes around the call/syscall.
		if g.opts.FaultLoads {
			g.fastRead()
		}
		g.safeRead = a.pos()
		a.push(regSave)
		a.movRR(regSave, rSP)
		a.aluRI(aluAnd, rSP, -16)
		a.load64(r8, at(regCtx, CtxReadMem))
		a.testRR(r8, r8)
		useFn := a.jcc8(condNE)
		a.store64(at(rBP, slotLocalIO), rDX)
		a.store64(at(rBP, slotLocalIO+8), rCX)
		a.store64(at(rBP, slotRemIO), rAX)
		a.store64(at(rBP, slotRemIO+8), rCX)
		a.load64(rDI, at(regCtx, CtxPid))
		a.lea(rSI, at(rBP, slotLocalIO))
		a.movImm(rDX, 1)
		a.lea(r10, at(rBP, slotRemIO))
		a.movImm(r8, 1)
		a.aluRR32(aluXor, r9, r9)
		a.movImm(rAX, sysProcessVMReadv)
		a.syscall()
		out := a.jmp8()
		a.here8(useFn)
		a.movRR(rDI, regCtx)
		a.movRR(rSI, rDX)
		a.movRR(rDX, rAX)
		a.callReg(r8)
		a.here8(out)
		a.movRR(rSP, regSave)
		a.pop(regSave)
		a.ret()
	}
}

// shortCopy is the longest read fastRead copies with a byte loop rather
// than REP MOVSB (whose start-up cost dominates short copies).
const shortCopy = 16

// fastRead emits the FaultLoads fast path of the readmem helper: a copy of
// rcx bytes from rax to rdx, returning rcx in rax: a byte loop up to
// shortCopy bytes, REP MOVSB beyond. The loop's byte load and the REP
// MOVSB are the only instructions that may fault (reading the source; the
// destination is the frame or a scratch slot, always mapped). The copy
// advances rsi, rdi and rcx (and uses r9), but rax, rdx and r8 (a copy of
// the length) keep the request: the recovery code, shared by both fault
// sites, puts the length back in rcx and falls into the safe path, which
// redoes the whole read from the start (a partial copy is overwritten).
func (g *x86gen) fastRead() {
	a := &g.a
	a.movRR(r8, rCX)
	a.movRR(rSI, rAX)
	a.movRR(rDI, rDX)
	var always []int
	emulateFault := func() {
		if g.opts.faultAlways {
			// Leave rsi, rdi and rcx as a fault half-way would.
			a.movRR(r9, rCX)
			a.shiftImm(shiftShr, r9, 1)
			a.aluRR(aluAdd, rSI, r9)
			a.aluRR(aluAdd, rDI, r9)
			a.aluRR(aluSub, rCX, r9)
			always = append(always, a.jmp32())
		}
	}
	a.aluRI(aluCmp, rCX, shortCopy)
	long := a.jcc8(condA)
	a.testRR(rCX, rCX)
	empty := a.jcc8(condE)
	emulateFault()
	loop := a.pos()
	loadAt := a.pos()
	a.loadZX(r9, at(rSI, 0), 1)
	a.store8(at(rDI, 0), r9)
	a.aluRI(aluAdd, rSI, 1)
	a.aluRI(aluAdd, rDI, 1)
	a.aluRI(aluSub, rCX, 1)
	a.patch8(a.jcc8(condNE), loop)
	a.here8(empty)
	a.movRR(rAX, r8)
	a.ret()
	a.here8(long)
	emulateFault()
	copyAt := a.pos()
	a.repMovsb()
	a.movRR(rAX, r8)
	a.ret()
	rec := a.pos()
	a.movRR(rCX, r8)
	g.faults = append(g.faults, FaultFixup{Off: loadAt, Recover: rec}, FaultFixup{Off: copyAt, Recover: rec})
	for _, f := range always {
		a.patch32(f, rec)
	}
}

// probe checks whether the current collect chunk (rbx, length at
// slotSave1) is readable, at most 8 bytes per read into slotValue. It leaves
// ZF set if every byte was readable, clear otherwise.
func (g *x86gen) probe() {
	a := &g.a
	a.aluRR32(aluXor, rAX, rAX)
	a.store64(at(rBP, slotSave2), rAX) // bytes probed so far
	loop := a.pos()
	a.load64(rCX, at(rBP, slotSave1))
	a.aluRM(aluSub, rCX, at(rBP, slotSave2)) // remaining; ZF if none
	ok := a.jcc32(condE)
	a.movImm(rDX, 8)
	a.aluRR(aluCmp, rCX, rDX)
	a.cmovcc(condA, rCX, rDX) // rcx = min(remaining, 8)
	a.load64(rAX, at(rBP, slotSave2))
	a.aluRR(aluAdd, rAX, regAddr)
	a.lea(rDX, at(rBP, slotValue))
	g.callHelper("readmem")
	a.testRR(rAX, rAX)
	bad := a.jcc32(condLE)
	a.load64(rCX, at(rBP, slotSave2))
	a.aluRR(aluAdd, rCX, rAX)
	a.store64(at(rBP, slotSave2), rCX)
	a.patch32(a.jmp32(), loop)
	a.patch32(bad, a.pos())
	a.testRR(rSP, rSP) // rsp != 0: ZF clear
	end := a.jmp8()
	a.patch32(ok, a.pos())
	a.aluRR32(aluXor, rAX, rAX) // ZF set
	a.here8(end)
}

// collectReadable emits the "collect" helper under Options.ZeroUnreadable.
// In: rbx = address, r15 = length. Appends 'M' blocks of at most 65535
// bytes holding the readable prefix of the range and stops at the first
// unreadable byte; a readable block that does not fit fails with
// ErrFrameFull.
func (g *x86gen) collectReadable() {
	a := &g.a
	loop := a.pos()
	a.testRR(regLen, regLen)
	done := []int{a.jcc32(condE)}
	a.movImm(rCX, 65535)
	a.aluRR(aluCmp, regLen, rCX)
	a.cmovcc(condB, rCX, regLen) // rcx = min(len, 65535)
	a.store64(at(rBP, slotSave1), rCX)
	a.load64(rDX, at(regCtx, CtxFrameUsed))
	a.lea(rSI, mem{base: rDX, index: int(rCX), scale: 1, disp: 11})
	a.aluRM(aluCmp, rSI, at(regCtx, CtxFrameCap))
	notFit := a.jcc32(condA)
	// Read the chunk (length at slotSave1) straight into the frame.
	read := a.pos()
	a.load64(rCX, at(rBP, slotSave1))
	a.load64(rDX, at(regCtx, CtxFrameUsed))
	a.aluRM(aluAdd, rDX, at(regCtx, CtxFrameBuf))
	a.lea(rDX, at(rDX, 11))
	a.movRR(rAX, regAddr)
	g.callHelper("readmem")
	a.testRR(rAX, rAX)
	done = append(done, a.jcc32(condLE)) // nothing readable: stop
	a.load64(rDX, at(regCtx, CtxFrameUsed))
	a.aluRM(aluAdd, rDX, at(regCtx, CtxFrameBuf))
	a.store8Imm(at(rDX, 0), BlockMemory)
	a.store64(at(rDX, 1), regAddr)
	a.store16(at(rDX, 9), rAX)
	a.load64(rCX, at(regCtx, CtxFrameUsed))
	a.lea(rCX, mem{base: rCX, index: int(rAX), scale: 1, disp: 11})
	a.store64(at(regCtx, CtxFrameUsed), rCX)
	a.aluRR(aluAdd, regAddr, rAX)
	a.aluRR(aluSub, regLen, rAX)
	a.aluRM(aluCmp, rAX, at(rBP, slotSave1))
	done = append(done, a.jcc32(condB)) // short read: stop
	a.patch32(a.jmp32(), loop)
	// The chunk does not fit: record its readable prefix if that fits.
	a.patch32(notFit, a.pos())
	g.probe()
	a.load64(rCX, at(rBP, slotSave2))
	a.testRR(rCX, rCX)
	done = append(done, a.jcc32(condE))
	a.load64(rDX, at(regCtx, CtxFrameUsed))
	a.lea(rSI, mem{base: rDX, index: int(rCX), scale: 1, disp: 11})
	a.aluRM(aluCmp, rSI, at(regCtx, CtxFrameCap))
	g.jccErr(condA, ErrFrameFull)
	a.store64(at(rBP, slotSave1), rCX)
	a.movRR(regLen, rCX) // the prefix is the last block
	a.patch32(a.jmp32(), read)
	for _, f := range done {
		a.patch32(f, a.pos())
	}
	a.ret()
}
