package inferior

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// TakeForkChild hands the held fork child pid over to a Process of its
// own, so that it can run while this process is debugged (gdb's
// detach-on-fork off, then resuming the child). The child is stopped
// where it forked, its registers and memory untouched, and is traced
// from then on by the new Process's ptrace thread; this Process forgets
// it. The new Process reports forks as this one does and is Attached if
// this one is (Close detaches it; otherwise Close kills it).
//
// ptrace ties a tracee to its tracer thread, so the child must be
// detached and attached again. In between it waits in pause, run at a
// syscall instruction of its vDSO, with every signal blocked: its mask is
// set by rt_sigprocmask run in it before, and put back by the new tracer
// (its code is not written; of its stack only two words below the red
// zone, put back). A signal sent meanwhile stays pending and is delivered
// once the child runs as before; the attach's SIGSTOP, which cannot be
// blocked, ends the wait. A signal already due to the child when it is
// handed over is reported by the new Process as a stop (its siginfo is
// lost).
func (p *Process) TakeForkChild(pid int) (*Process, error) {
	var park parkedChild
	var fork, vfork bool
	var pending []int
	err := p.do(func() error {
		if p.forks[pid] == nil {
			return fmt.Errorf("run %d: %w", pid, ErrNotForkChild)
		}
		fork, vfork = p.reportFork, p.reportVFork
		var err error
		park, pending, err = parkForHandOver(pid)
		if err != nil {
			// Left held as it was (parkForHandOver undoes what it did).
			return fmt.Errorf("handing over fork child %d: %w", pid, err)
		}
		delete(p.forks, pid)
		if err := ptraceDetach(pid, 0); err != nil {
			return fmt.Errorf("handing over fork child %d: %w", pid, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if handOverHook != nil {
		handOverHook(pid)
	}
	q := newProcess()
	q.pid = pid
	err = q.do(func() error {
		if err := q.attach(); err != nil {
			return err
		}
		q.attached = p.attached
		q.reportFork, q.reportVFork = fork, vfork
		q.optionsGen++
		if err := park.restore(pid); err != nil {
			return err
		}
		q.recordStopPCs()
		for _, sig := range pending {
			q.pending = append(q.pending, StopEvent{Kind: SignalStop, Tid: pid, Signal: sig})
		}
		return nil
	})
	if err != nil {
		q.Close()
		// The child is lost to us; do not leave it waiting for ever.
		_ = unix.Kill(pid, unix.SIGKILL)
		return nil, err
	}
	return q, nil
}

// handOverHook, set by tests, runs while a fork child is between tracers.
var handOverHook func(pid int)

// gadgetOf finds a syscall instruction in pid's executable mappings (its
// vDSO first), reading its memory through mem (its /proc/PID/mem).
func gadgetOf(pid int, mem *os.File) (uint64, error) {
	g := findSyscallGadget(pid, func(addr uint64, b []byte) (int, error) { return mem.ReadAt(b, int64(addr)) })
	if g == 0 {
		return 0, errors.New("no syscall instruction in its code")
	}
	return g, nil
}
