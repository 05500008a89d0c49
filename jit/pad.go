package jit

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sort"
)

// Control block layout (one per traced process, in memory the stub shares
// with the inferior). Every field is 8 bytes, little-endian; the jump pads
// embed the block's absolute address. See the "Jump pads" section of the
// package doc.
const (
	CtlActive    = 0  // nonzero: collect; 0: pads go straight to the relocated code
	CtlStubAlive = 8  // u32: the tracer thread's id while it lives (0 or StubGone bits after)
	CtlTSVs      = 16 // address of an int64 array indexed by trace state variable number
	CtlNTSVs     = 24 // its length
	CtlPid       = 32 // the inferior's pid (for process_vm_readv in expression code)
	// Written by pads only when something stops tracing (another cache
	// line). CtlStop says why a pad cleared CtlActive: StopPassCount or
	// StopError in the low 32 bits, the tracepoint index in the high 32;
	// the first pad to stop sets it (lock cmpxchg from 0), the stub
	// clears it.
	CtlStop          = 64
	CtlStubGoneSkips = 80 // hits skipped because no stub was alive
	// CtlOwners is the lane ownership table: MaxLanes thread pointers
	// (fs base), 0 = free; a thread's first hit claims a free entry with
	// lock cmpxchg and keeps that lane.
	CtlOwners = 128
	// CtlLanes is the first lane header; lane i is at CtlLanes +
	// i*LaneHdrSize (i = PadSpec.Lanes is the shared lane).
	CtlLanes = 768
	// CtlTPs is the tracepoint table: entry i at CtlTPs + i*CtlTPSize.
	CtlTPs    = CtlLanes + (MaxLanes+1)*LaneHdrSize
	CtlTPSize = 32 // size of one tracepoint table entry
)

// MaxLanes bounds PadSpec.Lanes (the lanes threads own; one more is shared).
const MaxLanes = 64

// Lane header fields (offsets from the header). The pads write head and
// dropped; the stub writes base and size once and tail as it consumes,
// on a cache line of its own.
const (
	LaneHead    = 0  // reservation cursor in bytes (monotonic; pads: lock cmpxchg)
	LaneDropped = 8  // hits dropped because the lane was full (lock add)
	LaneBase    = 16 // address of the lane's data
	LaneSize    = 24 // its size in bytes, a power of two
	// LaneSpent counts the bytes of gdb trace frames the lane's committed
	// records will make (PadSpec.FrameBase + used each; monotonic): the
	// stub stops a linear buffer's run when they reach its room, before
	// it has drained them.
	LaneSpent = 32
	// LaneBudget, when not 0, is the most LaneSpent may reach: the pad
	// whose record takes the lane past it switches collection off
	// (CtlActive = 0). The stub sets it to a linear buffer's room, so
	// that the pads stop as soon as the buffer is full (it finds so
	// from the lanes' LaneSpent and ends the run with tfull), not once
	// the stub has looked.
	LaneBudget  = 40
	LaneTail    = 128 // consumer cursor in bytes (monotonic; the stub only)
	LaneHdrSize = 256
)

// StubTIDMask selects the thread id in CtlStubAlive. The stub registers
// the word in its tracer thread's robust futex list: when that thread
// ends, however the stub ends, the kernel clears these bits.
const StubTIDMask = 0x3fffffff

// Reasons in CtlStop.
const (
	StopPassCount = 1 // a tracepoint's hit count reached its passcount
	StopError     = 2 // a condition or collection failed
)

// Fields of a tracepoint table entry (offsets from the entry).
const (
	TPHits      = 0  // hits counted for the passcount (only when PassCount != 0)
	TPPassCount = 8  // stop tracing when hits reaches it (0: never)
	TPErrors    = 16 // hits whose condition or collection failed
)

// Ring record header: RecHeaderSize bytes at the record's start.
const (
	RecSize       = 0  // u32: total bytes of the record incl. header; written last (commit), 0 = not committed
	RecTPIndex    = 4  // u32: tracepoint table index
	RecUsed       = 8  // u32: bytes of collection blocks (RecError: the Err* code)
	RecFlags      = 12 // u32: RecSkip, RecError, RecRegs
	RecTime       = 16 // u64: time-stamp counter (rdtsc) at the hit
	RecThread     = 24 // u64: the thread pointer (fs base), 0 when unknown
	RecHeaderSize = 32 // header size; the register block (RecRegs) or the blocks follow
	RecAlign      = 16 // records start and end 16-byte aligned
)

// Compact records: a thread's hit of a tracepoint that collects nothing
// (PadSpec.Compact), in a lane the thread owns, is one 8-byte word,
// stored once (the store is the commit): RecCompactBit, the tracepoint
// index in bits 48-62 and the low RecCompactTimeBits bits of the time
// stamp. The thread is the lane's owner. A full record's first word has
// the tracepoint index in bits 32-63, below 2^31, so bit 63 tells them
// apart. The same word with index RecCompactSkip is the filler: the rest
// of the lane is unused (a record that did not fit went to its start).
const (
	RecCompactSize     = 8
	RecCompactBit      = 1 << 63
	RecCompactTPShift  = 48
	RecCompactTimeBits = 48
	RecCompactSkip     = 0x7fff // tracepoint index of the filler word
	// RecCompactMaxTP bounds the tracepoint indexes compact records hold.
	RecCompactMaxTP = RecCompactSkip - 1
	// RecMinAlign is the alignment of every record's start: compact
	// records are 8 bytes, full ones a multiple of RecAlign.
	RecMinAlign = 8
)

// Record flags.
const (
	RecSkip  = 1 // not in lanes: what parsers may call the filler word (RecCompactSkip)
	RecError = 2 // the condition or a collection failed; RecUsed holds the Err* code
	RecRegs  = 4 // the record holds the PadRegs register block after the header
	// RecXSave: an XSAVE area follows the register block (with RecRegs),
	// at the first 64-byte aligned lane offset after it; bits 8-15 of the
	// flags hold its size in 64-byte units. The region it may occupy,
	// alignment slack included, is XSaveRegion(size) bytes.
	RecXSave      = 8
	RecXSaveShift = 8
)

// XSaveRegion is the bytes a record reserves for an XSAVE area of size
// bytes (0: none): the area and up to 63 bytes of alignment, rounded to
// RecAlign.
func XSaveRegion(size int) int {
	if size <= 0 {
		return 0
	}
	return (size + 63 + RecAlign - 1) &^ (RecAlign - 1)
}

// PadJumpLimit is the backward-jump budget of one expression run in a pad
// (the ctx jumplimit): a looping condition ends the hit with ErrSteps.
const PadJumpLimit = 1 << 16

// RecordSize returns the bytes the pad of spec reserves for one record.
func (spec PadSpec) RecordSize() uint64 {
	n := PadRecordSize(spec.CollectRegs, spec.CollectCap)
	if spec.CollectRegs {
		n += uint64(XSaveRegion(spec.XSaveSize))
	}
	return n
}

// PadRecordSize returns the bytes a pad without an XSAVE area reserves
// for one record: header, the register block when regs, and collectCap
// bytes of blocks, rounded up to RecAlign.
func PadRecordSize(regs bool, collectCap uint32) uint64 {
	n := uint64(RecHeaderSize) + uint64(collectCap)
	if regs {
		n += PadRegs * 8
	}
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
	// CollectRegs stores the register block in each record (RecRegs).
	CollectRegs bool
	// XSaveMask and XSaveSize, with CollectRegs and a nonzero size: the
	// pad also stores the x87/SSE/AVX state with XSAVE (standard format,
	// the components of the mask; size = the area's bytes, a multiple of
	// 64 up to 255*64), so frames hold the vector registers too.
	XSaveMask uint64
	XSaveSize int
	// Lanes is the number of lanes threads may own (a power of two, at
	// most MaxLanes); lane Lanes is shared by the threads that own none.
	Lanes int
	// FSBase: the CPU and kernel allow rdfsbase (HWCAP2_FSGSBASE), which
	// gives the thread pointer that picks a thread's lane. Without it
	// every hit goes to the shared lane and RecThread is 0.
	FSBase bool
	// Compact: the tracepoint collects nothing (no registers, no
	// collection code), so a hit in a lane the thread owns writes a
	// compact 8-byte record instead of a 32-byte header.
	Compact bool
	// TPLoad, without FSBase: read the thread pointer from %fs:0, where
	// glibc and musl keep the thread control block's pointer to itself
	// (the caller checks that they do). A thread whose fs base is 0
	// faults there; the fault, listed in Faults, resumes at code that
	// takes the shared lane.
	TPLoad   bool
	TailAddr uint64 // the relocated instructions; the pad ends with jmp rel32 to it
	// FrameBase is the size of the gdb trace frame a record makes,
	// without its collection blocks (header, and the register block when
	// CollectRegs): each record adds FrameBase + used to LaneSpent.
	FrameBase uint32
	// Uncounted is how many of the last Collect codes record data the
	// stub turns into something else (a static tracepoint's argument
	// memory, made into its 'S' block): their bytes are not added to
	// LaneSpent (the stub counts that block in FrameBase).
	Uncounted int
	// SPBias is added to the thread's rsp in the register block: the
	// bytes a push left in place before the jump stored (fasttp's
	// Site.Lead), so that the block holds the registers as at TPAddr.
	SPBias int32
}

// JumpPad is a built pad. Code is to be placed at PadSpec.Addr; the other
// fields are absolute addresses inside it.
type JumpPad struct {
	Code []byte
	// Skip restores the thread's state and jumps to TailAddr.
	Skip uint64
	// StackBytes bounds the thread stack the pad uses below the thread's
	// rsp (red zone included), expression code included.
	StackBytes int
	// Faults lists, with absolute addresses, the instructions of the
	// Cond and Collect code compiled with Options.FaultLoads that may
	// fault, sorted by PC. The stub must catch a SIGSEGV/SIGBUS at PC and
	// resume the thread at Recover, registers otherwise unchanged; a fault
	// anywhere else in the pad is a bug.
	Faults []PadFault
	// at is the address the pad is built for; tailRels are the offsets
	// in Code of the rel32 fields of its jumps to the tail (Place).
	at       uint64
	tailRels []int
	// fixups are the fields Retarget rewrites; nil when the pad cannot
	// be retargeted. compact: it writes compact records.
	fixups  []tpFixup
	compact bool
	// a64: an arm64 pad (BuildJumpPadA64); tailRels are then the offsets
	// of its B instructions to the tail.
	a64 bool
}

// Place moves the pad to addr, with the relocated instructions it ends by
// jumping to at tail. A pad's code does not depend on its address but for
// those jumps' rel32 fields, which Place rewrites, and Skip and Faults,
// which it shifts: built once at any address to learn its size, a pad is
// placed without being built again. Nothing changes when tail is out of
// a rel32's reach from addr.
func (p *JumpPad) Place(addr, tail uint64) error {
	if p.a64 {
		return p.placeA64(addr, tail)
	}
	rels := make([]int32, len(p.tailRels))
	for i, off := range p.tailRels {
		rel := int64(tail) - int64(addr+uint64(off)+4)
		if rel < math.MinInt32 || rel > math.MaxInt32 {
			return fmt.Errorf("jit: jump pad at %#x: tail %#x out of rel32 range", addr, tail)
		}
		rels[i] = int32(rel)
	}
	for i, off := range p.tailRels {
		binary.LittleEndian.PutUint32(p.Code[off:], uint32(rels[i]))
	}
	delta := addr - p.at
	p.Skip += delta
	for i := range p.Faults {
		p.Faults[i].PC += delta
		p.Faults[i].Recover += delta
	}
	p.at = addr
	return nil
}

// PadFault is a FaultFixup relocated into a jump pad: absolute addresses.
type PadFault struct {
	PC      uint64 // the instruction that may fault
	Recover uint64 // where to resume after a fault at PC
}

// Stack frame of the pad, from the thread's rsp S downwards: 128 bytes of
// red zone, the saved flags (S-136), the fifteen other GPRs, then the
// register block (PadRegs slots); rbp points at the register block.
// Below it, rsp is aligned to 16, the ctx block is at [rsp] and the pad's
// locals follow it at [rsp+CtxSize].
const (
	padRedZone    = 128
	padSaveBytes  = 15 * 8 // every GPR but rsp
	padBlockBytes = PadRegs * 8
	padFlagsOff   = padBlockBytes + padSaveBytes                  // saved flags, from rbp
	padThreadRSP  = padBlockBytes + padSaveBytes + 8 + padRedZone // the thread's rsp, from rbp
	padLocals     = 32
	locTime       = CtxSize + 0  // rdtsc at entry
	locThread     = CtxSize + 8  // thread pointer
	locHit        = CtxSize + 16 // this hit's number when the tracepoint has a passcount, else 0
	locErr        = CtxSize + 24 // the condition's error code
	// locCounted (record, after the condition: locErr's slot) is the
	// collection bytes LaneSpent counts (PadSpec.Uncounted).
	locCounted = locErr
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
	padLane   = r14 // lane header
	padTP     = r15 // tracepoint table entry
	padBase   = rBP // register block
	padShared = r10 // nonzero: padLane is the shared lane (lane to reserve)
)

// padBuilder carries the label fixups of one pad under construction.
type padBuilder struct {
	a        asm
	spec     PadSpec
	recSize  uint64
	tpDisp   int32
	skip     []int // jumps to Skip
	pass     []int // jumps to the passcount check
	collects []int // call sites of the Collect code
	cond     int   // call site of the Cond code (-1: none)
	// condErrFix and collectErrFix are the jumps taken when the
	// condition (-1: none) or a collection fails.
	condErrFix    int
	collectErrFix []int
	// tpLoad and tpLoadEnd bracket the %fs:0 load (TPLoad), -1 when none.
	tpLoad, tpLoadEnd int
	// fixups are the fields holding the tracepoint's values
	// (padretarget.go).
	fixups []tpFixup
}

// BuildJumpPadAMD64 generates the amd64 jump pad for spec. The pad saves
// the thread's state, evaluates the condition, reserves and fills a record
// in the thread's lane, restores everything and jumps to spec.TailAddr.
// It never traps: a full lane drops the hit (LaneDropped), a failure or a
// reached passcount clears CtlActive and sets CtlStop. See the "Jump pads" section of the
// package doc.
func BuildJumpPadAMD64(spec PadSpec) (*JumpPad, error) {
	if err := checkPadSpec(spec); err != nil {
		return nil, err
	}
	b := &padBuilder{spec: spec, cond: -1, condErrFix: -1, tpLoad: -1, tpLoadEnd: -1,
		recSize: spec.RecordSize(),
		tpDisp:  int32(uint64(CtlTPs) + uint64(spec.TPIndex)*CtlTPSize)}
	b.a.buf = make([]byte, 0, padBufHint(spec))
	earlyTail := b.fastExit()
	b.entry()
	b.condition()
	b.passcount()
	b.record()
	b.passCheck()
	skip := b.restore()
	tailFix := b.a.jmp32()
	b.collectError()
	b.conditionError()
	faults := b.placeCode()
	if b.tpLoad >= 0 {
		// A fault at the %fs:0 load (no thread pointer): rsi = 0, the
		// shared lane.
		rec := b.a.pos()
		b.a.aluRR32(aluXor, rSI, rSI)
		b.a.patch32(b.a.jmp32(), b.tpLoadEnd)
		faults = append(faults, PadFault{PC: spec.Addr + uint64(b.tpLoad), Recover: spec.Addr + uint64(rec)})
		sort.Slice(faults, func(i, j int) bool { return faults[i].PC < faults[j].PC })
	}
	for _, f := range b.skip {
		b.a.patch32(f, skip)
	}
	exprStack := 0
	for _, c := range append([]*Code{spec.Cond}, spec.Collect...) {
		if c != nil {
			exprStack = max(exprStack, c.StackBytes)
		}
	}
	pad := &JumpPad{
		// Red zone, flags, GPRs, register block, alignment, ctx and
		// locals, the return address of a call, the deepest expression.
		StackBytes: padRedZone + 8 + padSaveBytes + padBlockBytes + 15 + CtxSize + padLocals + 8 + exprStack,
		Code:       b.a.buf,
		Skip:       spec.Addr + uint64(skip),
		Faults:     faults,
		at:         spec.Addr,
		tailRels:   []int{tailFix, earlyTail},
	}
	if b.retargetable() {
		pad.fixups = append(make([]tpFixup, 0, len(b.fixups)), b.fixups...)
		pad.compact = spec.Compact
	}
	// The jumps to the tail, as Place writes them for the pad where it is.
	if err := pad.Place(spec.Addr, spec.TailAddr); err != nil {
		return nil, err
	}
	return pad, nil
}

// padBufHint is room for the pad of spec without growing the buffer: the
// pad's own code (under 1 KiB) and the expressions'.
func padBufHint(spec PadSpec) int {
	n := 1024
	for _, c := range append([]*Code{spec.Cond}, spec.Collect...) {
		if c != nil {
			n += len(c.Text) + 16
		}
	}
	return n
}

// checkPadSpec rejects what the pad cannot encode.
func checkPadSpec(spec PadSpec) error {
	if err := checkPadCodes(spec, "amd64", func(c *Code) bool { return len(c.Text) > 0 }); err != nil {
		return err
	}
	if spec.XSaveSize < 0 || spec.XSaveSize%64 != 0 || spec.XSaveSize > 255*64 {
		return fmt.Errorf("jit: jump pad: XSAVE area of %d bytes", spec.XSaveSize)
	}
	return checkPadShared(spec, spec.RecordSize())
}

// checkPadCodes checks that spec's condition and collection code is
// relocatable code of arch that the pad can call (fits: the ISA's own
// conditions).
func checkPadCodes(spec PadSpec, arch string, fits func(*Code) bool) error {
	for i, c := range append([]*Code{spec.Cond}, spec.Collect...) {
		if c == nil {
			if i > 0 {
				return fmt.Errorf("jit: jump pad: collect %d is nil", i-1)
			}
			continue
		}
		if c.Fallback != "" {
			return fmt.Errorf("jit: jump pad: expression %d needs the interpreter: %s", i, c.Fallback)
		}
		if c.Arch != arch || len(c.Relocs) != 0 || !fits(c) {
			return fmt.Errorf("jit: jump pad: expression %d is not relocatable %s code", i, arch)
		}
	}
	return nil
}

// checkPadShared checks what every ISA's pad requires of spec, whose
// records take recordSize bytes.
func checkPadShared(spec PadSpec, recordSize uint64) error {
	switch {
	case spec.Lanes < 1 || spec.Lanes > MaxLanes || spec.Lanes&(spec.Lanes-1) != 0:
		return fmt.Errorf("jit: jump pad: %d lanes (want a power of two up to %d)", spec.Lanes, MaxLanes)
	case uint64(CtlTPs)+uint64(spec.TPIndex)*CtlTPSize > math.MaxInt32:
		return fmt.Errorf("jit: jump pad: tracepoint index %d too large", spec.TPIndex)
	case recordSize > math.MaxInt32:
		return fmt.Errorf("jit: jump pad: collection capacity %d too large", spec.CollectCap)
	case spec.Compact && (spec.CollectRegs || len(spec.Collect) > 0 || spec.TPIndex > RecCompactMaxTP):
		return fmt.Errorf("jit: jump pad: compact records for tracepoint %d, which collects", spec.TPIndex)
	case spec.Uncounted < 0 || spec.Uncounted > len(spec.Collect):
		return fmt.Errorf("jit: jump pad: %d uncounted of %d collections", spec.Uncounted, len(spec.Collect))
	case spec.FrameBase > math.MaxInt32/2:
		return fmt.Errorf("jit: jump pad: frame base %d too large", spec.FrameBase)
	}
	return nil
}

// readsRegisters reports whether anything reads a pad's register block:
// the record (CollectRegs) or an expression that reads registers.
func (spec PadSpec) readsRegisters() bool {
	if spec.CollectRegs {
		return true
	}
	for _, c := range append([]*Code{spec.Cond}, spec.Collect...) {
		if c != nil && len(c.RegsRead) > 0 {
			return true
		}
	}
	return false
}

// needsBlock reports whether anything reads the register block
// (readsRegisters). Without that the pad reserves its space but does not
// fill it.
func (b *padBuilder) needsBlock() bool { return b.spec.readsRegisters() }

// fastExit leaves at once, before saving anything else, when collection
// is off (after tstop or a stop by the engine the jumps may stay until the
// next stop of the program): it steps below the red zone and checks
// CtlActive with rcx and jrcxz, which leave the flags alone, then either
// restores rcx and jumps to the relocated code (the returned rel32 field)
// or restores rcx, pushes the flags and goes on to entry.
func (b *padBuilder) fastExit() int {
	a := &b.a
	a.lea(rSP, at(rSP, -padRedZone))
	a.push(rCX)
	a.movImm(rCX, b.spec.Ctl)
	a.load64(rCX, at(rCX, CtlActive))
	off := a.jrcxz()
	on := a.jmp8()
	a.here8(off)
	a.pop(rCX)
	a.lea(rSP, at(rSP, padRedZone))
	tail := a.jmp32()
	a.here8(on)
	a.pop(rCX)
	a.pushfq()
	return tail
}

// entry (below the red zone, flags pushed by fastExit) saves the GPRs,
// builds the register block, then leaves when tracing is off or no
// stub is alive; otherwise it records the time.
func (b *padBuilder) entry() {
	a := &b.a
	// fastExit stepped below the red zone and pushed the flags.
	for _, r := range padPushOrder {
		a.push(r)
	}
	a.lea(rSP, at(rSP, -padBlockBytes))
	if b.needsBlock() {
		for slot, r := range padSlotRegs {
			if r != rSP {
				a.store64(at(rSP, int32(8*slot)), r) // rbp still the thread's
			}
		}
	}
	a.movRR(padBase, rSP)
	if b.needsBlock() {
		a.lea(rAX, at(padBase, padThreadRSP+b.spec.SPBias))
		a.store64(at(padBase, 8*7), rAX)
		b.movTPImm64(rAX, tpFixup{kind: fixAddr})
		a.store64(at(padBase, 8*16), rAX)
		a.load64(rAX, at(padBase, padFlagsOff))
		a.store64(at(padBase, 8*17), rAX)
		for i, s := range []sreg{sCS, sSS, sDS, sES, sFS, sGS} {
			a.movFromSreg(rAX, s)
			a.store64(at(padBase, int32(8*(18+i))), rAX)
		}
	}
	a.cld()
	a.movImm(padCtl, b.spec.Ctl)
	a.aluRI(aluAnd, rSP, -16)
	a.aluRI(aluSub, rSP, CtxSize+padLocals)

	a.aluMI(aluCmp, at(padCtl, CtlActive), 0)
	b.skip = append(b.skip, a.jcc32(condE))
	a.testMI32(at(padCtl, CtlStubAlive), StubTIDMask)
	alive := a.jcc8(condNE)
	// No stub: nothing more may run that would need it (a
	// fault-recovering load), and nobody would read the record.
	a.lockAluMI(aluAdd, at(padCtl, CtlStubGoneSkips), 1)
	b.skip = append(b.skip, a.jmp32())
	a.here8(alive)
	a.rdtsc()
	a.shiftImm(shiftShl, rDX, 32)
	a.aluRR(aluOr, rAX, rDX)
	a.store64(at(rSP, locTime), rAX)
	a.lea(padTP, at(padCtl, b.tpDisp))
	b.fixAt(tpFixup{kind: fixDisp32})
}

// condition calls the condition code: false skips, an error goes to the
// condition-error path.
func (b *padBuilder) condition() {
	if b.spec.Cond == nil {
		return
	}
	a := &b.a
	padInitCtx(a)
	a.movRR(rDI, padBase)
	a.movRR(rSI, rSP)
	b.cond = a.call32()
	a.load64(rAX, at(rSP, CtxErr))
	a.testRR(rAX, rAX)
	b.condErrFix = a.jcc32(condNE)
	a.load64(rAX, at(rSP, CtxResult))
	a.testRR(rAX, rAX)
	b.skip = append(b.skip, a.jcc32(condE))
}

// passcount numbers the hit when the tracepoint has a passcount; a hit
// past it (another thread got there first) is skipped.
func (b *padBuilder) passcount() {
	a := &b.a
	a.aluRR32(aluXor, rAX, rAX)
	a.store64(at(rSP, locHit), rAX)
	a.load64(rAX, at(padTP, TPPassCount))
	a.testRR(rAX, rAX)
	none := a.jcc8(condE)
	a.movImm(rCX, 1)
	a.lockXadd(at(padTP, TPHits), rCX)
	a.aluRI(aluAdd, rCX, 1)
	a.aluRR(aluCmp, rCX, rAX)
	b.skip = append(b.skip, a.jcc32(condA))
	a.store64(at(rSP, locHit), rCX)
	a.here8(none)
}

// record finds the thread's lane, reserves a record and fills it: header,
// registers, collection; the size is stored last (the commit). A full lane
// drops the hit and goes on to the passcount check.
func (b *padBuilder) record() {
	a := &b.a
	b.lane()
	if b.spec.Compact {
		b.compactRecord()
	}
	a.movImm(padSizeR, b.recSize)
	b.pass = append(b.pass, b.reserve()...)
	flags := uint32(0)
	xsave := b.spec.CollectRegs && b.spec.XSaveSize > 0
	if b.spec.CollectRegs {
		flags = RecRegs
	}
	if xsave {
		flags |= RecXSave | uint32(b.spec.XSaveSize/64)<<RecXSaveShift
	}
	b.header(0, flags)
	regBytes := int32(0)
	if b.spec.CollectRegs {
		a.lea(rDI, at(padRecord, RecHeaderSize))
		a.movRR(rSI, padBase)
		a.movImm(rCX, PadRegs)
		a.repMovsq()
		regBytes = padBlockBytes
	}
	if xsave {
		// Nothing before touched the x87/SSE/AVX state: XSAVE stores the
		// thread's own, at the next 64-byte boundary.
		a.lea(rDI, at(padRecord, RecHeaderSize+padBlockBytes+63))
		a.aluRI(aluAnd, rDI, -64)
		a.movImm(rAX, b.spec.XSaveMask&0xffffffff)
		a.movImm(rDX, b.spec.XSaveMask>>32)
		a.xsave64(at(rDI, 0))
		regBytes += int32(XSaveRegion(b.spec.XSaveSize))
	}
	a.aluRR32(aluXor, padSizeR, padSizeR)
	counted := len(b.spec.Collect) - b.spec.Uncounted
	for i := range b.spec.Collect {
		if i == counted {
			a.store64(at(rSP, locCounted), padSizeR)
		}
		padInitCtx(a)
		a.lea(rAX, at(padRecord, RecHeaderSize+regBytes))
		a.store64(at(rSP, CtxFrameBuf), rAX)
		a.movImm(rAX, uint64(b.spec.CollectCap))
		a.store64(at(rSP, CtxFrameCap), rAX)
		a.store64(at(rSP, CtxFrameUsed), padSizeR)
		a.movRR(rDI, padBase)
		a.movRR(rSI, rSP)
		b.collects = append(b.collects, a.call32())
		a.load64(rAX, at(rSP, CtxErr))
		a.testRR(rAX, rAX)
		b.collectErrFix = append(b.collectErrFix, a.jcc32(condNE))
		a.load64(padSizeR, at(rSP, CtxFrameUsed))
	}
	a.store32(at(padRecord, RecUsed), padSizeR)
	a.movImm(rAX, b.recSize)
	a.store32(at(padRecord, RecSize), rAX)
	if counted < len(b.spec.Collect) {
		a.load64(padSizeR, at(rSP, locCounted))
	}
	b.spend()
}

// compactRecord writes the hit as a compact record when the thread owns
// its lane, and goes on to the passcount check; in the shared lane it
// falls through to the full record.
func (b *padBuilder) compactRecord() {
	a := &b.a
	a.testRR(padShared, padShared)
	shared := a.jcc32(condNE)
	a.movImm(padSizeR, RecCompactSize)
	b.pass = append(b.pass, b.reserve()...)
	a.load64(rAX, at(rSP, locTime))
	a.shiftImm(shiftShl, rAX, 64-RecCompactTimeBits)
	a.shiftImm(shiftShr, rAX, 64-RecCompactTimeBits)
	b.movTPImm64(rCX, tpFixup{kind: fixWord64, base: RecCompactBit, shift: RecCompactTPShift})
	a.aluRR(aluOr, rAX, rCX)
	a.store64(at(padRecord, 0), rAX) // the commit
	a.aluRR32(aluXor, padSizeR, padSizeR)
	b.spend()
	b.pass = append(b.pass, a.jmp32())
	a.patch32(shared, a.pos())
}

// spend adds the committed record's frame bytes (FrameBase + used, used
// in padSizeR) to the lane's LaneSpent: a plain add in the thread's own
// lane (one writer; one instruction, so a signal handler cannot split
// it), lock add in the shared lane; past LaneBudget it switches
// collection off. Clobbers rax and rcx.
func (b *padBuilder) spend() {
	a := &b.a
	a.lea(rAX, at(padSizeR, int32(b.spec.FrameBase)))
	a.testRR(padShared, padShared)
	shared := a.jcc8(condNE)
	a.aluMR(aluAdd, at(padLane, LaneSpent), rAX)
	done := a.jmp8()
	a.here8(shared)
	a.lockAluMR(aluAdd, at(padLane, LaneSpent), rAX)
	a.here8(done)
	// Past the lane's budget (LaneBudget, 0: none): collection off.
	a.load64(rCX, at(padLane, LaneBudget))
	none := a.jrcxz()
	a.aluRM(aluCmp, rCX, at(padLane, LaneSpent))
	within := a.jcc8(condAE)
	a.aluRR32(aluXor, rAX, rAX)
	a.store64(at(padCtl, CtlActive), rAX)
	a.here8(within)
	a.here8(none)
}

// header writes a reserved record's header but its size: tracepoint,
// used, flags, time and thread.
func (b *padBuilder) header(used, flags uint32) {
	a := &b.a
	a.store32Imm(at(padRecord, RecTPIndex), b.spec.TPIndex)
	b.fixAt(tpFixup{kind: fixIdx32})
	a.store32Imm(at(padRecord, RecUsed), used)
	a.store32Imm(at(padRecord, RecFlags), flags)
	a.load64(rAX, at(rSP, locTime))
	a.store64(at(padRecord, RecTime), rAX)
	a.load64(rAX, at(rSP, locThread))
	a.store64(at(padRecord, RecThread), rAX)
}

// passCheck: the hit that reaches the passcount stops tracing.
func (b *padBuilder) passCheck() {
	a := &b.a
	here := a.pos()
	for _, f := range b.pass {
		a.patch32(f, here)
	}
	a.load64(rAX, at(rSP, locHit))
	a.testRR(rAX, rAX)
	b.skip = append(b.skip, a.jcc32(condE))
	a.aluRM(aluCmp, rAX, at(padTP, TPPassCount))
	b.skip = append(b.skip, a.jcc32(condNE))
	b.stopTracing(StopPassCount)
	b.skip = append(b.skip, a.jmp32())
}

// stopTracing clears CtlActive and, unless another pad did first, says
// why in CtlStop, for the stub. Clobbers rax and rcx.
func (b *padBuilder) stopTracing(why uint64) {
	a := &b.a
	b.movTPImm64(rCX, tpFixup{kind: fixWord64, base: why, shift: 32})
	a.aluRR32(aluXor, rAX, rAX)
	a.lockCmpxchg(at(padCtl, CtlStop), rCX)
	a.aluRR32(aluXor, rAX, rAX)
	a.store64(at(padCtl, CtlActive), rAX)
}

// restore is Skip: restore everything; the caller adds the jump to the
// relocated code. It returns Skip's offset.
func (b *padBuilder) restore() int {
	a := &b.a
	skip := a.pos()
	a.lea(rSP, at(padBase, padBlockBytes))
	for i := len(padPushOrder) - 1; i >= 2; i-- {
		a.pop(padPushOrder[i])
	}
	b.restoreFlags()
	a.pop(rCX)
	a.pop(rAX)
	a.lea(rSP, at(rSP, 8+padRedZone)) // the flags' slot and the red zone
	return skip
}

// restoreFlags gives the thread back the flags entry pushed, without
// POPFQ (microcoded, about 20 cycles): SAHF sets SF ZF AF PF CF from ah,
// ADD al, 0x7f sets OF when al is 1, and DF is set again if it was (the
// pad cleared it). No other flag can change in the pad. With rcx and rax
// still on the stack ([rsp], [rsp+8], the flags at [rsp+16]); clobbers
// them.
func (b *padBuilder) restoreFlags() {
	a := &b.a
	const saved = 16
	a.load64(rAX, at(rSP, saved))
	a.movRR(rCX, rAX)
	a.shiftImm(shiftShr, rCX, 11) // OF
	a.aluRI(aluAnd, rCX, 1)
	a.shiftImm(shiftShl, rAX, 8) // ah = SF ZF AF PF CF
	a.aluRR(aluOr, rAX, rCX)
	a.testMI32(at(rSP, saved), 1<<10)
	clear := a.jcc8(condE)
	a.std()
	a.here8(clear)
	a.addALImm(0x7f)
	a.sahf()
}

// collectError turns the reserved record into an error record of the same
// size (rax = the Err* code) and stops tracing.
func (b *padBuilder) collectError() {
	if len(b.collectErrFix) == 0 {
		return
	}
	a := &b.a
	here := a.pos()
	for _, f := range b.collectErrFix {
		a.patch32(f, here)
	}
	a.store32(at(padRecord, RecUsed), rAX)
	a.store32Imm(at(padRecord, RecFlags), RecError)
	a.lockAluMI(aluAdd, at(padTP, TPErrors), 1)
	a.movImm(rAX, b.recSize)
	a.store32(at(padRecord, RecSize), rAX)
	b.stopTracing(StopError)
	b.skip = append(b.skip, a.jmp32())
}

// conditionError writes a header-only error record (rax = the Err* code)
// and stops tracing; a full lane drops the record but still stops.
func (b *padBuilder) conditionError() {
	if b.condErrFix < 0 {
		return
	}
	a := &b.a
	a.patch32(b.condErrFix, a.pos())
	a.store64(at(rSP, locErr), rAX)
	a.lockAluMI(aluAdd, at(padTP, TPErrors), 1)
	b.lane()
	a.movImm(padSizeR, RecHeaderSize)
	full := b.reserve()
	b.header(0, RecError)
	a.load64(rAX, at(rSP, locErr))
	a.store32(at(padRecord, RecUsed), rAX)
	a.movImm(rAX, RecHeaderSize)
	a.store32(at(padRecord, RecSize), rAX)
	here := a.pos()
	for _, f := range full {
		a.patch32(f, here)
	}
	b.stopTracing(StopError)
	b.skip = append(b.skip, a.jmp32())
}

// laneHash is the multiplier of the thread pointer hash (2^64/φ).
const laneHash = 0x9e3779b97f4a7c15

// LaneSlot returns the owner table entry where a pad's search for the
// lane of thread pointer fs starts, with lanes owned lanes (a power of
// two): the hash the pads compute. The search goes on at the next entry
// (modulo lanes) while an entry holds another thread's pointer; a stub
// that claims lanes for threads itself (CtlOwners) must put each thread
// where that search finds it.
func LaneSlot(fs uint64, lanes int) int {
	if lanes <= 1 {
		return 0
	}
	return int((fs >> 12) * laneHash >> (64 - bits.TrailingZeros(uint(lanes))))
}

// lane sets padLane to the thread's lane header and stores the thread
// pointer in the locals: the lane whose owner entry holds the thread's fs
// base, claiming a free one (lock cmpxchg) on the thread's first hit; the
// shared lane when there is no fs base or no free entry. padShared says
// which (reserve uses it). Clobbers rax rcx rdx rsi rdi.
func (b *padBuilder) lane() {
	a := &b.a
	n := b.spec.Lanes
	a.lea(padLane, at(padCtl, int32(CtlLanes+n*LaneHdrSize)))
	a.movImm(padShared, 1)
	switch {
	case b.spec.FSBase:
		a.rdfsbase(rSI)
	case b.spec.TPLoad:
		b.tpLoad = a.pos()
		a.byte1(0x64, 0x48, 0x8b, 0x34, 0x25, 0, 0, 0, 0) // mov %fs:0, %rsi
		b.tpLoadEnd = a.pos()
	default:
		a.aluRR32(aluXor, rAX, rAX)
		a.store64(at(rSP, locThread), rAX)
		return
	}
	a.store64(at(rSP, locThread), rSI)
	a.testRR(rSI, rSI)
	var done []int
	done = append(done, a.jcc32(condE))
	// h = ((fs >> 12) * laneHash) >> (64 - log2 n)
	a.movRR(rDX, rSI)
	a.shiftImm(shiftShr, rDX, 12)
	a.movImm(rCX, laneHash)
	a.imulRR(rDX, rCX)
	if n > 1 {
		a.shiftImm(shiftShr, rDX, uint8(64-bits.TrailingZeros(uint(n))))
	} else {
		a.aluRR32(aluXor, rDX, rDX)
	}
	a.movImm(rDI, uint64(n))
	probe := a.pos()
	owner := mem{base: padCtl, index: int(rDX), scale: 8, disp: CtlOwners}
	a.load64(rAX, owner)
	a.aluRR(aluCmp, rAX, rSI)
	found := []int{a.jcc32(condE)}
	a.testRR(rAX, rAX)
	next := a.jcc8(condNE)
	a.lockCmpxchg(owner, rSI) // rax = 0: claim the free entry
	found = append(found, a.jcc32(condE))
	a.aluRR(aluCmp, rAX, rSI) // another thread with our fs base? (not possible, but harmless)
	found = append(found, a.jcc32(condE))
	a.here8(next)
	a.aluRI(aluAdd, rDX, 1)
	a.aluRI(aluAnd, rDX, int32(n-1))
	a.aluRI(aluSub, rDI, 1)
	a.patch32(a.jcc32(condNE), probe)
	done = append(done, a.jmp32()) // no free entry: the shared lane
	here := a.pos()
	for _, f := range found {
		a.patch32(f, here)
	}
	a.shiftImm(shiftShl, rDX, 8) // * LaneHdrSize
	a.lea(padLane, mem{base: padCtl, index: int(rDX), scale: 1, disp: CtlLanes})
	a.aluRR32(aluXor, padShared, padShared)
	here = a.pos()
	for _, f := range done {
		a.patch32(f, here)
	}
}

// reserve reserves padSizeR bytes in the lane at padLane, with a filler
// record when they do not fit before the lane's end, and sets padRecord.
// It returns the jumps taken when the lane is full (the drop is counted).
// Clobbers rax rcx rdx rsi rdi r8 r9.
func (b *padBuilder) reserve() []int {
	a := &b.a
	a.load64(rCX, at(padLane, LaneSize))
	a.load64(rAX, at(padLane, LaneHead))
	loop := a.pos()
	a.movRR(rSI, rAX) // h
	a.lea(rDX, at(rCX, -1))
	a.aluRR(aluAnd, rDX, rSI)                                  // off = h & (size-1)
	a.lea(rDI, mem{base: rDX, index: int(padSizeR), scale: 1}) // off + R
	a.movRR(r9, padSizeR)                                      // need
	a.aluRR(aluCmp, rDI, rCX)
	fits := a.jcc8(condBE)
	a.movRR(r9, rCX)
	a.aluRR(aluSub, r9, rDX)
	a.aluRR(aluAdd, r9, padSizeR) // need = size - off + R
	a.here8(fits)
	a.lea(rDI, mem{base: rSI, index: int(r9), scale: 1}) // h + need
	a.movRR(r8, rDI)
	a.aluRM(aluSub, r8, at(padLane, LaneTail))
	a.aluRR(aluCmp, r8, rCX)
	// Signed: with a stale head (other threads reserved and the stub
	// consumed past it since it was read) h+need-tail is negative, the
	// lane is not full and the cmpxchg below fails and retries.
	full := a.jcc32(condG)
	// A thread's own lane has one writer, this thread: a CMPXCHG without
	// LOCK is atomic for it (a signal handler hitting a tracepoint runs
	// between two instructions) and costs no bus lock. The shared lane
	// needs LOCK.
	a.testRR(padShared, padShared)
	shared := a.jcc8(condNE)
	a.cmpxchg(at(padLane, LaneHead), rDI)
	reserved := a.jmp8()
	a.here8(shared)
	a.lockCmpxchg(at(padLane, LaneHead), rDI)
	a.here8(reserved)
	a.patch32(a.jcc32(condNE), loop) // rax = the current head
	a.load64(padRecord, at(padLane, LaneBase))
	a.aluRR(aluCmp, r9, padSizeR)
	noSkip := a.jcc8(condE)
	// Filler word at off (the rest of the lane is unused); the record
	// goes at the lane start.
	a.movImm(rCX, RecCompactBit|RecCompactSkip<<RecCompactTPShift)
	a.store64(mem{base: padRecord, index: int(rDX), scale: 1}, rCX)
	done := a.jmp8()
	a.here8(noSkip)
	a.aluRR(aluAdd, padRecord, rDX)
	a.here8(done)
	skipFull := a.jmp8()
	a.patch32(full, a.pos())
	a.lockAluMI(aluAdd, at(padLane, LaneDropped), 1)
	dropped := a.jmp32()
	a.here8(skipFull)
	return []int{dropped}
}

// placeCode appends the Cond and Collect code, 16-byte aligned, patches
// their calls and returns their fault tables relocated into the pad.
func (b *padBuilder) placeCode() []PadFault {
	a := &b.a
	var faults []PadFault
	place := func(c *Code) int {
		for a.pos()%16 != 0 {
			a.byte1(0xcc)
		}
		p := a.pos()
		a.byte1(c.Text...)
		for _, f := range c.Faults {
			faults = append(faults, PadFault{PC: b.spec.Addr + uint64(p+f.Off), Recover: b.spec.Addr + uint64(p+f.Recover)})
		}
		return p
	}
	if b.spec.Cond != nil {
		a.patch32(b.cond, place(b.spec.Cond))
	}
	for i, c := range b.spec.Collect {
		a.patch32(b.collects[i], place(c))
	}
	return faults
}

// padInitCtx zeroes the ctx block at [rsp], fills tsvs, ntsvs and pid
// from the control block and sets the jump budget. Clobbers rax.
func padInitCtx(a *asm) {
	a.aluRR32(aluXor, rAX, rAX)
	for off := int32(0); off < CtxSize; off += 8 {
		a.store64(at(rSP, off), rAX)
	}
	for _, f := range [][2]int32{{CtlTSVs, CtxTSVs}, {CtlNTSVs, CtxNumTSVs}, {CtlPid, CtxPid}} {
		a.load64(rAX, at(padCtl, f[0]))
		a.store64(at(rSP, f[1]), rAX)
	}
	a.movImm(rAX, PadJumpLimit)
	a.store64(at(rSP, CtxJumpLimit), rAX)
}
