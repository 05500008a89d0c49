package fasttp

import (
	"encoding/binary"
	"fmt"

	"gotpstub/inferior"
	"gotpstub/jit"
	"gotpstub/tdesc"
	"gotpstub/tracing"
)

// Sync drains the lanes into the engine: every hit the pads committed
// since the last drain becomes a trace frame (tracing.Syncer). The lanes
// are shared memory, so this needs no system call.
func (in *Installer) Sync() { in.drainAll() }

// SyncHit drains from the ptrace goroutine, while a trap tracepoint is
// hit (tracing.HitSyncer), so frames keep the order of the hits when trap
// and fast tracepoints mix. Removals the engine asks for meanwhile are
// left to Flush.
func (in *Installer) SyncHit(mem tracing.MemoryAccess) {
	in.mu.Lock()
	if in.lanes == nil {
		in.mu.Unlock()
		return
	}
	in.hookMem = mem
	in.mu.Unlock()
	in.drainAll()
	in.mu.Lock()
	in.hookMem = nil
	in.mu.Unlock()
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
	next := t.site.heads[pc]
	regs, err := st.Registers()
	if err != nil {
		return err
	}
	if err := regs.SetUint64(regs.Layout.PC, next); err != nil {
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
	punned := in.punnedHeadsLocked()
	in.mu.Unlock()
	if len(areas) == 0 {
		return
	}
	inPad := func(pc uint64) bool { return inAreas(areas, pc) }
	for _, tid := range in.proc.Threads() {
		regs, err := in.proc.Registers(tid)
		if err != nil || !inPad(regs.Uint64(regs.Layout.PC)) {
			continue
		}
		err = in.proc.WithStopped(tid, func(st *inferior.Stopped) error {
			for steps := range maxStabilizeSteps {
				r, err := st.Registers()
				if err != nil {
					return err
				}
				pc := r.Uint64(r.Layout.PC)
				if head, ok := punned[pc]; ok && steps > 0 {
					// At the copy of a covered instruction after the
					// first, having run the one before: it stops at that
					// instruction's own address (its int3 sends it back
					// here when it runs), so a gdb stepi into a jump over
					// several instructions executes one of them, not all.
					// (At steps 0 it was just sent here from that int3:
					// it runs the copy first.)
					in.logf("fast tracepoints: thread %d moved out of a pad to %#x in %d steps", tid, head, steps)
					_ = r.SetUint64(tdesc.RIP, head)
					_ = r.SetUint64(tdesc.EFLAGS, r.Uint64(tdesc.EFLAGS)&^eflagsTF)
					return st.SetRegisters(r)
				}
				if !inPad(pc) {
					in.logf("fast tracepoints: thread %d moved out of a pad in %d steps", tid, steps)
					return leftPad(st, r) // isa_*.go
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
				if err := stepInPad(st, pc, r); err != nil { // isa_*.go
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

// punnedHeadsLocked maps the relocated copy of each covered instruction
// that has an int3 at its own address (a pun) to that address.
func (in *Installer) punnedHeadsLocked() map[uint64]uint64 {
	m := map[uint64]uint64{}
	for _, s := range in.sites {
		for _, head := range s.puns {
			if to, ok := s.heads[head]; ok {
				m[to] = head
			}
		}
	}
	return m
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
