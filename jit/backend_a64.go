package jit

import (
	"fmt"

	"gotpstub/agentexpr"
)

// PadRegsARM64 is the number of pad slots on arm64: GDB's aarch64
// numbering x0..x30 (0-30), sp (31), pc (32), cpsr (33).
const PadRegsARM64 = 34

// arm64Backend compiles to AArch64 machine code. Contract as for amd64 (see
// the package doc) with AAPCS64: fn(x0 = regs, x1 = ctx), result in x0.
type arm64Backend struct{}

// Register roles in generated arm64 code.
const (
	aTop   xreg = 0  // cached top of the expression stack
	aPad   xreg = 19 // regs
	aCtx   xreg = 20 // ctx
	aAddr  xreg = 21 // collection address
	aLen   xreg = 22 // collection remaining length
	aLink1 xreg = 23 // return address of first-level helpers
	aLink2 xreg = 24 // return address of the read helper
)

// Syscall number of process_vm_readv on arm64 Linux.
const sysProcessVMReadvARM64 = 270

type a64gen struct {
	a       a64asm
	e       *agentexpr.Expr
	f       *flow
	opts    Options
	labels  []int
	jumps   []jumpFix // field = branch insn offset
	errFix  map[int][]int
	callFix map[string][]int
	exitFix []int
	// sp-relative layout: expression slots at [sp, 8*slots), then scratch.
	slots                                    uint32
	liov, riov, val, save1, save2, jumpsLeft uint32
	frame                                    uint32
}

// Compile implements Backend.
func (arm64Backend) Compile(e *agentexpr.Expr, opts Options) (*Code, error) {
	if opts.NumRegs <= 0 {
		opts.NumRegs = PadRegsARM64
	}
	f, fallback, err := analyze(e, opts)
	if err != nil {
		return nil, err
	}
	if fallback != "" {
		return &Code{Arch: "arm64", Fallback: fallback}, nil
	}
	g := &a64gen{e: e, f: f, opts: opts, labels: make([]int, len(e.Insns)),
		errFix: map[int][]int{}, callFix: map[string][]int{}}
	g.slots = uint32(f.maxDepth+1) &^ 1 // even: keeps scratch 16-aligned
	s := 8 * g.slots
	g.liov, g.riov, g.val, g.save1, g.save2, g.jumpsLeft = s, s+16, s+32, s+40, s+48, s+56
	g.frame = s + 64
	if g.frame > 4095 { // one SUB immediate; also keeps every slot in LDR range
		return &Code{Arch: "arm64", Fallback: fmt.Sprintf("stack depth %d too deep for the arm64 frame", f.maxDepth)}, nil
	}
	if err := g.gen(); err != nil {
		return nil, err
	}
	return &Code{
		Arch:       "arm64",
		Text:       g.a.buf,
		RegsRead:   f.regs,
		StackBytes: 64 + int(g.frame),
	}, nil
}

func (g *a64gen) slot(k int) uint32 { return uint32(8 * k) }

func (g *a64gen) errIf(c a64cond, code int) {
	g.errFix[code] = append(g.errFix[code], g.a.bcond(c))
}

func (g *a64gen) call(name string) { g.callFix[name] = append(g.callFix[name], g.a.bl()) }

// push spills the top before pushing at depth d.
func (g *a64gen) push(d int) {
	if d >= 1 {
		g.a.str(aTop, xsp, g.slot(d-1))
	}
}

// reload loads the top after the stack shrank to d entries.
func (g *a64gen) reload(d int) {
	if d >= 1 {
		g.a.ldr(aTop, xsp, g.slot(d-1), 8)
	}
}

func (g *a64gen) gen() error {
	a := &g.a
	a.stpPre(xfp, xlr)
	a.addImm(xfp, xsp, 0)
	a.stpPre(19, 20)
	a.stpPre(21, 22)
	a.stpPre(23, 24)
	a.subImm(xsp, xsp, g.frame)
	a.mov(aPad, 0)
	a.mov(aCtx, 1)
	a.str(xzr, aCtx, CtxErr)
	a.ldr(9, aCtx, CtxJumpLimit, 8)
	a.movImm(10, DefaultJumpLimit)
	a.cmpImm(9, 0)
	a.csel(9, 10, 9, a64EQ)
	a.str(9, xsp, g.jumpsLeft)

	insns := g.e.Insns
	for i := 0; i < len(insns); i++ {
		g.labels[i] = a.pos()
		d := g.f.depth[i]
		if d < 0 {
			continue
		}
		in := insns[i]
		if n := g.atomicAdd(i); n > 0 {
			i += n
			continue
		}
		if !g.opts.NoFuse && i+1 < len(insns) && insns[i+1].Op == agentexpr.OpIfGoto && !g.f.isTarget[i+1] {
			c, ok := map[agentexpr.Op]a64cond{agentexpr.OpEqual: a64EQ, agentexpr.OpLessSigned: a64LT,
				agentexpr.OpLessUnsigned: a64LO, agentexpr.OpLogNot: a64EQ}[in.Op]
			if ok {
				if in.Op == agentexpr.OpLogNot {
					a.cmpImm(aTop, 0)
					g.reload(d - 1)
				} else {
					a.ldr(1, xsp, g.slot(d-2), 8)
					a.cmp(1, aTop)
					g.reload(d - 2)
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
	codes := []int{ErrMemory, ErrDivZero, ErrFrameFull, ErrTSV, ErrCollect, ErrSteps}
	stubs := map[int]int{}
	emitStubs := func() {
		for _, code := range codes {
			if _, ok := stubs[code]; ok || len(g.errFix[code]) == 0 {
				continue
			}
			stubs[code] = a.pos()
			a.movImm(9, uint64(code))
			a.str(9, aCtx, CtxErr)
			a.movImm(aTop, 0)
			g.exitFix = append(g.exitFix, a.b())
		}
	}
	emitStubs()
	exit := a.pos()
	a.str(aTop, aCtx, CtxResult)
	a.subImm(xsp, xfp, 48)
	a.ldpPost(23, 24)
	a.ldpPost(21, 22)
	a.ldpPost(19, 20)
	a.ldpPost(xfp, xlr)
	a.retReg(xlr)
	helpers := map[string]int{}
	for _, name := range []string{"ref1", "ref2", "ref4", "ref8", "collect", "collectStr", "readmem"} {
		if len(g.callFix[name]) == 0 {
			continue
		}
		helpers[name] = a.pos()
		g.helper(name)
	}
	emitStubs()
	for code, fields := range g.errFix {
		for _, fl := range fields {
			a.patch(fl, stubs[code])
		}
	}
	for _, fl := range g.exitFix {
		a.patch(fl, exit)
	}
	for name, fields := range g.callFix {
		for _, fl := range fields {
			a.patch(fl, helpers[name])
		}
	}
	for _, j := range g.jumps {
		a.patch(j.field, g.labels[j.target])
	}
	return nil
}

func (g *a64gen) condJump(c a64cond, i int) {
	a := &g.a
	if g.f.target[i] > i {
		g.jumps = append(g.jumps, jumpFix{a.bcond(c), g.f.target[i]})
		return
	}
	skip := a.bcond(c ^ 1)
	g.countJump()
	g.jumps = append(g.jumps, jumpFix{a.b(), g.f.target[i]})
	a.here(skip)
}

func (g *a64gen) countJump() {
	a := &g.a
	a.ldr(9, xsp, g.jumpsLeft, 8)
	a.subsImm(9, 9, 1)
	a.str(9, xsp, g.jumpsLeft)
	g.errIf(a64EQ, ErrSteps)
}

// atomicAdd emits gdb's `teval $n = $n + K` at instruction i (tsvAdd)
// as an exclusive load/store loop adding K to the variable (ldaxr, add,
// stlxr, retried until the store succeeds: ARMv8.0 has no LSE ldadd); it
// returns how many instructions after i it took (0: no such sequence
// there). The new value is the top, as setv leaves it.
func (g *a64gen) atomicAdd(i int) int {
	n, k, last, ok := tsvAdd(g.e, g.f, i)
	if !ok {
		return 0
	}
	a := &g.a
	g.push(g.f.depth[i])
	g.tsvCheck(n) // getv's check: ErrTSV for an unknown variable
	g.errIf(a64LS, ErrTSV)
	a.ldr(9, aCtx, CtxTSVs, 8)
	a.addLSL(9, 9, 10, 3)
	a.movImm(11, k)
	retry := a.pos()
	a.ldaxr(aTop, 9)
	a.add(aTop, aTop, 11)
	a.stlxr(12, aTop, 9)
	a.patch(a.cbnz(12), retry)
	for j := i + 1; j <= last; j++ {
		g.labels[j] = a.pos()
	}
	return last - i
}

// tsvCheck compares variable n with the count (flags: count vs n) and
// leaves n in x10.
func (g *a64gen) tsvCheck(n uint64) {
	a := &g.a
	a.ldr(9, aCtx, CtxNumTSVs, 8)
	a.movImm(10, n)
	a.cmp(9, 10)
}

func (g *a64gen) insn(i int, in agentexpr.Insn, d int) error {
	a := &g.a
	next := func() { a.ldr(1, xsp, g.slot(d-2), 8) } // x1 = entry below the top
	switch in.Op {
	case agentexpr.OpAdd:
		next()
		a.add(aTop, 1, aTop)
	case agentexpr.OpSub:
		next()
		a.sub(aTop, 1, aTop)
	case agentexpr.OpMul:
		next()
		a.mul(aTop, 1, aTop)
	case agentexpr.OpBitAnd:
		next()
		a.and(aTop, 1, aTop)
	case agentexpr.OpBitOr:
		next()
		a.orr(aTop, 1, aTop)
	case agentexpr.OpBitXor:
		next()
		a.eor(aTop, 1, aTop)
	case agentexpr.OpEqual, agentexpr.OpLessSigned, agentexpr.OpLessUnsigned:
		next()
		a.cmp(1, aTop)
		a.cset(aTop, map[agentexpr.Op]a64cond{agentexpr.OpEqual: a64EQ, agentexpr.OpLessSigned: a64LT, agentexpr.OpLessUnsigned: a64LO}[in.Op])
	case agentexpr.OpLsh, agentexpr.OpRshSigned, agentexpr.OpRshUnsigned:
		next()
		fill := xzr
		switch in.Op {
		case agentexpr.OpLsh:
			a.lslv(2, 1, aTop)
		case agentexpr.OpRshUnsigned:
			a.lsrv(2, 1, aTop)
		default:
			a.asrv(2, 1, aTop)
			a.sbfm(3, 1, 63, 63) // asr x3, x1, #63
			fill = 3
		}
		a.cmpImm(aTop, 64)
		a.csel(aTop, fill, 2, a64HS)
	case agentexpr.OpDivSigned, agentexpr.OpRemSigned, agentexpr.OpDivUnsigned, agentexpr.OpRemUnsigned:
		next()
		g.errFix[ErrDivZero] = append(g.errFix[ErrDivZero], a.cbz(aTop))
		// sdiv gives INT64_MIN for INT64_MIN / -1 and never traps.
		if in.Op == agentexpr.OpDivSigned || in.Op == agentexpr.OpRemSigned {
			a.sdiv(2, 1, aTop)
		} else {
			a.udiv(2, 1, aTop)
		}
		if in.Op == agentexpr.OpRemSigned || in.Op == agentexpr.OpRemUnsigned {
			a.msub(aTop, 2, aTop, 1)
		} else {
			a.mov(aTop, 2)
		}
	case agentexpr.OpLogNot:
		a.cmpImm(aTop, 0)
		a.cset(aTop, a64EQ)
	case agentexpr.OpBitNot:
		a.mvn(aTop, aTop)
	case agentexpr.OpExt:
		if in.Imm < 64 {
			a.sbfm(aTop, aTop, 0, uint32(in.Imm-1))
		}
	case agentexpr.OpZeroExt:
		switch {
		case in.Imm >= 64:
		case in.Imm == 0:
			a.movImm(aTop, 0)
		default:
			a.ubfm(aTop, aTop, 0, uint32(in.Imm-1))
		}
	case agentexpr.OpRef8:
		g.call("ref1")
	case agentexpr.OpRef16:
		g.call("ref2")
	case agentexpr.OpRef32:
		g.call("ref4")
	case agentexpr.OpRef64:
		g.call("ref8")
	case agentexpr.OpIfGoto:
		a.mov(9, aTop)
		g.reload(d - 1)
		a.cmpImm(9, 0)
		g.condJump(a64NE, i)
	case agentexpr.OpGoto:
		if g.f.target[i] <= i {
			g.countJump()
		}
		g.jumps = append(g.jumps, jumpFix{a.b(), g.f.target[i]})
	case agentexpr.OpConst8, agentexpr.OpConst16, agentexpr.OpConst32, agentexpr.OpConst64:
		g.push(d)
		a.movImm(aTop, in.Imm)
	case agentexpr.OpReg:
		g.push(d)
		a.ldr(aTop, aPad, uint32(8*in.Imm), 8)
	case agentexpr.OpEnd:
		if d == 0 {
			a.movImm(aTop, 0)
		}
		g.exitFix = append(g.exitFix, a.b())
	case agentexpr.OpDup:
		g.push(d)
	case agentexpr.OpPop:
		g.reload(d - 1)
	case agentexpr.OpPick:
		g.push(d)
		if in.Imm > 0 {
			a.ldr(aTop, xsp, g.slot(d-1-int(in.Imm)), 8)
		}
	case agentexpr.OpSwap:
		next()
		a.str(aTop, xsp, g.slot(d-2))
		a.mov(aTop, 1)
	case agentexpr.OpRot:
		a.ldr(1, xsp, g.slot(d-3), 8) // a
		a.ldr(2, xsp, g.slot(d-2), 8) // b
		a.str(aTop, xsp, g.slot(d-3))
		a.str(1, xsp, g.slot(d-2))
		a.mov(aTop, 2)
	case agentexpr.OpGetv:
		g.push(d)
		g.tsvCheck(in.Imm)
		g.errIf(a64LS, ErrTSV)
		a.ldr(9, aCtx, CtxTSVs, 8)
		a.addLSL(9, 9, 10, 3)
		a.ldr(aTop, 9, 0, 8)
	case agentexpr.OpSetv:
		g.tsvCheck(in.Imm)
		skip := a.bcond(a64LS)
		a.ldr(9, aCtx, CtxTSVs, 8)
		a.addLSL(9, 9, 10, 3)
		a.str(aTop, 9, 0)
		a.here(skip)
	case agentexpr.OpTracev:
		g.tsvCheck(in.Imm)
		g.errIf(a64LS, ErrCollect)
		a.ldr(9, aCtx, CtxTSVs, 8)
		a.addLSL(9, 9, 10, 3)
		a.ldr(11, 9, 0, 8) // value
		a.ldr(12, aCtx, CtxFrameUsed, 8)
		a.addImm(13, 12, 13)
		a.ldr(14, aCtx, CtxFrameCap, 8)
		a.cmp(13, 14)
		g.errIf(a64HI, ErrFrameFull)
		a.ldr(14, aCtx, CtxFrameBuf, 8)
		a.add(12, 14, 12)
		a.movImm(14, BlockTSV)
		a.stur(14, 12, 0, 1)
		a.stur(10, 12, 1, 4)
		a.stur(11, 12, 5, 8)
		a.str(13, aCtx, CtxFrameUsed)
	case agentexpr.OpTraceQuick, agentexpr.OpTrace16:
		a.str(aTop, xsp, g.slot(d-1)) // keep the address across the call
		a.mov(aAddr, aTop)
		a.movImm(aLen, in.Imm)
		g.call("collect")
		a.ldr(aTop, xsp, g.slot(d-1), 8)
	case agentexpr.OpTrace, agentexpr.OpTracenz:
		a.mov(aLen, aTop)
		a.ldr(aAddr, xsp, g.slot(d-2), 8)
		if in.Op == agentexpr.OpTrace {
			g.call("collect")
		} else {
			g.call("collectStr")
		}
		g.reload(d - 2)
	default:
		return fmt.Errorf("jit: arm64: insn %d: opcode %s not supported", i, in.Op)
	}
	return nil
}

// helper emits one out-of-line subroutine (entered with BL).
func (g *a64gen) helper(name string) {
	switch name {
	case "ref1", "ref2", "ref4", "ref8":
		g.refHelper(int(name[3] - '0'))
	case "collect":
		if g.opts.ZeroUnreadable {
			g.collectReadable()
		} else {
			g.collectHelper()
		}
	case "collectStr":
		g.collectStrHelper()
	case "readmem":
		g.readmemHelper()
	}
}

// refHelper emits the ref helper of size bytes. In: x0 = address. Out: x0
// = the zero-extended value.
func (g *a64gen) refHelper(size int) {
	a := &g.a
	a.mov(aLink1, xlr)
	if g.opts.DirectLoads {
		a.ldr(9, aCtx, CtxDirectLo, 8)
		a.cmp(aTop, 9)
		slow1 := a.bcond(a64LO)
		a.addImm(10, aTop, uint32(size))
		a.cmp(10, aTop)
		slow2 := a.bcond(a64LO)
		a.ldr(9, aCtx, CtxDirectHi, 8)
		a.cmp(10, 9)
		slow3 := a.bcond(a64HI)
		a.ldr(aTop, aTop, 0, size)
		a.retReg(aLink1)
		a.here(slow1)
		a.here(slow2)
		a.here(slow3)
	}
	a.mov(2, aTop)
	a.addImm(1, xsp, g.val)
	a.movImm(3, uint64(size))
	g.call("readmem")
	if g.opts.ZeroUnreadable {
		g.keepReadable(size)
		return
	}
	a.cmpImm(aTop, uint32(size))
	g.errIf(a64NE, ErrMemory)
	a.ldr(aTop, xsp, g.val, size)
	a.retReg(aLink1)
}

// keepReadable ends the ref helper under ZeroUnreadable: x0 = bytes read
// (or -errno) of size requested into the value slot; returns the value
// with the bytes past the readable prefix zeroed.
func (g *a64gen) keepReadable(size int) {
	a := &g.a
	a.mov(9, aTop)
	a.ldr(aTop, xsp, g.val, size)
	a.cmpImm(9, uint32(size))
	whole := a.bcond(a64GE)
	a.cmpImm(9, 0)
	none := a.bcond(a64LE)
	a.lslImm(9, 9, 3) // 8 <= bits < 64
	a.movImm(10, 1)
	a.lslv(10, 10, 9)
	a.subImm(10, 10, 1)
	a.and(aTop, aTop, 10)
	a.retReg(aLink1)
	a.here(none)
	a.movImm(aTop, 0)
	a.here(whole)
	a.retReg(aLink1)
}

// chunk sets x9 = min(aLen, 65535) and stores it in save1.
func (g *a64gen) chunk() {
	a := &g.a
	a.movImm(9, 65535)
	a.cmp(aLen, 9)
	a.csel(9, aLen, 9, a64LO)
	a.str(9, xsp, g.save1)
}

// addFrameUsed adds an 'M' block of x9 data bytes to frameused.
func (g *a64gen) addFrameUsed() {
	a := &g.a
	a.ldr(10, aCtx, CtxFrameUsed, 8)
	a.add(10, 10, 9)
	a.addImm(10, 10, 11)
	a.str(10, aCtx, CtxFrameUsed)
}

// collectHelper emits "collect": x21 = address, x22 = length; appends 'M'
// blocks of at most 65535 bytes. A block that does not fit fails with
// ErrCollect if unreadable (the interpreter reads before it records),
// else ErrFrameFull.
func (g *a64gen) collectHelper() {
	a := &g.a
	a.mov(aLink1, xlr)
	loop := a.pos()
	done := a.cbz(aLen)
	g.chunk()
	full := g.appendBlockHeader()
	a.mov(2, aAddr)
	a.mov(3, 9)
	g.call("readmem")
	a.ldr(9, xsp, g.save1, 8)
	a.cmp(aTop, 9)
	g.errIf(a64NE, ErrCollect)
	g.addFrameUsed()
	a.add(aAddr, aAddr, 9)
	a.sub(aLen, aLen, 9)
	a.patch(a.b(), loop)
	a.here(done)
	a.retReg(aLink1)
	a.here(full)
	g.probe()
	a.ldr(9, xsp, g.save1, 8)
	a.ldr(10, xsp, g.save2, 8)
	a.cmp(9, 10)
	g.errIf(a64NE, ErrCollect)
	g.errFix[ErrFrameFull] = append(g.errFix[ErrFrameFull], a.b())
}

// probe counts the readable prefix of the chunk at x21 (length in save1)
// into save2, reading at most 8 bytes at a time into the value slot.
func (g *a64gen) probe() {
	a := &g.a
	a.str(xzr, xsp, g.save2)
	loop := a.pos()
	a.ldr(9, xsp, g.save1, 8)
	a.ldr(10, xsp, g.save2, 8)
	a.sub(9, 9, 10)
	end := a.cbz(9)
	a.movImm(3, 8)
	a.cmp(9, 3)
	a.csel(3, 9, 3, a64LO)
	a.add(2, aAddr, 10)
	a.addImm(1, xsp, g.val)
	g.call("readmem")
	a.cmpImm(aTop, 0)
	bad := a.bcond(a64LE) // nothing read, or -errno
	a.ldr(10, xsp, g.save2, 8)
	a.add(10, 10, aTop)
	a.str(10, xsp, g.save2)
	a.patch(a.b(), loop)
	a.here(end)
	a.here(bad)
}

// collectReadable emits "collect" under ZeroUnreadable: x21 = address,
// x22 = length. Appends 'M' blocks of at most 65535 bytes holding the
// readable prefix of the range and stops at the first unreadable byte; a
// readable block that does not fit fails with ErrFrameFull.
func (g *a64gen) collectReadable() {
	a := &g.a
	a.mov(aLink1, xlr)
	loop := a.pos()
	done := []int{a.cbz(aLen)}
	g.chunk()
	notFit := g.fits()
	// Read the chunk (length in save1) straight into the frame.
	read := a.pos()
	a.ldr(3, xsp, g.save1, 8)
	a.ldr(10, aCtx, CtxFrameUsed, 8)
	a.ldr(12, aCtx, CtxFrameBuf, 8)
	a.add(1, 12, 10)
	a.addImm(1, 1, 11)
	a.mov(2, aAddr)
	g.call("readmem")
	a.cmpImm(aTop, 0)
	done = append(done, a.bcond(a64LE)) // nothing readable: stop
	a.mov(9, aTop)
	g.blockHeader()
	g.addFrameUsed()
	a.add(aAddr, aAddr, 9)
	a.sub(aLen, aLen, 9)
	a.ldr(10, xsp, g.save1, 8)
	a.cmp(9, 10)
	done = append(done, a.bcond(a64LO)) // short read: stop
	a.patch(a.b(), loop)
	// The chunk does not fit: record its readable prefix if that fits.
	a.here(notFit)
	g.probe()
	a.ldr(9, xsp, g.save2, 8)
	done = append(done, a.cbz(9))
	g.errFix[ErrFrameFull] = append(g.errFix[ErrFrameFull], g.fits())
	a.str(9, xsp, g.save1)
	a.mov(aLen, 9) // the prefix is the last block
	a.patch(a.b(), read)
	for _, d := range done {
		a.here(d)
	}
	a.retReg(aLink1)
}

// fits compares frameused + 11 + x9 with framecap and returns the branch,
// to patch, taken when the block does not fit.
func (g *a64gen) fits() int {
	a := &g.a
	a.ldr(10, aCtx, CtxFrameUsed, 8)
	a.add(11, 10, 9)
	a.addImm(11, 11, 11)
	a.ldr(12, aCtx, CtxFrameCap, 8)
	a.cmp(11, 12)
	return a.bcond(a64HI)
}

// blockHeader writes the header of an 'M' block of x9 bytes at x21 at
// frame + frameused (x10, x12, x13 scratch); frameused is not changed.
func (g *a64gen) blockHeader() {
	a := &g.a
	a.ldr(10, aCtx, CtxFrameUsed, 8)
	a.ldr(12, aCtx, CtxFrameBuf, 8)
	a.add(10, 12, 10)
	a.movImm(13, BlockMemory)
	a.stur(13, 10, 0, 1)
	a.stur(aAddr, 10, 1, 8)
	a.stur(9, 10, 9, 2)
}

// collectStrHelper emits "collectStr" (tracenz): x21 = address, x22 =
// limit. Reads byte by byte (like gdbserver) up to and including the
// first NUL; one 'M' block per 65535 bytes. Under ZeroUnreadable the
// first unreadable byte ends the string, unrecorded; otherwise it fails
// with ErrMemory.
func (g *a64gen) collectStrHelper() {
	a := &g.a
	a.mov(aLink1, xlr)
	loop := a.pos()
	done := a.cbz(aLen)
	g.chunk() // chunk limit
	a.str(xzr, xsp, g.save2)
	inner := a.pos()
	a.ldr(10, xsp, g.save2, 8)
	a.add(2, aAddr, 10)
	a.addImm(1, xsp, g.val)
	a.movImm(3, 1)
	g.call("readmem")
	a.cmpImm(aTop, 1)
	unreadable := -1
	if g.opts.ZeroUnreadable {
		unreadable = a.bcond(a64NE)
	} else {
		g.errIf(a64NE, ErrMemory)
	}
	a.ldr(9, xsp, g.save2, 8)
	a.addImm(9, 9, 1)
	a.str(9, xsp, g.save2)
	a.ldr(10, xsp, g.val, 1)
	gotNul := a.cbz(10)
	a.ldr(10, xsp, g.save1, 8)
	a.cmp(9, 10)
	a.patch(a.bcond(a64LO), inner)
	a.here(gotNul)
	record := a.pos()
	fullAt := g.appendBlockHeader() // x9 = block length
	a.mov(2, aAddr)
	a.mov(3, 9)
	g.call("readmem") // the bytes were readable a moment ago
	a.ldr(9, xsp, g.save2, 8)
	g.addFrameUsed()
	a.add(aAddr, aAddr, 9)
	a.sub(aLen, aLen, 9)
	a.ldr(10, xsp, g.val, 1) // stop after a NUL: the block's last byte
	a.patch(a.cbnz(10), loop)
	a.here(done)
	ret := a.pos()
	a.retReg(aLink1)
	g.errFix[ErrFrameFull] = append(g.errFix[ErrFrameFull], fullAt)
	if unreadable >= 0 {
		// The unreadable byte is the terminator: record the bytes
		// before it (if any) and stop.
		a.here(unreadable)
		a.str(xzr, xsp, g.val)
		a.ldr(9, xsp, g.save2, 8)
		a.patch(a.cbz(9), ret)
		a.patch(a.b(), record)
	}
}

// appendBlockHeader checks room for an 'M' block of x9 bytes at x21 and
// writes its header; leaves the data address in x1. Returns the branch,
// to patch, taken when it does not fit.
func (g *a64gen) appendBlockHeader() (full int) {
	full = g.fits()
	g.blockHeader()
	g.a.addImm(1, 10, 11)
	return full
}

// readmemHelper emits "readmem". In: x1 = destination, x2 = source, x3 =
// length. Out: x0 = bytes read (a short count when the range becomes
// unreadable) or -errno, from process_vm_readv or the ctx hook.
func (g *a64gen) readmemHelper() {
	a := &g.a
	a.mov(aLink2, xlr)
	a.ldr(9, aCtx, CtxReadMem, 8)
	hook := a.cbnz(9)
	a.str(1, xsp, g.liov)
	a.str(3, xsp, g.liov+8)
	a.str(2, xsp, g.riov)
	a.str(3, xsp, g.riov+8)
	a.ldr(0, aCtx, CtxPid, 8)
	a.addImm(1, xsp, g.liov)
	a.movImm(2, 1)
	a.addImm(3, xsp, g.riov)
	a.movImm(4, 1)
	a.movImm(5, 0)
	a.movImm(8, sysProcessVMReadvARM64)
	a.svc0()
	a.retReg(aLink2)
	a.here(hook)
	a.mov(0, aCtx)
	a.blr(9)
	a.retReg(aLink2)
}
