package inferior

import "golang.org/x/sys/unix"

// SetExitHook sets the function run when a thread of the process is about
// to exit (nil: none, the default).
//
// With a hook set every thread is traced with PTRACE_O_TRACEEXIT: a thread
// that exits (returns from its start routine, calls exit or exit_group,
// or, see below, is taken down by another thread) stops first at
// PTRACE_EVENT_EXIT, while the process memory and the thread's registers
// are still there. The hook then runs on the ptrace goroutine with a
// *Stopped for that thread: its ReadMemory, WriteMemory and Registers
// work, but it must not single-step the thread nor call Process methods
// (they would run re-entrantly in the middle of event handling). After the
// hook the thread is continued (no signal) and finishes exiting; its exit,
// and the process's, are reported exactly as without a hook.
//
// The hook may run several times per process, at most once for each
// exiting thread, and the memory is intact during every call. The thread
// that ends the process (calling exit_group, or taking a fatal signal
// other than SIGKILL) stops, unless a SIGKILL reaches it first. The
// threads the kernel then takes down with SIGKILL, and the threads of a
// process killed with SIGKILL (Kill), may or may not stop, depending on
// timing and kernel version: the hook cannot be relied upon for them.
//
// The option is set at once on every stopped thread (normally all of
// them: SetExitHook is called while the process is stopped); a thread that
// is running at the time gets it at its next resumption, so its exit is
// seen only after it has stopped once. (While a Wait is pending on a
// running process the call, like every method but Interrupt and Kill,
// is served only after the next event.) Threads created later inherit the
// option from their creator (the kernel copies the tracer's options to
// threads auto-attached through PTRACE_O_TRACECLONE). Setting nil turns
// PTRACE_O_TRACEEXIT off again the same way. Without a hook the process
// is traced exactly as before this facility existed.
func (p *Process) SetExitHook(h func(s *Stopped)) {
	_ = p.do(func() error {
		p.exitHook = h
		want := h != nil
		if want == p.traceExit {
			return nil
		}
		p.traceExit = want
		p.optionsGen++
		for _, t := range p.threads {
			if t.stopped && !t.zombie {
				p.updateOptions(t)
			}
		}
		return nil
	})
}

// ptraceOptions returns the ptrace options every thread should have now.
func (p *Process) ptraceOptions() int {
	opts := p.baseOptions
	if p.traceExit {
		opts |= unix.PTRACE_O_TRACEEXIT
	}
	if p.reportVFork {
		opts |= unix.PTRACE_O_TRACEVFORKDONE
	}
	return opts
}

// updateOptions gives the stopped thread t the current ptrace options if
// it does not have them yet. A failure (the thread is gone) is retried at
// its next resumption.
func (p *Process) updateOptions(t *thread) {
	if t.optionsGen == p.optionsGen {
		return
	}
	if err := unix.PtraceSetOptions(t.tid, p.ptraceOptions()); err == nil {
		t.optionsGen = p.optionsGen
	}
}

// isExitEvent reports whether ws is a PTRACE_EVENT_EXIT stop.
func isExitEvent(ws unix.WaitStatus) bool {
	return ws.Stopped() && ws.StopSignal() == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXIT
}

// exitEventStop handles t stopped at PTRACE_EVENT_EXIT: the exit hook
// runs, then the thread is continued so that it finishes exiting (its exit
// status comes later through wait4 as usual). Every wait loop that can
// see this stop calls it, whatever else is going on (stopping every
// thread, stepping one, killing the process): the thread must never be
// left in this stop.
func (p *Process) exitEventStop(t *thread) {
	t.stopped = true
	p.exitEventStops++
	if p.exitHook != nil && !p.inExitHook {
		st := &Stopped{p: p, t: t}
		if pc, err := getPC(t.tid); err == nil {
			st.addr = pc
		}
		p.inExitHook = true
		p.exitHook(st)
		p.inExitHook = false
	}
	p.releaseExitingThread(t.tid)
	t.stopped = false
	// Its stop requests are moot: an exiting thread stops no more.
	t.sigstopExpected = false
}

// releaseExitingThread continues a thread stopped at PTRACE_EVENT_EXIT
// (tracked or not) so that it exits.
func (p *Process) releaseExitingThread(tid int) {
	// PTRACE_CONT of a thread in a ptrace-stop fails only if it is gone
	// (SIGKILLed meanwhile): then there is nothing left to do.
	_ = p.flushWrites()
	_ = ptraceCont(tid, 0)
}
