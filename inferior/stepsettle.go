package inferior

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// A PTRACE_SINGLESTEP leaves the kernel's single-step state armed (x86's
// TIF_FORCED_TF and the trap flag, arm64's TIF_SINGLESTEP) until the
// thread's next non-step resumption. A tracer's death detaches its
// tracees without clearing it (only PTRACE_DETACH does), so a thread last
// stepped — an injected system call, a step over a breakpoint, gdb's
// stepi — and still stopped when the stub died would take a debug trap
// at its next instruction and the program would die of SIGTRAP. The
// server therefore settles the stopped threads' steps before it waits for
// gdb (SettleSteps), in all-stop and in non-stop mode, other threads
// running or not: the window is then only the packet being handled.
//
// Only a thread stopped for gdb is settled: its stop reported (taken off
// the event queue) and not resumed since. A thread whose stop is still
// queued is left for the next call: settling it could dequeue a signal
// that arrived meanwhile (a pthread_kill), queued as a second event of
// the same thread, and non-stop mode reports a random one of the queued
// events first (fairReportable) — gdb then saw the signal, passed it back
// with the thread's next resumption, which instead reported the older
// step stop at once and kept the signal for the resumption after, a
// step: the thread entered the handler on a step, reported there
// (gdb.threads/non-stop-fair-events.exp, 2 runs in 3). Those threads
// stop for gdb a moment later; the window left is that moment. A second
// hazard, also fixed: the settle's wait for the leader, others running,
// collects every status (waitLive), a fork child's first stop among
// them, which the fork event's handler then waited for again for ever
// (next-fork-other-thread.exp): takeStashedStatus.

// SettleSteps ends the single-step state every stopped thread keeps from
// its last resumption (see above), so that the program, should the stub
// die while it waits, runs on. Cheap when no thread was stepped since the
// last call.
func (p *Process) SettleSteps() error {
	if !p.stepsArmed.Load() {
		return nil
	}
	return p.do(func() error {
		p.stepsArmed.Store(false)
		var firstErr error
		for _, t := range p.threads {
			if !t.stepArmed {
				continue
			}
			if !p.stoppedForGDB(t) || p.stopOnItsWay(t) {
				p.stepsArmed.Store(true) // next time
				continue
			}
			if err := p.settleStep(t); err != nil && firstErr == nil && !errors.Is(err, ErrNoThread) {
				firstErr = err
			}
		}
		return firstErr
	})
}

// stoppedForGDB reports whether t is stopped and gdb knows it: its
// stop reported, not resumed since (see above).
func (p *Process) stoppedForGDB(t *thread) bool {
	return t.stopped && !t.resumed && !p.hasPending(t.tid)
}

// stopOnItsWay reports whether a SIGSTOP is pending for stopped thread
// t (one of the stub's — a stop request, an interrupt, a hold — or
// anyone's): settleStep's own would merge with it and consume it, and
// the stop it stands for would never come (a vCont;t's SIGSTOP to a
// thread whose step ended first, say).
func (p *Process) stopOnItsWay(t *thread) bool {
	return t.sigstopExpected || t.stopRequested || p.interruptPending(t) || sigstopPending(p.pid, t.tid)
}

// settleStep ends stopped thread t's single-step state: it is resumed
// with a SIGSTOP queued, for which it stops again before it executes an
// instruction, its registers unchanged; the siginfo of the stop it was in
// is put back. Threads in an event or syscall stop are left (resuming
// them would finish a system call); so are threads gone meanwhile.
func (p *Process) settleStep(t *thread) error {
	t.stepArmed = false
	si, err := getSiginfo(t.tid)
	if err != nil || !signalDeliveryStop(si) {
		return nil
	}
	if err := unix.Tgkill(p.pid, t.tid, unix.SIGSTOP); err != nil {
		return fmt.Errorf("settling thread %d's step: %w", t.tid, err)
	}
	for {
		if err := ptraceCont(t.tid, 0); err != nil {
			t.sigstopExpected = true
			return fmt.Errorf("settling thread %d's step: %w", t.tid, err)
		}
		t.stopped = false
		ws, err := p.waitThread(t)
		if err != nil {
			if errors.Is(err, unix.ECHILD) {
				p.threadGone(t)
				return fmt.Errorf("thread %d: %w", t.tid, ErrNoThread)
			}
			return fmt.Errorf("waiting for thread %d: %w", t.tid, err)
		}
		if ws.Exited() || ws.Signaled() {
			p.handleStatus(t.tid, ws)
			return fmt.Errorf("thread %d: %w", t.tid, ErrNoThread)
		}
		if !ws.Stopped() {
			continue
		}
		t.stopped = true
		s := ws.StopSignal()
		switch {
		case s == unix.SIGSTOP:
			_ = setSiginfo(t.tid, &si)
			return nil
		case s == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXIT:
			p.exitEventStop(t) // a SIGKILL came first
			return fmt.Errorf("thread %d: %w", t.tid, ErrNoThread)
		case p.holdSignalWhileStepping(t, int(s)):
			// Kept for its next real resumption; on to our SIGSTOP.
		default:
			// A signal for gdb came first: the thread stays in its stop
			// and our SIGSTOP, still pending, is swallowed later.
			p.queueSignalStop(t, int(s))
			t.sigstopExpected = true
			return nil
		}
	}
}

// signalDeliveryStop reports whether si, a stopped thread's siginfo,
// is a signal's (not a PTRACE_EVENT or syscall stop's, whose si_code
// holds the ptrace status: SIGTRAP | event<<8 or SIGTRAP|0x80).
func signalDeliveryStop(si siginfo) bool {
	if si.Signo != int32(unix.SIGTRAP) {
		return true
	}
	return si.Code>>8 == 0 && si.Code != int32(unix.SIGTRAP|0x80)
}
