package jit

import (
	"fmt"
	"math"
)

// Control block layout (one per traced process). Every field is 8 bytes,
// little-endian; the jump pads embed the block's absolute address. See the
// "Jump pads" section of the package doc.
const (
	CtlActive   = 0  // nonzero: collect; 0: pads go straight to the relocated code
	CtlRingBase = 8  // address of the ring data
	CtlRingSize = 16 // ring size in bytes, a multiple of 16
	CtlHead     = 24 // reservation cursor in bytes (monotonic, advanced by pads with lock cmpxchg)
	CtlTail     = 32 // consumer cursor in bytes (monotonic, written only by the stub)
	CtlTSVs     = 40 // address of an int64 array indexed by trace state variable number
	CtlNTSVs    = 48 // its length
	CtlPid      = 56 // the inferior's pid (for process_vm_readv in expression code)
	CtlTPs      = 64 // tracepoint table: entry i at CtlTPs + i*CtlTPSize
	CtlTPSize   = 32 // size of one tracepoint table entry
)

// Fields of a tracepoint table entry (offsets from the entry).
const (
	TPHits      = 0  // hits (lock xadd +1 when the condition is true)
	TPPassCount = 8  // stop tracing when hits reaches it (0: never)
	TPErrors    = 16 // hits whose condition or collection failed
)

// Ring record header: RecHeaderSize bytes at the record's start.
const (
	RecSize       = 0  // u32: total bytes of the record incl. header; written last (commit), 0 = not committed
	RecTPIndex    = 4  // u32: tracepoint table index
	RecUsed       = 8  // u32: bytes of collection blocks (RecError: the Err* code)
	RecFlags      = 12 // u32: RecSkip, RecError or 0
	RecHeaderSize = 16 // header size; the register block follows
	RecAlign      = 16 // records start and end 16-byte aligned
)

// Record flags.
const (
	RecSkip  = 1 // filler from its offset to the end of the ring, no payload
	RecError = 2 // the condition or a collection failed; RecUsed holds the Err* code
)

// PadRecordSize returns the bytes a pad reserves for one record with a
// collection capacity of collectCap: header, register block and the
// blocks, rounded up to RecAlign.
func PadRecordSize(collectCap uint32) uint64 {
	n := uint64(RecHeaderSize) + PadRegs*8 + uint64(collectCap)
	return (n + RecAlign - 1) &^ (RecAlign - 1)
}

// PadSpec describes one tracepoint's jump pad.
type PadSpec struct {
	Addr       uint64  // where the pad's code will live in the inferior
	TPAddr     uint64  // the tracepoint address (the rip of the register block)
	Ctl        uint64  // address of the control block
	TPIndex    uint32  // index in the control block's tracepoint table
	Cond       *Code   // condition (nil: always true)
	Collect    []*Code // collection code, run in order into the record
	CollectCap uint32  // bytes of collection blocks a record can hold
	TailAddr   uint64  // the relocated instructions; the pad ends with jmp rel32 to it
}

// JumpPad is a built pad. Code is to be placed at PadSpec.Addr; the other
// fields are absolute addresses inside it.
type JumpPad struct {
	Code []byte
	// FullTrap is an int3 executed when the ring is full. The stub drains
	// the ring, then sets rip to Retry (reserve again) or to Skip (tracing
	// stopped).
	FullTrap uint64
	Retry    uint64
	// Skip restores the thread's state and jumps to TailAddr.
	Skip uint64
	// PassTrap is an int3 executed when the hit count reaches the pass
	// count; the stub stops tracing and resumes at PassTrap+1, which
	// continues to Skip.
	PassTrap uint64
	// StackBytes bounds the thread stack the pad uses below the thread's
	// rsp (red zone included), expression code included.
	StackBytes int
	// Faults lists, with absolute addresses, the instructions of the
	// Cond and Collect code compiled with Options.FaultLoads that may
	// fault, sorted by PC. The stub must catch a SIGSEGV/SIGBUS at PC and
	// resume the thread at Recover, registers otherwise unchanged; a fault
	// anywhere else in the pad is a bug.
	Faults []PadFault
}

// PadFault is a FaultFixup relocated into a jump pad: absolute addresses.
type PadFault struct {
	PC      uint64 // the instruction that may fault
	Recover uint64 // where to resume after a fault at PC
}

// Stack frame of the pad, from the thread's rsp S downwards: 128 bytes of
// red zone, the saved flags (S-136), the sixteen GPRs (padSaveBytes), then
// the register block (PadRegs slots); rbp points at the register block.
// Below it, rsp is aligned to 16 and the ctx block is at [rsp].
const (
	padRedZone    = 128
	padSaveBytes  = 15 * 8 // every GPR but rsp
	padBlockBytes = PadRegs * 8
	padFlagsOff   = padBlockBytes + padSaveBytes                  // saved flags, from rbp
	padThreadRSP  = padBlockBytes + padSaveBytes + 8 + padRedZone // the thread's rsp, from rbp
)

// padPushOrder is the order in which the pad pushes the GPRs (and pops
// them in reverse).
var padPushOrder = []gpr{rAX, rCX, rDX, rBX, rBP, rSI, rDI, r8, r9, r10, r11, r12, r13, r14, r15}

// padSlotRegs lists the hardware register of each GPR pad slot (slot i
// = GDB regnum i).
var padSlotRegs = []gpr{rAX, rBX, rCX, rDX, rSI, rDI, rBP, rSP, r8, r9, r10, r11, r12, r13, r14, r15}

// Registers the pad body keeps across expression calls (all callee-saved
// in SysV, so the expression code preserves them).
const (
	padCtl    = rBX // control block
	padRecord = r12 // reserved record
	padSizeR  = r13 // in to reserve: record size; then frameused / error code
	padHits   = r14 // hit count after this hit; error code on the condition error path
	padTP     = r15 // tracepoint table entry
	padBase   = rBP // register block
)

// BuildJumpPadAMD64 generates the amd64 jump pad for spec. The pad saves
// the thread's state, evaluates the condition, counts the hit, reserves and
// fills a ring record, restores everything and jumps to spec.TailAddr.
// See the "Jump pads" section of the package doc.
func BuildJumpPadAMD64(spec PadSpec) (*JumpPad, error) {
	exprs := append([]*Code{spec.Cond}, spec.Collect...)
	for i, c := range exprs {
		if c == nil {
			if i > 0 {
				return nil, fmt.Errorf("jit: jump pad: collect %d is nil", i-1)
			}
			continue
		}
		if c.Fallback != "" {
			return nil, fmt.Errorf("jit: jump pad: expression %d needs the interpreter: %s", i, c.Fallback)
		}
		if c.Arch != "amd64" || len(c.Relocs) != 0 || len(c.Text) == 0 {
			return nil, fmt.Errorf("jit: jump pad: expression %d is not relocatable amd64 code", i)
		}
	}
	tpDisp := uint64(CtlTPs) + uint64(spec.TPIndex)*CtlTPSize
	if tpDisp > math.MaxInt32 {
		return nil, fmt.Errorf("jit: jump pad: tracepoint index %d too large", spec.TPIndex)
	}
	recSize := PadRecordSize(spec.CollectCap)
	if recSize > math.MaxInt32 {
		return nil, fmt.Errorf("jit: jump pad: collection capacity %d too large", spec.CollectCap)
	}

	var a asm
	condCall := -1
	var collectCalls []int
	var skipFix, passCheckFix []int

	// Entry: below the red zone without touching flags, save flags and
	// GPRs, build the register block.
	a.lea(rSP, at(rSP, -padRedZone))
	a.pushfq()
	for _, r := range padPushOrder {
		a.push(r)
	}
	a.lea(rSP, at(rSP, -padBlockBytes))
	for slot, r := range padSlotRegs {
		if r != rSP {
			a.store64(at(rSP, int32(8*slot)), r)
		}
	}
	a.movRR(padBase, rSP)
	a.lea(rAX, at(padBase, padThreadRSP))
	a.store64(at(padBase, 8*7), rAX)
	a.movImm(rAX, spec.TPAddr)
	a.store64(at(padBase, 8*16), rAX)
	a.load64(rAX, at(padBase, padFlagsOff))
	a.store64(at(padBase, 8*17), rAX)
	for i, s := range []sreg{sCS, sSS, sDS, sES, sFS, sGS} {
		a.movFromSreg(rAX, s)
		a.store64(at(padBase, int32(8*(18+i))), rAX)
	}
	a.cld()
	a.movImm(padCtl, spec.Ctl)
	a.aluRI(aluAnd, rSP, -16)
	a.aluRI(aluSub, rSP, CtxSize)

	// Tracing active?
	a.aluMI(aluCmp, at(padCtl, CtlActive), 0)
	skipFix = append(skipFix, a.jcc32(condE))
	a.lea(padTP, at(padCtl, int32(tpDisp)))

	// Condition.
	condErrFix := -1
	if spec.Cond != nil {
		padInitCtx(&a)
		a.movRR(rDI, padBase)
		a.movRR(rSI, rSP)
		condCall = a.call32()
		a.load64(rAX, at(rSP, CtxErr))
		a.testRR(rAX, rAX)
		condErrFix = a.jcc32(condNE)
		a.load64(rAX, at(rSP, CtxResult))
		a.testRR(rAX, rAX)
		skipFix = append(skipFix, a.jcc32(condE))
	}

	// Count the hit, reserve, fill the header and the register block.
	a.movImm(padHits, 1)
	a.lockXadd(at(padTP, TPHits), padHits)
	a.aluRI(aluAdd, padHits, 1)
	a.movImm(padSizeR, recSize)
	reserveCalls := []int{a.call32()}
	a.store32Imm(at(padRecord, RecTPIndex), spec.TPIndex)
	a.store32Imm(at(padRecord, RecUsed), 0)
	a.store32Imm(at(padRecord, RecFlags), 0)
	a.lea(rDI, at(padRecord, RecHeaderSize))
	a.movRR(rSI, padBase)
	a.movImm(rCX, PadRegs)
	a.repMovsq()

	// Collection, frameused carried in padSizeR.
	a.aluRR32(aluXor, padSizeR, padSizeR)
	var collectErrFix []int
	for range spec.Collect {
		padInitCtx(&a)
		a.lea(rAX, at(padRecord, RecHeaderSize+padBlockBytes))
		a.store64(at(rSP, CtxFrameBuf), rAX)
		a.movImm(rAX, uint64(spec.CollectCap))
		a.store64(at(rSP, CtxFrameCap), rAX)
		a.store64(at(rSP, CtxFrameUsed), padSizeR)
		a.movRR(rDI, padBase)
		a.movRR(rSI, rSP)
		collectCalls = append(collectCalls, a.call32())
		a.load64(rAX, at(rSP, CtxErr))
		a.testRR(rAX, rAX)
		collectErrFix = append(collectErrFix, a.jcc32(condNE))
		a.load64(padSizeR, at(rSP, CtxFrameUsed))
	}
	// Commit.
	a.store32(at(padRecord, RecUsed), padSizeR)
	a.movImm(rAX, recSize)
	a.store32(at(padRecord, RecSize), rAX)
	passCheck := a.pos()
	a.load64(rAX, at(padTP, TPPassCount))
	a.testRR(rAX, rAX)
	skipFix = append(skipFix, a.jcc32(condE))
	a.aluRR(aluCmp, rAX, padHits)
	skipFix = append(skipFix, a.jcc32(condNE))
	passTrap := a.pos()
	a.int3()

	// Skip: restore everything and leave through the relocated code.
	skip := a.pos()
	a.lea(rSP, at(padBase, padBlockBytes))
	for i := len(padPushOrder) - 1; i >= 0; i-- {
		a.pop(padPushOrder[i])
	}
	a.popfq()
	a.lea(rSP, at(rSP, padRedZone))
	tailFix := a.jmp32()

	// A collection failed: turn the reserved record into an error record
	// of the same size.
	if len(collectErrFix) > 0 {
		here := a.pos()
		for _, f := range collectErrFix {
			a.patch32(f, here)
		}
		a.store32(at(padRecord, RecUsed), rAX)
		a.store32Imm(at(padRecord, RecFlags), RecError)
		a.lockAluMI(aluAdd, at(padTP, TPErrors), 1)
		a.movImm(rAX, recSize)
		a.store32(at(padRecord, RecSize), rAX)
		passCheckFix = append(passCheckFix, a.jmp32())
	}

	// The condition failed: a header-only error record.
	if condErrFix >= 0 {
		a.patch32(condErrFix, a.pos())
		a.movRR(padHits, rAX)
		a.movImm(padSizeR, RecHeaderSize)
		reserveCalls = append(reserveCalls, a.call32())
		a.store32Imm(at(padRecord, RecTPIndex), spec.TPIndex)
		a.store32(at(padRecord, RecUsed), padHits)
		a.store32Imm(at(padRecord, RecFlags), RecError)
		a.lockAluMI(aluAdd, at(padTP, TPErrors), 1)
		a.movImm(rAX, RecHeaderSize)
		a.store32(at(padRecord, RecSize), rAX)
		skipFix = append(skipFix, a.jmp32())
	}

	// reserve: in padSizeR = record size R; out padRecord = the record.
	// Clobbers rax rcx rdx rsi rdi.
	reserve := a.pos()
	retry := a.pos()
	a.load64(rAX, at(padCtl, CtlHead))
	loop := a.pos()
	a.movRR(rSI, rAX) // h
	a.load64(rCX, at(padCtl, CtlRingSize))
	a.testRR(rCX, rCX)
	fullFix := []int{a.jcc32(condE)}
	a.aluRR32(aluXor, rDX, rDX)
	a.div(rCX)                                                 // rdx = off
	a.lea(rDI, mem{base: rDX, index: int(padSizeR), scale: 1}) // off + R
	a.movRR(rAX, padSizeR)                                     // need
	a.aluRR(aluCmp, rDI, rCX)
	fits := a.jcc8(condBE)
	a.lea(rAX, mem{base: rCX, index: int(padSizeR), scale: 1})
	a.aluRR(aluSub, rAX, rDX) // need = size - off + R
	a.here8(fits)
	a.lea(rDI, mem{base: rSI, index: int(rAX), scale: 1}) // h + need
	a.movRR(r8, rDI)
	a.aluRM(aluSub, r8, at(padCtl, CtlTail))
	a.aluRR(aluCmp, r8, rCX)
	fullFix = append(fullFix, a.jcc32(condA))
	a.movRR(r9, rAX) // need
	a.movRR(rAX, rSI)
	a.lockCmpxchg(at(padCtl, CtlHead), rDI)
	a.patch32(a.jcc32(condNE), loop) // rax = the current head
	a.load64(padRecord, at(padCtl, CtlRingBase))
	a.aluRR(aluCmp, r9, padSizeR)
	noSkip := a.jcc8(condE)
	// Filler from off to the end; the record goes at the ring start.
	a.lea(rDI, mem{base: padRecord, index: int(rDX), scale: 1})
	a.aluRR(aluSub, rCX, rDX)
	a.store32Imm(at(rDI, RecTPIndex), spec.TPIndex)
	a.store32Imm(at(rDI, RecUsed), 0)
	a.store32Imm(at(rDI, RecFlags), RecSkip)
	a.store32(at(rDI, RecSize), rCX)
	a.ret()
	a.here8(noSkip)
	a.aluRR(aluAdd, padRecord, rDX)
	a.ret()
	fullTrap := a.pos()
	for _, f := range fullFix {
		a.patch32(f, fullTrap)
	}
	a.int3()
	a.patch32(a.jmp32(), retry) // never reached: the stub moves rip

	// The expressions, 16-byte aligned.
	var faults []PadFault
	place := func(c *Code) int {
		for a.pos()%16 != 0 {
			a.byte1(0xcc)
		}
		p := a.pos()
		a.byte1(c.Text...)
		for _, f := range c.Faults {
			faults = append(faults, PadFault{PC: spec.Addr + uint64(p+f.Off), Recover: spec.Addr + uint64(p+f.Recover)})
		}
		return p
	}
	if spec.Cond != nil {
		a.patch32(condCall, place(spec.Cond))
	}
	for i, c := range spec.Collect {
		a.patch32(collectCalls[i], place(c))
	}
	for _, f := range reserveCalls {
		a.patch32(f, reserve)
	}
	for _, f := range skipFix {
		a.patch32(f, skip)
	}
	for _, f := range passCheckFix {
		a.patch32(f, passCheck)
	}
	rel := int64(spec.TailAddr) - int64(spec.Addr+uint64(tailFix)+4)
	if rel < math.MinInt32 || rel > math.MaxInt32 {
		return nil, fmt.Errorf("jit: jump pad at %#x: tail %#x out of rel32 range", spec.Addr, spec.TailAddr)
	}
	a.patch32(tailFix, int(int64(tailFix)+4+rel))
	exprStack := 0
	for _, c := range exprs {
		if c != nil {
			exprStack = max(exprStack, c.StackBytes)
		}
	}
	return &JumpPad{
		// Red zone, flags, GPRs, register block, alignment, ctx, the
		// return address of a call, the deepest expression.
		StackBytes: padRedZone + 8 + padSaveBytes + padBlockBytes + 15 + CtxSize + 8 + exprStack,
		Code:       a.buf,
		FullTrap:   spec.Addr + uint64(fullTrap),
		Retry:      spec.Addr + uint64(retry),
		Skip:       spec.Addr + uint64(skip),
		PassTrap:   spec.Addr + uint64(passTrap),
		Faults:     faults,
	}, nil
}

// padInitCtx zeroes the ctx block at [rsp] and fills tsvs, ntsvs and pid
// from the control block. Clobbers rax.
func padInitCtx(a *asm) {
	a.aluRR32(aluXor, rAX, rAX)
	for off := int32(0); off < CtxSize; off += 8 {
		a.store64(at(rSP, off), rAX)
	}
	for _, f := range [][2]int32{{CtlTSVs, CtxTSVs}, {CtlNTSVs, CtxNumTSVs}, {CtlPid, CtxPid}} {
		a.load64(rAX, at(padCtl, f[0]))
		a.store64(at(rSP, f[1]), rAX)
	}
}
