package tracing

import (
	"errors"
	"fmt"

	"gotpstub/agentexpr"
	"gotpstub/frames"
	"gotpstub/tdesc"
)

// maxCollectChunk bounds one read of inferior memory during collection.
const maxCollectChunk = 64 * 1024

// hitState is the evaluation environment of one hit. The engine owns one
// and reuses it under its mutex, so a hit allocates little beyond its
// frame. It implements the agentexpr interfaces.
type hitState struct {
	e     *Engine
	ctx   HitContext
	regs  []byte // register block of the hitting thread
	frame *frames.FrameBuilder
	env   agentexpr.Env
	chunk []byte
	// overflow is set when the frame outgrew the whole buffer: the rest
	// was not collected and the frame cannot be stored.
	overflow bool
	// bufSize is the trace buffer's size, read before a batch of fast
	// hits (the buffer's lock is held during the batch).
	bufSize int
}

// ReadMemory implements agentexpr.Memory on the hitting thread. Bytes
// that cannot be read read as zero: like gdbserver, whose ref opcodes
// ignore read errors, an unreadable dereference (a NULL pointer in
// "collect p->x" or in a condition) neither fails the expression nor
// stops the run.
func (h *hitState) ReadMemory(addr uint64, buf []byte) error {
	n, _ := h.ctx.ReadMemory(addr, buf)
	clear(buf[max(n, 0):])
	return nil
}

// Register implements agentexpr.Registers.
func (h *hitState) Register(num int) (uint64, error) {
	v, ok := h.e.regValue(h.regs, num)
	if !ok {
		return 0, fmt.Errorf("%w: register %d", agentexpr.ErrBadRegister, num)
	}
	return v, nil
}

// GetTSV implements agentexpr.TSVs.
func (h *hitState) GetTSV(num int) (int64, bool) {
	v := h.e.findTSV(num)
	if v == nil {
		return 0, false
	}
	return h.e.tsvValue(v), true
}

// SetTSV implements agentexpr.TSVs.
func (h *hitState) SetTSV(num int, val int64) {
	if v := h.e.findTSV(num); v != nil {
		h.e.setTSVLocked(v, val)
	}
}

// CollectMemory implements agentexpr.Collector: records what can be read.
func (h *hitState) CollectMemory(addr uint64, size uint64) error {
	h.collect(addr, size)
	return nil
}

// CollectTSV implements agentexpr.Collector: records a V block.
func (h *hitState) CollectTSV(num int) error {
	v := h.e.findTSV(num)
	if v == nil {
		return fmt.Errorf("%w: %d", agentexpr.ErrUnknownTSV, num)
	}
	h.frame.AddTSV(num, h.e.tsvValue(v))
	return nil
}

// collect adds M blocks for the readable prefix of [addr, addr+size).
func (h *hitState) collect(addr, size uint64) {
	for size > 0 {
		n := min(size, maxCollectChunk)
		if h.overflow || uint64(h.frame.Size())+n > uint64(h.e.buf.Size()) {
			// Larger than the whole buffer: never stored, so stop
			// reading (a computed length may be huge).
			h.overflow = true
			return
		}
		if uint64(cap(h.chunk)) < n {
			h.chunk = make([]byte, n)
		}
		buf := h.chunk[:n]
		got, _ := h.ctx.ReadMemory(addr, buf)
		if got > 0 {
			h.frame.AddMemory(addr, buf[:got])
		}
		if uint64(got) < n {
			return
		}
		addr += n
		size -= n
	}
}

// Hit records a hit of tp by the thread ctx: it evaluates the condition,
// collects tp's actions into a frame, counts the hit and checks the
// passcount and the buffer. It returns how many while-stepping steps the
// caller must run, reporting each with Step (0: none). The installer calls
// it on the ptrace thread.
func (e *Engine) Hit(tp *Tracepoint, ctx HitContext) (steps int) {
	e.syncHit(ctx) // earlier hits collected elsewhere come first
	e.mu.Lock()
	if !e.running || !tp.Enabled || !tp.installed {
		e.mu.Unlock()
		return 0
	}
	removed := e.hitLocked(tp, ctx)
	steps = 0
	if e.running && tp.StepCount > 0 && removed == nil && e.hit.frame != nil {
		steps = tp.StepCount
	}
	e.hit.frame, e.hit.ctx = nil, nil
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
	return steps
}

// hitLocked does Hit's work; it returns the tracepoints to remove when the
// run stopped. e.hit.frame is nil afterwards when the condition was false
// or evaluating it failed.
func (e *Engine) hitLocked(tp *Tracepoint, ctx HitContext) []*Tracepoint {
	h := &e.hit
	h.ctx, h.frame, h.overflow = ctx, nil, false
	regs, err := ctx.Registers()
	if err != nil {
		return e.stopLocked(reasonError, tp.Num, fmt.Sprintf("reading registers: %v", err))
	}
	h.regs = h.regBlock(regs, tp.Addr, true)
	h.env = agentexpr.Env{Mem: h, Regs: h, TSV: h}
	if tp.Cond != nil {
		v, err := agentexpr.Eval(tp.Cond, &h.env)
		if err != nil {
			return e.stopLocked(reasonError, tp.Num, fmt.Sprintf("condition: %v", err))
		}
		if v == 0 {
			return nil
		}
	}
	tp.Hits++
	h.frame = e.buf.NewFrame(tp.Num)
	h.frame.SetFallbackPC(tp.Addr)
	h.frame.SetTime(e.now().UnixNano())
	if removed, failed := e.collectLocked(tp, false); failed {
		return removed
	}
	if removed := e.commitLocked(tp); removed != nil {
		return removed
	}
	if tp.PassCount > 0 && tp.Hits >= uint64(tp.PassCount) && tp.StepCount == 0 {
		return e.stopLocked(reasonPassCount, tp.Num, "")
	}
	return nil
}

// regBlock copies the thread's registers into a register block, the PC
// set to pc when setPC (a trap reports the address after the int3).
func (h *hitState) regBlock(regs *tdesc.Regs, pc uint64, setPC bool) []byte {
	e := h.e
	size := e.regBlockSize()
	if cap(h.regs) < size {
		h.regs = make([]byte, size)
	}
	block := h.regs[:size]
	clear(block)
	if regs != nil {
		copy(block, regs.Data)
	}
	if setPC && e.pcReg >= 0 {
		r := e.layout.Regs[e.regIndex[e.pcReg]]
		if r.Offset+8 <= len(block) {
			putLE(block[r.Offset:r.Offset+8], pc)
		}
	}
	return block
}

// collectLocked runs tp's actions (step: its while-stepping actions) into
// e.hit.frame. failed means an expression
// could not be evaluated and the run stopped (removed is what to take out).
func (e *Engine) collectLocked(tp *Tracepoint, step bool) (removed []*Tracepoint, failed bool) {
	actions := tp.Actions
	if step {
		actions = tp.StepActions
	}
	h := &e.hit
	for i := range actions {
		a := &actions[i]
		switch a.Kind {
		case ActionRegisters:
			h.frame.AddRegisterRuns(h.regs, e.actionRegisterRuns(tp, step))
		case ActionMemory:
			addr := a.Offset
			if a.BaseReg >= 0 {
				base, ok := e.regValue(h.regs, a.BaseReg)
				if !ok {
					continue
				}
				addr += base
			}
			h.collect(addr, a.Len)
		case ActionStaticData:
			if e.static != nil {
				h.frame.AddStatic(e.static.StaticData(tp.Addr, func(num int) (uint64, bool) {
					return e.regValue(h.regs, num)
				}, func(addr uint64, buf []byte) bool {
					n, _ := h.ctx.ReadMemory(addr, buf)
					return n == len(buf)
				}))
			}
		case ActionExpr:
			h.env.Collect = h
			_, err := agentexpr.Eval(a.Expr, &h.env)
			h.env.Collect = nil
			if err != nil {
				h.frame = nil
				return e.stopLocked(reasonError, tp.Num, fmt.Sprintf("action expression: %v", err)), true
			}
		}
	}
	return nil, false
}

// commitLocked stores e.hit.frame; a full buffer stops the run.
func (e *Engine) commitLocked(tp *Tracepoint) []*Tracepoint {
	f := e.hit.frame
	size := f.Size()
	err := frames.ErrFull
	if !e.hit.overflow {
		if e.inBatch {
			err = e.batch.Commit(f)
		} else {
			err = e.buf.Commit(f)
		}
	}
	if err != nil {
		e.hit.frame = nil
		if errors.Is(err, frames.ErrFull) {
			return e.stopLocked(reasonFull, 0, "")
		}
		return e.stopLocked(reasonError, tp.Num, fmt.Sprintf("storing the trace frame: %v", err))
	}
	tp.BytesUsed += uint64(size)
	return nil
}

// Step records while-stepping step number step (1-based) of tp's hit by
// ctx: one frame of tp's while-stepping actions with the thread's current
// registers. After the last step it checks the passcount.
func (e *Engine) Step(tp *Tracepoint, ctx HitContext, step int) {
	e.mu.Lock()
	if !e.running {
		e.mu.Unlock()
		return
	}
	removed := e.stepLocked(tp, ctx, step)
	e.hit.frame, e.hit.ctx = nil, nil
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
}

func (e *Engine) stepLocked(tp *Tracepoint, ctx HitContext, step int) []*Tracepoint {
	h := &e.hit
	h.ctx, h.overflow = ctx, false
	regs, err := ctx.Registers()
	if err != nil {
		return e.stopLocked(reasonError, tp.Num, fmt.Sprintf("reading registers: %v", err))
	}
	h.regs = h.regBlock(regs, 0, false)
	h.env = agentexpr.Env{Mem: h, Regs: h, TSV: h}
	h.frame = e.buf.NewFrame(tp.Num)
	h.frame.SetFallbackPC(tp.Addr) // like gdbserver's get_traceframe_address
	h.frame.SetTime(e.now().UnixNano())
	if removed, failed := e.collectLocked(tp, true); failed {
		return removed
	}
	if removed := e.commitLocked(tp); removed != nil {
		return removed
	}
	if step >= tp.StepCount && tp.PassCount > 0 && tp.Hits >= uint64(tp.PassCount) {
		return e.stopLocked(reasonPassCount, tp.Num, "")
	}
	return nil
}
