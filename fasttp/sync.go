package fasttp

import (
	"encoding/binary"
	"fmt"

	"gotpstub/inferior"
	"gotpstub/jit"
	"gotpstub/tdesc"
	"gotpstub/tracing"
)

// drained is one ring record on its way to the engine.
type drained struct {
	tp  *tracing.Tracepoint
	rec RingRecord
}

// Sync drains the ring into the engine: every hit the pads committed
// since the last drain becomes a trace frame (tracing.Syncer).
func (in *Installer) Sync() {
	in.mu.Lock()
	recs, err := in.drainLocked(in.memLocked())
	in.mu.Unlock()
	if err != nil {
		in.logf("fast tracepoints: draining the ring: %v", err)
	}
	in.feed(recs)
}

// SyncHit drains the ring through a stopped thread's memory access, from
// the ptrace goroutine (a trap hook): a trap tracepoint's hit, or a pad's
// own trap (tracing.HitSyncer). Removals the engine asks for meanwhile
// are left to Flush.
func (in *Installer) SyncHit(mem tracing.MemoryAccess) {
	in.mu.Lock()
	if in.ctl == 0 {
		in.mu.Unlock()
		return
	}
	in.hookMem = mem
	recs, err := in.drainLocked(mem)
	in.mu.Unlock()
	if err != nil {
		in.logf("fast tracepoints: draining the ring: %v", err)
	}
	in.feed(recs)
	in.mu.Lock()
	in.hookMem = nil
	in.mu.Unlock()
}

// feed hands drained records to the engine (without in.mu: the engine
// may stop the run and call Remove).
func (in *Installer) feed(recs []drained) {
	for _, d := range recs {
		if d.rec.Flags&jit.RecError != 0 {
			in.engine.FastHitError(d.tp, fmt.Sprintf("fast tracepoint %d: %s", d.tp.Num, jitErrText(d.rec.ErrCode)))
			continue
		}
		if err := in.engine.FastHit(d.tp, d.rec.Regs[:], d.rec.Blocks); err != nil {
			in.logf("fast tracepoint %d: bad record: %v", d.tp.Num, err)
		}
	}
}

// drainLocked reads the committed records between the stub's tail and
// the pads' head, then frees their space: headers zeroed, tail advanced.
func (in *Installer) drainLocked(mem memory) ([]drained, error) {
	if in.ctl == 0 {
		return nil, nil
	}
	var cur [16]byte
	if _, err := mem.ReadMemory(in.ctl+jit.CtlHead, cur[:]); err != nil {
		return nil, fmt.Errorf("reading the ring cursors: %w", err)
	}
	head := binary.LittleEndian.Uint64(cur[0:])
	if head == in.tail {
		return nil, nil
	}
	if head < in.tail || head-in.tail > ringSize {
		return nil, fmt.Errorf("ring cursors corrupt: head %#x, tail %#x", head, in.tail)
	}
	read := func(off uint64, n int) ([]byte, error) {
		b := make([]byte, n)
		if _, err := mem.ReadMemory(in.ring+off, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	recs, newTail, err := ParseRing(ringSize, in.tail, head, read)
	if newTail != in.tail {
		// Free the consumed bytes: zero them so no stale header looks
		// committed when the ring comes round, then publish the tail.
		for pos := in.tail; pos < newTail; {
			off := pos % ringSize
			n := min(newTail-pos, ringSize-off)
			if werr := mem.WriteMemory(in.ring+off, make([]byte, n)); werr != nil {
				return nil, fmt.Errorf("clearing consumed ring bytes: %w", werr)
			}
			pos += n
		}
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], newTail)
		if werr := mem.WriteMemory(in.ctl+jit.CtlTail, t[:]); werr != nil {
			return nil, fmt.Errorf("publishing the ring tail: %w", werr)
		}
		in.tail = newTail
	}
	var out []drained
	for _, r := range recs {
		s := in.bySlot[r.TPIndex]
		if s == nil {
			continue // a tracepoint removed since: its late hits are dropped
		}
		out = append(out, drained{tp: s.tp, rec: r})
	}
	return out, err
}

// trapHook handles the int3s of the pads and of punned instruction heads.
func (in *Installer) trapHook(st *inferior.Stopped) (inferior.TrapAction, bool) {
	in.mu.Lock()
	t, ok := in.padTraps[st.PC()]
	in.mu.Unlock()
	if !ok {
		return inferior.TrapResume, false
	}
	var next uint64
	switch t.kind {
	case trapPun:
		next = t.site.heads[st.PC()]
	case trapFull, trapPass:
		in.SyncHit(st)
		switch {
		case t.kind == trapPass:
			next = st.PC() + 1
		case in.engine.Running() && in.isPlaced(t.site):
			next = t.site.pad.Retry
		default:
			next = t.site.pad.Skip
		}
	}
	regs, err := st.Registers()
	if err != nil {
		return inferior.TrapReport, true
	}
	if err := regs.SetUint64(tdesc.RIP, next); err != nil {
		return inferior.TrapReport, true
	}
	if err := st.SetRegisters(regs); err != nil {
		return inferior.TrapReport, true
	}
	return inferior.TrapResume, true
}

func (in *Installer) isPlaced(s *jumpSite) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sites[s.tp] == s
}

// jitErrText names a jit error code.
func jitErrText(code uint32) string {
	switch code {
	case jit.ErrMemory:
		return "unreadable memory"
	case jit.ErrDivZero:
		return "division by zero"
	case jit.ErrFrameFull:
		return "collection larger than the space reserved per hit"
	case jit.ErrTSV:
		return "unknown trace state variable"
	case jit.ErrCollect:
		return "collection failed"
	case jit.ErrSteps:
		return "too many backward jumps (a loop?)"
	}
	return fmt.Sprintf("error code %d", code)
}
