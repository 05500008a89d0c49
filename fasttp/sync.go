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
	// Every thread is stopped when gdb sends a trace packet (all-stop):
	// nothing writes the ring meanwhile, one bulk read is safe.
	recs, err := in.drainLocked(in.memLocked(), true)
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
	recs, err := in.drainLocked(mem, false)
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
// quiescent says no thread can be writing the ring: it is then read in
// bulk; otherwise each record's header is read before its body, so a
// record being written is never read half done.
func (in *Installer) drainLocked(mem memory, quiescent bool) ([]drained, error) {
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
	ringSize := in.ringSize
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
	if quiescent {
		// Snapshot the used part of the ring in at most two reads.
		if uint64(len(in.snap)) != ringSize {
			in.snap = make([]byte, ringSize)
		}
		snap := in.snap
		for pos := in.tail; pos < head; {
			off := pos % ringSize
			n := min(head-pos, ringSize-off)
			if _, err := mem.ReadMemory(in.ring+off, snap[off:off+n]); err != nil {
				return nil, fmt.Errorf("reading the ring: %w", err)
			}
			pos += n
		}
		read = RingSnapshot(snap)
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
	if err := in.padTrap(st, st.PC(), t); err != nil {
		return inferior.TrapReport, true
	}
	return inferior.TrapResume, true
}

// padTrap does what the int3 at pc (role t) asks for and moves st on.
func (in *Installer) padTrap(st *inferior.Stopped, pc uint64, t padTrap) error {
	var next uint64
	switch t.kind {
	case trapPun:
		next = t.site.heads[pc]
	case trapFull, trapPass:
		in.SyncHit(st)
		switch {
		case t.kind == trapPass:
			next = pc + 1
		case in.engine.Running() && in.isPlaced(t.site):
			next = t.site.pad.Retry
		default:
			next = t.site.pad.Skip
		}
	}
	regs, err := st.Registers()
	if err != nil {
		return err
	}
	if err := regs.SetUint64(tdesc.RIP, next); err != nil {
		return err
	}
	return st.SetRegisters(regs)
}

// maxStabilizeSteps bounds the single-steps that take a thread out of a
// pad (a pad with its expression code runs a few hundred instructions;
// a safe read's system call is one step).
const maxStabilizeSteps = 100000

// Stabilize moves every thread that stopped inside pad memory out of it,
// each alone by single-steps until its pc is back in the program (after
// the relocated instructions), so gdb never sees a pad address as a
// thread's pc, like gdbserver's stabilizing. The hit such a thread was
// collecting completes. The server calls it before reporting a stop;
// every thread is stopped then.
func (in *Installer) Stabilize() {
	in.mu.Lock()
	areas := append([]Range(nil), in.areas...)
	in.mu.Unlock()
	if len(areas) == 0 {
		return
	}
	inPad := func(pc uint64) bool {
		for _, a := range areas {
			if pc >= a.Start && pc < a.End {
				return true
			}
		}
		return false
	}
	for _, tid := range in.proc.Threads() {
		regs, err := in.proc.Registers(tid)
		if err != nil || !inPad(regs.Uint64(tdesc.RIP)) {
			continue
		}
		err = in.proc.WithStopped(tid, func(st *inferior.Stopped) error {
			for steps := range maxStabilizeSteps {
				r, err := st.Registers()
				if err != nil {
					return err
				}
				pc := r.Uint64(tdesc.RIP)
				if !inPad(pc) {
					in.logf("fast tracepoints: thread %d moved out of a pad in %d steps", tid, steps)
					return clearStepTF(st, r)
				}
				in.mu.Lock()
				t, isTrap := in.padTraps[pc]
				in.mu.Unlock()
				if isTrap {
					if err := in.padTrap(st, pc, t); err != nil {
						return err
					}
					continue
				}
				if err := stepFixingPushf(st, pc, r.Uint64(tdesc.RSP)); err != nil {
					return err
				}
			}
			return fmt.Errorf("still inside a pad after %d steps", maxStabilizeSteps)
		})
		if err != nil {
			in.logf("fast tracepoints: moving thread %d out of a pad: %v", tid, err)
		}
	}
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

// eflagsTF is the trap flag.
const eflagsTF = 0x100

// stepFixingPushf single-steps st at pc (stack pointer rsp). Stepping a
// pushfq pushes the trap flag the kernel set for the step; the pad's
// popfq would then restore it and the thread would trap after every
// instruction. So after a pushfq the pushed flags lose TF (unless the
// thread had TF set itself, which the register copy before the step shows).
func stepFixingPushf(st *inferior.Stopped, pc, rsp uint64) error {
	var op [1]byte
	_, _ = st.ReadMemory(pc, op[:])
	regs, err := st.Registers()
	if err != nil {
		return err
	}
	ownTF := regs.Uint64(tdesc.EFLAGS)&eflagsTF != 0
	if err := st.SingleStep(); err != nil {
		return err
	}
	if op[0] != 0x9c || ownTF {
		return nil
	}
	var v [8]byte
	if _, err := st.ReadMemory(rsp-8, v[:]); err != nil {
		return err
	}
	flags := binary.LittleEndian.Uint64(v[:]) &^ eflagsTF
	binary.LittleEndian.PutUint64(v[:], flags)
	return st.WriteMemory(rsp-8, v[:])
}

// clearStepTF clears the trap flag our single-steps may have left in the
// thread's flags: the kernel treats a stepped popfq as the program setting
// TF itself, so the flags the pad restores can come back with TF set
// (regs are the thread's current registers). Programs do not run with TF
// set in code we generated, so any TF here is ours.
func clearStepTF(st *inferior.Stopped, regs *tdesc.Regs) error {
	fl := regs.Uint64(tdesc.EFLAGS)
	if fl&eflagsTF == 0 {
		return nil
	}
	if err := regs.SetUint64(tdesc.EFLAGS, fl&^eflagsTF); err != nil {
		return err
	}
	return st.SetRegisters(regs)
}
