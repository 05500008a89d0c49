package jit

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// The arm64 register block of a record (RecRegs) and of the pad's save
// area: PadRegsARM64 8-byte slots (x0..x30, sp, pc, cpsr, GDB's aarch64
// numbering), then q0-q31 (16 bytes each, little-endian) and fpsr, fpcr
// (8-byte slots). See the "Jump pads (arm64)" section of the package doc.
const (
	PadQRegsARM64    = PadRegsARM64 * 8                 // offset of q0 in the block
	PadFPSRARM64     = PadQRegsARM64 + 32*16            // offset of fpsr
	PadFPCRARM64     = PadFPSRARM64 + 8                 // offset of fpcr
	PadRegBlockARM64 = PadFPCRARM64 + 8                 // bytes of the block (800)
	padA64RedZone    = 128                              // bytes left alone below the thread's sp
	padA64Frame      = padA64RedZone + PadRegBlockARM64 // the thread's sp minus the block's address
	padA64Below      = CtxSize + padLocals              // ctx and locals below the block
)

// PadRecordSizeARM64 is PadRecordSize for arm64 pads: header, the arm64
// register block (PadRegBlockARM64 bytes) when regs, and collectCap
// bytes of blocks, rounded up to RecAlign.
func PadRecordSizeARM64(regs bool, collectCap uint32) uint64 {
	n := uint64(RecHeaderSize) + uint64(collectCap)
	if regs {
		n += PadRegBlockARM64
	}
	return (n + RecAlign - 1) &^ (RecAlign - 1)
}

// RecordSizeARM64 returns the bytes the arm64 pad of spec reserves for one
// record.
func (spec PadSpec) RecordSizeARM64() uint64 {
	return PadRecordSizeARM64(spec.CollectRegs, spec.CollectCap)
}

// Registers the arm64 pad body keeps across expression calls (callee-saved
// in AAPCS64; the arm64 backend saves x19-x24 and uses no other of them).
const (
	pa64Ctl    xreg = 19 // control block
	pa64Record xreg = 20 // reserved record
	pa64Size   xreg = 21 // size to reserve; then frameused / error code
	pa64Lane   xreg = 22 // lane header
	pa64TP     xreg = 23 // tracepoint table entry
	pa64Base   xreg = 24 // register block (the save area)
	pa64Shared xreg = 25 // nonzero: pa64Lane is the shared lane
)

// a64PadBuilder carries the branch fixups of one arm64 pad.
type a64PadBuilder struct {
	a          a64asm
	spec       PadSpec
	recSize    uint64
	skip       []int // branches to Skip
	pass       []int // branches to the passcount check
	collects   []int // BLs to the Collect code
	cond       int   // BL to the Cond code (-1: none)
	condErr    int   // branch taken when the condition fails (-1: none)
	collectErr []int // branches taken when a collection fails
}

// BuildJumpPadA64 generates the arm64 jump pad for spec: the AArch64 twin
// of BuildJumpPadAMD64, with the same control block, lanes and record
// format (the register block is the arm64 one, PadRegBlockARM64 bytes).
// spec.FSBase, TPLoad and the XSAVE fields are x86 notions: the first two
// are ignored (tpidr_el0 is always readable), XSaveSize must be 0. See the
// "Jump pads (arm64)" section of the package doc.
func BuildJumpPadA64(spec PadSpec) (*JumpPad, error) {
	if err := checkPadSpecA64(spec); err != nil {
		return nil, err
	}
	b := &a64PadBuilder{spec: spec, cond: -1, condErr: -1, recSize: spec.RecordSizeARM64()}
	b.a.buf = make([]byte, 0, padBufHint(spec)+1024)
	early := b.fastExit()
	b.save()
	b.entry()
	b.condition()
	b.passcount()
	b.record()
	b.passCheck()
	skip := b.restore()
	tail := b.a.b()
	b.collectError()
	b.conditionError()
	b.placeCode()
	for _, f := range b.skip {
		b.a.patch(f, skip)
	}
	exprStack := 0
	for _, c := range append([]*Code{spec.Cond}, spec.Collect...) {
		if c != nil {
			exprStack = max(exprStack, c.StackBytes)
		}
	}
	pad := &JumpPad{
		StackBytes: padA64Frame + padA64Below + exprStack,
		Code:       b.a.buf,
		Skip:       spec.Addr + uint64(skip),
		at:         spec.Addr,
		tailRels:   []int{tail, early},
		a64:        true,
	}
	if err := pad.Place(spec.Addr, spec.TailAddr); err != nil {
		return nil, err
	}
	return pad, nil
}

// placeA64 is Place for an arm64 pad: it rewrites the B instructions to
// the tail (±128 MB) and shifts Skip.
func (p *JumpPad) placeA64(addr, tail uint64) error {
	if addr%4 != 0 || tail%4 != 0 {
		return fmt.Errorf("jit: arm64 jump pad at %#x: pad or tail %#x not 4-byte aligned", addr, tail)
	}
	words := make([]uint32, len(p.tailRels))
	for i, off := range p.tailRels {
		rel := int64(tail) - int64(addr+uint64(off))
		if rel < -(1<<27) || rel >= 1<<27 {
			return fmt.Errorf("jit: arm64 jump pad at %#x: tail %#x out of a B's ±128 MB", addr, tail)
		}
		words[i] = 0x14000000 | uint32(rel/4)&0x03ffffff
	}
	for i, off := range p.tailRels {
		binary.LittleEndian.PutUint32(p.Code[off:], words[i])
	}
	p.Skip += addr - p.at
	p.at = addr
	return nil
}

// checkPadSpecA64 rejects what the arm64 pad cannot encode.
func checkPadSpecA64(spec PadSpec) error {
	fits := func(c *Code) bool { return len(c.Faults) == 0 && len(c.Text) > 0 && len(c.Text)%4 == 0 }
	if err := checkPadCodes(spec, "arm64", fits); err != nil {
		return err
	}
	if spec.XSaveSize != 0 {
		return fmt.Errorf("jit: jump pad: XSAVE area on arm64")
	}
	return checkPadShared(spec, spec.RecordSizeARM64())
}

// needsBlock reports whether anything reads the register block's sp and
// pc slots: the record (CollectRegs) or an expression that reads
// registers. The GPRs and nzcv are saved there in any case.
func (b *a64PadBuilder) needsBlock() bool { return b.spec.readsRegisters() }

// fastExit moves sp below the red zone and the save area (SUB leaves the
// flags alone), checks CtlActive with x16 and, when it is 0, restores x16
// and sp and branches to the tail (the returned B, patched by Place).
func (b *a64PadBuilder) fastExit() int {
	a := &b.a
	a.subImm(xsp, xsp, padA64Frame)
	a.str(16, xsp, 16*8)
	a.movImm(16, b.spec.Ctl)
	a.ldr(16, 16, CtlActive, 8)
	on := a.cbnz(16)
	a.ldr(16, xsp, 16*8, 8)
	a.addImm(xsp, xsp, padA64Frame)
	tail := a.b()
	a.here(on)
	return tail
}

// save stores x0-x30 and nzcv into the register block at sp, the sp and
// pc slots when something reads them, and with CollectRegs q0-q31, fpsr
// and fpcr; then it points pa64Base at the block and makes room for the
// ctx and the locals. x16 is already in its slot (fastExit).
func (b *a64PadBuilder) save() {
	a := &b.a
	for r := xreg(0); r < 16; r += 2 {
		a.stp(r, r+1, xsp, int32(8*r))
	}
	a.str(17, xsp, 17*8)
	for r := xreg(18); r < 30; r += 2 {
		a.stp(r, r+1, xsp, int32(8*r))
	}
	a.str(30, xsp, 30*8)
	a.mrs(0, sysNZCV)
	a.str(0, xsp, 33*8)
	if b.needsBlock() {
		a.addImm(0, xsp, 0)
		a.movImm(1, uint64(int64(padA64Frame)+int64(b.spec.SPBias)))
		a.add(0, 0, 1)
		a.str(0, xsp, 31*8)
		a.movImm(0, b.spec.TPAddr)
		a.str(0, xsp, 32*8)
	}
	if b.spec.CollectRegs {
		for q := xreg(0); q < 32; q += 2 {
			a.stpQ(q, q+1, xsp, int32(PadQRegsARM64+16*q))
		}
		a.mrs(0, sysFPSR)
		a.str(0, xsp, PadFPSRARM64)
		a.mrs(0, sysFPCR)
		a.str(0, xsp, PadFPCRARM64)
	}
	a.addImm(pa64Base, xsp, 0)
	a.subImm(xsp, xsp, padA64Below)
}

// entry leaves when tracing is off or no stub is alive (counted in
// CtlStubGoneSkips); otherwise it reads the time and the tracepoint
// entry's address.
func (b *a64PadBuilder) entry() {
	a := &b.a
	a.movImm(pa64Ctl, b.spec.Ctl)
	a.ldr(0, pa64Ctl, CtlActive, 8)
	b.skip = append(b.skip, a.cbz(0))
	a.ldr(0, pa64Ctl, CtlStubAlive, 4)
	a.movImm(1, StubTIDMask)
	a.and(0, 0, 1)
	alive := a.cbnz(0)
	a.addImm(1, pa64Ctl, CtlStubGoneSkips)
	atomicAddA64(a, 1, 1)
	b.skip = append(b.skip, a.b())
	a.here(alive)
	a.mrs(0, sysCNTVCT)
	a.str(0, xsp, locTime)
	a.movImm(pa64TP, uint64(CtlTPs)+uint64(b.spec.TPIndex)*CtlTPSize)
	a.add(pa64TP, pa64Ctl, pa64TP)
}

// atomicAddA64 adds imm (< 4096) to the u64 at [addr] with an exclusive
// loop. Clobbers x2 and x3 (addr must be neither).
func atomicAddA64(a *a64asm, addr xreg, imm uint32) {
	loop := a.pos()
	a.ldxr(2, addr)
	a.addImm(2, 2, imm)
	a.stxr(3, 2, addr)
	a.patch(a.cbnz(3), loop)
}

// initCtx zeroes the ctx block at sp and fills tsvs, ntsvs, pid and the
// jump budget. Clobbers x0.
func (b *a64PadBuilder) initCtx() {
	a := &b.a
	for off := int32(0); off < CtxSize; off += 16 {
		a.stp(xzr, xzr, xsp, off)
	}
	for _, f := range [][2]uint32{{CtlTSVs, CtxTSVs}, {CtlNTSVs, CtxNumTSVs}, {CtlPid, CtxPid}} {
		a.ldr(0, pa64Ctl, f[0], 8)
		a.str(0, xsp, f[1])
	}
	a.movImm(0, PadJumpLimit)
	a.str(0, xsp, CtxJumpLimit)
}

// callCode calls expression code (the returned BL, patched by
// placeCode) with x0 = the register block and x1 = the ctx, and leaves
// its error code in x0.
func (b *a64PadBuilder) callCode() int {
	a := &b.a
	a.mov(0, pa64Base)
	a.addImm(1, xsp, 0)
	bl := a.bl()
	a.ldr(0, xsp, CtxErr, 8)
	return bl
}

// condition calls the condition code: false skips, an error goes to the
// condition-error path (x0 = the Err* code).
func (b *a64PadBuilder) condition() {
	if b.spec.Cond == nil {
		return
	}
	a := &b.a
	b.initCtx()
	b.cond = b.callCode()
	b.condErr = a.cbnz(0)
	a.ldr(0, xsp, CtxResult, 8)
	b.skip = append(b.skip, a.cbz(0))
}

// passcount numbers the hit when the tracepoint has a passcount; a hit
// past it (another thread got there first) is skipped.
func (b *a64PadBuilder) passcount() {
	a := &b.a
	a.str(xzr, xsp, locHit)
	a.ldr(0, pa64TP, TPPassCount, 8)
	none := a.cbz(0)
	loop := a.pos()
	a.ldxr(2, pa64TP) // TPHits is at +0
	a.addImm(2, 2, 1)
	a.stxr(3, 2, pa64TP)
	a.patch(a.cbnz(3), loop)
	a.cmp(2, 0)
	b.skip = append(b.skip, a.bcond(a64HI))
	a.str(2, xsp, locHit)
	a.here(none)
}

// record finds the thread's lane, reserves a record and fills it:
// header, register block, collection; the size is stored last with a
// store-release (the commit). A full lane drops the hit and goes on to
// the passcount check.
func (b *a64PadBuilder) record() {
	a := &b.a
	b.lane()
	if b.spec.Compact {
		b.compactRecord()
	}
	a.movImm(pa64Size, b.recSize)
	b.pass = append(b.pass, b.reserve()...)
	flags := uint32(0)
	regBytes := uint32(0)
	if b.spec.CollectRegs {
		flags, regBytes = RecRegs, PadRegBlockARM64
	}
	b.header(0, flags)
	if b.spec.CollectRegs {
		b.copyBlock()
	}
	a.movImm(pa64Size, 0)
	counted := len(b.spec.Collect) - b.spec.Uncounted
	for i := range b.spec.Collect {
		if i == counted {
			a.str(pa64Size, xsp, locCounted)
		}
		b.initCtx()
		a.addImm(0, pa64Record, RecHeaderSize+regBytes)
		a.str(0, xsp, CtxFrameBuf)
		a.movImm(0, uint64(b.spec.CollectCap))
		a.str(0, xsp, CtxFrameCap)
		a.str(pa64Size, xsp, CtxFrameUsed)
		b.collects = append(b.collects, b.callCode())
		b.collectErr = append(b.collectErr, a.cbnz(0))
		a.ldr(pa64Size, xsp, CtxFrameUsed, 8)
	}
	a.stur(pa64Size, pa64Record, RecUsed, 4)
	a.movImm(0, b.recSize)
	a.stlr32(0, pa64Record) // RecSize: the commit
	if counted < len(b.spec.Collect) {
		a.ldr(pa64Size, xsp, locCounted, 8)
	}
	b.spend()
}

// copyBlock copies the register block into the record after its header.
// Clobbers x0-x4 and the flags.
func (b *a64PadBuilder) copyBlock() {
	a := &b.a
	a.mov(0, pa64Base)
	a.addImm(1, pa64Record, RecHeaderSize)
	a.movImm(2, PadRegBlockARM64/16)
	loop := a.pos()
	a.ldpPostN(3, 4, 0, 16)
	a.stpPostN(3, 4, 1, 16)
	a.subsImm(2, 2, 1)
	a.patch(a.bcond(a64NE), loop)
}

// compactRecord writes the hit as a compact record (one store-release,
// the commit) when the thread owns its lane and goes on to the passcount
// check; in the shared lane it falls through to the full record.
func (b *a64PadBuilder) compactRecord() {
	a := &b.a
	shared := a.cbnz(pa64Shared)
	a.movImm(pa64Size, RecCompactSize)
	b.pass = append(b.pass, b.reserve()...)
	a.ldr(0, xsp, locTime, 8)
	a.ubfm(0, 0, 0, RecCompactTimeBits-1)
	a.movImm(1, RecCompactBit|uint64(b.spec.TPIndex)<<RecCompactTPShift)
	a.orr(0, 0, 1)
	a.stlr(0, pa64Record)
	a.movImm(pa64Size, 0)
	b.spend()
	b.pass = append(b.pass, a.b())
	a.here(shared)
}

// spend adds the committed record's frame bytes (FrameBase + used, used
// in pa64Size) to the lane's LaneSpent with an exclusive loop; the pad
// whose add takes it past a nonzero LaneBudget clears CtlActive.
// Clobbers x0-x4.
func (b *a64PadBuilder) spend() {
	a := &b.a
	a.movImm(0, uint64(b.spec.FrameBase))
	a.add(0, 0, pa64Size)
	a.addImm(1, pa64Lane, LaneSpent)
	loop := a.pos()
	a.ldxr(2, 1)
	a.add(2, 2, 0)
	a.stxr(3, 2, 1)
	a.patch(a.cbnz(3), loop)
	a.ldr(4, pa64Lane, LaneBudget, 8)
	none := a.cbz(4)
	a.cmp(4, 2)
	within := a.bcond(a64HS)
	a.str(xzr, pa64Ctl, CtlActive)
	a.here(within)
	a.here(none)
}

// header writes a reserved record's header but its size: tracepoint,
// used, flags, time and thread. Clobbers x0 and x1.
func (b *a64PadBuilder) header(used, flags uint32) {
	a := &b.a
	a.movImm(0, uint64(b.spec.TPIndex))
	a.stur(0, pa64Record, RecTPIndex, 4)
	a.movImm(0, uint64(used)|uint64(flags)<<32)
	a.str(0, pa64Record, RecUsed) // used and flags
	a.ldr(0, xsp, locTime, 8)
	a.ldr(1, xsp, locThread, 8)
	a.stp(0, 1, pa64Record, RecTime)
}

// passCheck: the hit that reaches the passcount stops tracing.
func (b *a64PadBuilder) passCheck() {
	a := &b.a
	for _, f := range b.pass {
		a.here(f)
	}
	a.ldr(0, xsp, locHit, 8)
	b.skip = append(b.skip, a.cbz(0))
	a.ldr(1, pa64TP, TPPassCount, 8)
	a.cmp(0, 1)
	b.skip = append(b.skip, a.bcond(a64NE))
	b.stopTracing(StopPassCount)
	b.skip = append(b.skip, a.b())
}

// stopTracing sets CtlStop (why, tracepoint index) unless another pad
// did first, then clears CtlActive with a store-release, so that the stop
// word is visible first. Clobbers x0-x3.
func (b *a64PadBuilder) stopTracing(why uint64) {
	a := &b.a
	a.movImm(1, why|uint64(b.spec.TPIndex)<<32)
	a.addImm(2, pa64Ctl, CtlStop)
	loop := a.pos()
	a.ldaxr(0, 2)
	set := a.cbnz(0)
	a.stlxr(3, 1, 2)
	a.patch(a.cbnz(3), loop)
	a.here(set)
	a.clrex()
	a.stlr(xzr, pa64Ctl) // CtlActive is at +0
}

// restore is Skip: it restores the general registers and nzcv from the
// register block and the caller adds the B to the tail. It returns
// Skip's offset. The vector registers, fpsr and fpcr are saved (with
// CollectRegs) but not restored: nothing in a pad writes them (the JIT's
// code is integer code; process_vm_readv keeps v0-v31), and loading a q
// register would zero the bits above 128 of its SVE z register.
func (b *a64PadBuilder) restore() int {
	a := &b.a
	skip := a.pos()
	a.addImm(xsp, pa64Base, 0)
	a.ldr(0, xsp, 33*8, 8)
	a.msr(sysNZCV, 0)
	for r := xreg(0); r < 30; r += 2 {
		a.ldp(r, r+1, xsp, int32(8*r))
	}
	a.ldr(30, xsp, 30*8, 8)
	a.addImm(xsp, xsp, padA64Frame)
	return skip
}

// collectError turns the reserved record into an error record of the same
// size (x0 = the Err* code) and stops tracing.
func (b *a64PadBuilder) collectError() {
	if len(b.collectErr) == 0 {
		return
	}
	a := &b.a
	for _, f := range b.collectErr {
		a.here(f)
	}
	a.stur(0, pa64Record, RecUsed, 4)
	a.movImm(0, RecError)
	a.stur(0, pa64Record, RecFlags, 4)
	a.addImm(1, pa64TP, TPErrors)
	atomicAddA64(a, 1, 1)
	a.movImm(0, b.recSize)
	a.stlr32(0, pa64Record)
	b.stopTracing(StopError)
	b.skip = append(b.skip, a.b())
}

// conditionError writes a header-only error record (x0 = the Err* code)
// and stops tracing; a full lane drops the record but still stops.
func (b *a64PadBuilder) conditionError() {
	if b.condErr < 0 {
		return
	}
	a := &b.a
	a.here(b.condErr)
	a.str(0, xsp, locErr)
	a.addImm(1, pa64TP, TPErrors)
	atomicAddA64(a, 1, 1)
	b.lane()
	a.movImm(pa64Size, RecHeaderSize)
	full := b.reserve()
	b.header(0, RecError)
	a.ldr(0, xsp, locErr, 8)
	a.stur(0, pa64Record, RecUsed, 4)
	a.movImm(0, RecHeaderSize)
	a.stlr32(0, pa64Record)
	for _, f := range full {
		a.here(f)
	}
	b.stopTracing(StopError)
	b.skip = append(b.skip, a.b())
}

// lane sets pa64Lane to the thread's lane header and stores the thread
// pointer (tpidr_el0) in the locals: the lane whose owner entry holds it,
// claiming a free one (exclusive loop) on the thread's first hit; the
// shared lane when it is 0 or no entry is free. pa64Shared says which.
// Clobbers x0-x7.
func (b *a64PadBuilder) lane() {
	a := &b.a
	n := b.spec.Lanes
	a.movImm(0, uint64(CtlLanes+n*LaneHdrSize))
	a.add(pa64Lane, pa64Ctl, 0)
	a.movImm(pa64Shared, 1)
	a.mrs(5, sysTPIDREL0)
	a.str(5, xsp, locThread)
	done := []int{a.cbz(5)}
	// h = ((tp >> 12) * laneHash) >> (64 - log2 n)
	a.lsrImm(2, 5, 12)
	a.movImm(1, laneHash)
	a.mul(2, 2, 1)
	if n > 1 {
		a.lsrImm(2, 2, uint32(64-bits.TrailingZeros(uint(n))))
	} else {
		a.movImm(2, 0)
	}
	a.movImm(6, uint64(n))
	a.addImm(7, pa64Ctl, CtlOwners)
	probe := a.pos()
	a.addLSL(3, 7, 2, 3)
	a.ldr(0, 3, 0, 8)
	a.cmp(0, 5)
	found := []int{a.bcond(a64EQ)}
	next := a.cbnz(0)
	claim := a.pos()
	a.ldaxr(0, 3)
	lost := a.cbnz(0)
	a.stlxr(4, 5, 3)
	a.patch(a.cbnz(4), claim)
	found = append(found, a.b())
	a.here(lost) // another thread claimed the entry first
	a.clrex()
	a.cmp(0, 5)
	found = append(found, a.bcond(a64EQ))
	a.here(next)
	a.addImm(2, 2, 1)
	a.movImm(4, uint64(n-1))
	a.and(2, 2, 4)
	a.subsImm(6, 6, 1)
	a.patch(a.bcond(a64NE), probe)
	done = append(done, a.b()) // no free entry: the shared lane
	for _, f := range found {
		a.here(f)
	}
	a.lslImm(2, 2, 8) // * LaneHdrSize
	a.add(pa64Lane, pa64Ctl, 2)
	a.addImm(pa64Lane, pa64Lane, CtlLanes)
	a.movImm(pa64Shared, 0)
	for _, f := range done {
		a.here(f)
	}
}

// reserve reserves pa64Size bytes in the lane at pa64Lane, with a filler
// word when they do not fit before the lane's end, and sets pa64Record.
// It returns the branches taken when the lane is full (the drop is
// counted). Clobbers x0-x10.
func (b *a64PadBuilder) reserve() []int {
	a := &b.a
	a.addImm(10, pa64Lane, LaneTail)
	loop := a.pos()
	a.ldar(8, 10) // tail, before the head: h >= tail
	a.ldr(2, pa64Lane, LaneHead, 8)
	a.ldr(1, pa64Lane, LaneSize, 8)
	a.subImm(4, 1, 1)
	a.and(3, 2, 4)        // off = h & (size-1)
	a.add(5, 3, pa64Size) // off + R
	a.mov(6, pa64Size)    // need
	a.cmp(5, 1)
	fits := a.bcond(a64LS)
	a.sub(6, 1, 3)
	a.add(6, 6, pa64Size) // need = size - off + R
	a.here(fits)
	a.add(7, 2, 6) // h + need
	a.sub(9, 7, 8)
	a.cmp(9, 1)
	full := a.bcond(a64GT)
	// Compare and swap the head (LaneHead is at +0): nothing but
	// registers between the exclusive load and store.
	a.ldaxr(9, pa64Lane)
	a.cmp(9, 2)
	moved := a.bcond(a64NE)
	a.stlxr(9, 7, pa64Lane)
	a.patch(a.cbnz(9), loop)
	a.ldr(pa64Record, pa64Lane, LaneBase, 8)
	a.cmp(6, pa64Size)
	noFill := a.bcond(a64EQ)
	// Filler word at off (the rest of the lane is unused); the record
	// goes at the lane's start.
	a.movImm(9, RecCompactBit|RecCompactSkip<<RecCompactTPShift)
	a.add(4, pa64Record, 3)
	a.str(9, 4, 0)
	done := a.b()
	a.here(noFill)
	a.add(pa64Record, pa64Record, 3)
	a.here(done)
	over := a.b()
	a.here(moved)
	a.clrex()
	a.patch(a.b(), loop)
	a.here(full)
	a.addImm(1, pa64Lane, LaneDropped)
	atomicAddA64(a, 1, 1)
	dropped := a.b()
	a.here(over)
	return []int{dropped}
}

// placeCode appends the Cond and Collect code, 16-byte aligned (nop
// padding, never executed), and patches their BLs.
func (b *a64PadBuilder) placeCode() {
	a := &b.a
	place := func(c *Code) int {
		for a.pos()%16 != 0 {
			a.nop()
		}
		p := a.pos()
		a.buf = append(a.buf, c.Text...)
		return p
	}
	if b.spec.Cond != nil {
		a.patch(b.cond, place(b.spec.Cond))
	}
	for i, c := range b.spec.Collect {
		a.patch(b.collects[i], place(c))
	}
}
