package tracing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"gotpstub/frames"
	"gotpstub/tdesc"
)

// Syncer is implemented by an Installer whose tracepoints collect without
// the engine's help (jump pads running inside the inferior, package
// fasttp): before the engine answers a trace packet it calls Sync, which
// hands every hit collected since the last call to FastHit or
// FastHitError, so counts, status and frames are current.
type Syncer interface {
	Sync()
}

// HitSyncer is a Syncer that can also drain while a trap tracepoint is
// being hit, through the hitting thread's memory access (the ptrace
// thread runs the hit and cannot wait for itself). Hit calls SyncHit
// first, so frames stay in the order the hits happened even when trap
// and fast tracepoints mix.
type HitSyncer interface {
	Syncer
	SyncHit(mem MemoryAccess)
}

// MemoryAccess reads and writes inferior memory.
type MemoryAccess interface {
	ReadMemory(addr uint64, buf []byte) (int, error)
	WriteMemory(addr uint64, data []byte) error
}

// syncHit runs the Installer's SyncHit when ctx can write memory. It must
// be called without e.mu held.
func (e *Engine) syncHit(ctx HitContext) {
	e.mu.Lock()
	inst := e.installer
	e.mu.Unlock()
	hs, ok := inst.(HitSyncer)
	if !ok {
		return
	}
	if mem, ok := ctx.(MemoryAccess); ok {
		hs.SyncHit(mem)
	}
}

// RunStarter is implemented by an Installer that keeps state across runs
// (fasttp's lanes): QTStart calls StartRun before installing anything, so
// nothing of an earlier run (records, counters, errors) leaks into the new
// one.
type RunStarter interface {
	StartRun()
}

// FastRecord is one hit collected by an Installer (FastHits).
type FastRecord struct {
	TP *Tracepoint
	// Regs holds register values by GDB register number, 8 little-endian
	// bytes each (bytes 8n..8n+7 are register n, truncated to its size in
	// the layout), or nil when the hit did not collect registers.
	Regs []byte
	// XSave, with Regs, is the x87/SSE/AVX state in XSAVE's standard
	// format (tdesc.FillXSave), or nil.
	XSave []byte
	// FPSIMD, with Regs, is an arm64 pad's SIMD/FP state: v0-v31 (GDB's
	// aarch64 registers 34-65), 16 bytes each, then fpsr and fpcr, 8
	// bytes each (tdesc.FillAArch64FPSIMD), or nil.
	FPSIMD []byte
	// Blocks are the collected 'M' and 'V' blocks in jit's format.
	Blocks []byte
	// Err, when not empty, says the hit failed (condition or collection):
	// the run stops with terror and this message.
	Err string
	// Time is the hit's time-stamp counter value (cntvct_el0 on arm64);
	// Thread the thread's pointer (fs base; tpidr_el0 on arm64), 0 when
	// unknown.
	Time, Thread uint64
	// When is the hit's time in nanoseconds since the Unix epoch (the
	// Installer converts Time), 0 when unknown: the frame's time, and
	// the value of $trace_timestamp (in microseconds) when TraceTime.
	When int64
	// TraceTime says the tracepoint collects $trace_timestamp, which the
	// pad leaves to the stub: the frame gets its 'V' block from When.
	TraceTime bool
}

// FastHits records hits collected by the Installer, in order, like
// FastHit and FastHitError one by one but under one lock. Hits while no
// run is going (before QTStart has started it, after it stopped) and
// hits of tracepoints not installed are dropped: it returns how many.
func (e *Engine) FastHits(recs []FastRecord) (ignored int) {
	if len(recs) == 0 {
		return 0
	}
	var removed []*Tracepoint
	e.mu.Lock()
	e.hit.bufSize = e.buf.Size()
	e.batch, e.inBatch = e.buf.BeginBatch(), true
	for i := range recs {
		r := &recs[i]
		if !e.running {
			ignored += len(recs) - i
			break
		}
		if !r.TP.installed {
			ignored++
			continue
		}
		if r.Err != "" {
			removed = append(removed, e.stopLocked(reasonError, r.TP.Num, r.Err)...)
			break
		}
		rm, _ := e.fastHitLocked(r)
		removed = append(removed, rm...)
	}
	e.endBatchLocked()
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
	return ignored
}

// fastEmptyHitLocked is fastHitLocked for a hit that collected nothing,
// within FastHits' batch: the frame is committed without being built.
func (e *Engine) fastEmptyHitLocked(tp *Tracepoint, when int64) ([]*Tracepoint, error) {
	tp.Hits++
	n, err := e.batch.CommitHeader(tp.Num, tp.Addr, when)
	if err != nil {
		if errors.Is(err, frames.ErrFull) {
			return e.stopLocked(reasonFull, 0, ""), nil
		}
		return e.stopLocked(reasonError, tp.Num, fmt.Sprintf("storing the trace frame: %v", err)), err
	}
	tp.BytesUsed += uint64(n)
	if tp.PassCount > 0 && tp.Hits >= uint64(tp.PassCount) {
		return e.stopLocked(reasonPassCount, tp.Num, ""), nil
	}
	return nil, nil
}

// endBatchLocked ends FastHits' batch of commits, if one is open.
func (e *Engine) endBatchLocked() {
	if e.inBatch {
		e.batch.End()
		e.batch, e.inBatch = frames.Batch{}, false
	}
}

// FastBufferFull stops the run with tfull, if it still runs: the fast
// tracepoints' records, drained, filled the linear trace buffer (a frame
// or two may still have fitted: the Installer stops at the first record
// that might not).
func (e *Engine) FastBufferFull() {
	e.mu.Lock()
	var removed []*Tracepoint
	if e.running {
		removed = e.stopLocked(reasonFull, 0, "")
	}
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
}

// FastAsTrap records that the Installer put fast tracepoint tp in as a
// trap tracepoint, and why: tstatus says so in its notes for the run
// (gdb itself believes the tracepoint is fast).
func (e *Engine) FastAsTrap(tp *Tracepoint, why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.asTraps == nil {
		e.asTraps = map[int]string{}
	}
	e.asTraps[tp.Num] = why
}

// FastPlaced withdraws what FastAsTrap recorded: the Installer has put
// fast tracepoint tp in as a jump after all (a gdb breakpoint that kept
// it a trap is gone).
func (e *Engine) FastPlaced(tp *Tracepoint) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.asTraps, tp.Num)
}

// RegBlockSize returns the size of a frame's register block ('R'), the
// g packet's.
func (e *Engine) RegBlockSize() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.regBlockSize()
}

// FastPassCount stops the run because tp reached its passcount in the
// inferior (the hit that reached it may have been dropped).
func (e *Engine) FastPassCount(tp *Tracepoint) {
	e.mu.Lock()
	var removed []*Tracepoint
	if e.running {
		removed = e.stopLocked(reasonPassCount, tp.Num, "")
	}
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
}

// SetFastDropped records how many hits the Installer dropped in this run
// (its buffers were full, or it could not collect): tstatus shows it in
// the trace notes.
func (e *Engine) SetFastDropped(n uint64) {
	e.mu.Lock()
	e.fastDropped = n
	e.mu.Unlock()
}

// RoomBeforeFull returns how many more bytes of frames the trace buffer
// takes before a full linear buffer stops the run (math.MaxInt for a
// circular buffer, which never fills).
func (e *Engine) RoomBeforeFull() int {
	if e.buf.Circular() {
		return math.MaxInt
	}
	return e.buf.Free()
}

// BufferSize returns the trace buffer's size in bytes (QTBuffer:size).
func (e *Engine) BufferSize() int { return e.buf.Size() }

// SetFastTracepoints makes Features announce FastTracepoints (gdb then
// downloads ftrace locations with their F flag). Only set it when the
// Installer really places fast tracepoints.
func (e *Engine) SetFastTracepoints(on bool) {
	e.mu.Lock()
	e.fastTracepoints = on
	e.mu.Unlock()
}

// sync runs the Installer's Sync, if it has one. It must be called
// without e.mu held.
func (e *Engine) sync() {
	e.mu.Lock()
	inst := e.installer
	e.mu.Unlock()
	if s, ok := inst.(Syncer); ok {
		s.Sync()
	}
}

// FastHit records a hit of tp whose condition was true, collected by the
// Installer: regs holds register values by GDB register number (regs[n]
// is register n, truncated to its size in the layout; registers beyond
// regs read as zero) and blocks are the collected 'M' and
// 'V' blocks in jit's format ('M' addr:u64 len:u16 bytes, 'V' num:u32
// value:i64, little-endian). The hit counts towards tp's passcount and the
// frame is stored like a trap tracepoint's, with an R block when tp
// collects registers. Hits arriving after the run stopped are dropped.
func (e *Engine) FastHit(tp *Tracepoint, regs []uint64, blocks []byte) error {
	e.mu.Lock()
	if !e.running || !tp.installed {
		e.mu.Unlock()
		return nil
	}
	e.hit.bufSize = e.buf.Size()
	var le []byte
	for _, v := range regs {
		le = binary.LittleEndian.AppendUint64(le, v)
	}
	removed, err := e.fastHitLocked(&FastRecord{TP: tp, Regs: le, Blocks: blocks, When: e.now().UnixNano()})
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
	return err
}

// fastHitLocked stores one fast hit (r.Err empty). The frame's register
// block says what the pad saved (frames.RegsGeneral, with the vector
// state frames.RegsGeneralVector): FrameRegisters shows the rest
// unavailable; fs_base is the record's thread pointer when known (and
// the layout has it: aarch64's has no thread pointer register).
func (e *Engine) fastHitLocked(r *FastRecord) ([]*Tracepoint, error) {
	tp, regs, xsave, fpsimd, blocks, fsBase := r.TP, r.Regs, r.XSave, r.FPSIMD, r.Blocks, r.Thread
	if e.inBatch && len(blocks) == 0 && !tp.collectsRegisters() && !r.TraceTime && !tp.collectsStatic() {
		return e.fastEmptyHitLocked(tp, r.When)
	}
	h := &e.hit
	h.overflow = false
	tp.Hits++
	e.fastFrame.Reset(tp.Num) // one builder for every fast hit: Commit copies
	h.frame = &e.fastFrame
	h.frame.SetFallbackPC(tp.Addr)
	h.frame.SetTime(r.When)
	if r.TraceTime {
		h.frame.AddTSV(timestampTSV, r.When/1000) // microseconds, like the stub's own
	}
	if tp.collectsRegisters() {
		block := h.regBlock(nil, 0, false)
		e.fillFastRegs(block, regs)
		from := frames.RegsGeneral
		if e.layout != nil && len(block) == e.layout.Size {
			r := tdesc.Regs{Layout: e.layout, Data: block}
			if fsBase != 0 && tdesc.FSBASE < len(e.layout.Regs) && e.layout.Regs[tdesc.FSBASE].Name == "fs_base" {
				_ = r.SetUint64(tdesc.FSBASE, fsBase)
			}
			switch {
			case xsave != nil:
				tdesc.FillXSave(&r, xsave)
				from = frames.RegsGeneralVector
			case fpsimd != nil:
				tdesc.FillAArch64FPSIMD(&r, fpsimd)
				from = frames.RegsGeneralVector
			}
		}
		h.frame.AddRegisterRuns(block, e.actionRegisterRuns(tp, false))
		h.frame.SetRegsFrom(from)
	}
	if e.static != nil && tp.collectsStatic() {
		blocks = e.fastStaticLocked(tp, r, blocks)
	}
	if err := addBlocks(h, blocks); err != nil {
		h.frame = nil
		return e.stopLocked(reasonError, tp.Num, fmt.Sprintf("fast tracepoint frame: %v", err)), err
	}
	removed := e.commitLocked(tp)
	h.frame = nil
	if removed != nil {
		return removed, nil
	}
	if tp.PassCount > 0 && tp.Hits >= uint64(tp.PassCount) {
		return e.stopLocked(reasonPassCount, tp.Num, ""), nil
	}
	return nil, nil
}

// FastHitError stops the run with terror: evaluating tp's condition or
// a collection failed inside the inferior (what names the failure).
func (e *Engine) FastHitError(tp *Tracepoint, what string) {
	e.mu.Lock()
	var removed []*Tracepoint
	if e.running {
		removed = e.stopLocked(reasonError, tp.Num, what)
	}
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
}

// regSlot is where register n's value goes in the register block (size
// 0: not in the layout, or wider than 8 bytes).
type regSlot struct{ off, size int }

// regSpan copies n bytes of a fast hit's registers (from src, whole
// 8-byte slots) to the register block (at dst): consecutive registers
// of 8 bytes placed one after the other in the layout make one span.
type regSpan struct{ src, dst, n int }

// buildFastSlots indexes the layout by register number for FastHits.
func (e *Engine) buildFastSlots() {
	for _, r := range e.layout.Regs {
		if r.Num < 0 || r.Num > 1024 || r.Size > 8 {
			continue
		}
		for len(e.fastSlots) <= r.Num {
			e.fastSlots = append(e.fastSlots, regSlot{})
		}
		e.fastSlots[r.Num] = regSlot{off: r.Offset, size: r.Size}
	}
	e.fastSpans = e.fastSpans[:0]
	for num, sl := range e.fastSlots {
		if sl.size == 0 || sl.off+sl.size > e.layout.Size {
			continue
		}
		if k := len(e.fastSpans) - 1; k >= 0 && sl.size == 8 {
			last := &e.fastSpans[k]
			if last.n%8 == 0 && last.src+last.n == 8*num && last.dst+last.n == sl.off {
				last.n += 8
				continue
			}
		}
		e.fastSpans = append(e.fastSpans, regSpan{src: 8 * num, dst: sl.off, n: sl.size})
	}
}

// fillFastRegs copies a fast hit's registers (FastRecord.Regs) into the
// register block: register n when regs has its 8 bytes, truncated to
// its size in the layout.
func (e *Engine) fillFastRegs(block, regs []byte) {
	for _, sp := range e.fastSpans {
		n := sp.n
		if sp.n%8 == 0 {
			n = min(n, (len(regs)-sp.src)/8*8)
		} else if sp.src+8 > len(regs) {
			n = 0
		}
		if n <= 0 || sp.dst+n > len(block) {
			continue
		}
		copy(block[sp.dst:sp.dst+n], regs[sp.src:sp.src+n])
	}
}

// collectsRegisters reports whether tp's actions collect the register
// block (an R action).
func (tp *Tracepoint) collectsRegisters() bool {
	for _, a := range tp.Actions {
		if a.Kind == ActionRegisters {
			return true
		}
	}
	return false
}

// addBlocks adds jit-format collection blocks to h.frame.
func addBlocks(h *hitState, b []byte) error {
	for len(b) > 0 {
		switch b[0] {
		case 'M':
			if len(b) < 11 {
				return errors.New("truncated M block header")
			}
			addr := binary.LittleEndian.Uint64(b[1:9])
			n := int(binary.LittleEndian.Uint16(b[9:11]))
			if len(b) < 11+n {
				return fmt.Errorf("M block at %#x: %d bytes announced, %d present", addr, n, len(b)-11)
			}
			if uint64(h.frame.Size())+uint64(n) > uint64(h.bufSize) {
				h.overflow = true
				return nil
			}
			h.frame.AddMemory(addr, b[11:11+n])
			b = b[11+n:]
		case 'V':
			if len(b) < 13 {
				return errors.New("truncated V block")
			}
			h.frame.AddTSV(int(binary.LittleEndian.Uint32(b[1:5])), int64(binary.LittleEndian.Uint64(b[5:13])))
			b = b[13:]
		default:
			return fmt.Errorf("unknown block type %#x", b[0])
		}
	}
	return nil
}
