package inferior

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// anyRunning reports whether some thread is (or may be) executing.
func (p *Process) anyRunning() bool {
	for _, t := range p.threads {
		if !t.stopped && !t.zombie {
			return true
		}
	}
	return false
}

// drain collects every status change available without blocking.
func (p *Process) drain() {
	p.handleStashed()
	if p.nonStop {
		p.drainAll()
		return
	}
	for p.reportable() < 0 {
		// Once an event is to be reported, the rest waits for the
		// waiter's stopAll: threads that keep hitting trap tracepoints
		// would otherwise keep this loop busy for ever, and an
		// interrupt queued meanwhile would never be reported.
		wpid, ws, err := wait4(-1, unix.WNOHANG)
		if err != nil || wpid <= 0 {
			return
		}
		p.handleStatus(wpid, ws)
	}
}

// handleStatus processes one wait status.
func (p *Process) handleStatus(tid int, ws unix.WaitStatus) {
	t := p.threads[tid]
	if t == nil {
		if isExitEvent(ws) {
			// A thread we no longer track (one an exec took down) must
			// not be left in its exit stop.
			p.releaseExitingThread(tid)
			return
		}
		if ws.Stopped() {
			// A new thread's first stop can precede its creator's clone
			// event: remember it.
			p.orphans[tid] = true
		}
		return
	}
	switch {
	case ws.Exited() || ws.Signaled():
		p.threadGone(t)
		if tid == p.pid {
			// The leader's status comes last: the whole process is gone.
			ev := StopEvent{Kind: Exited, Tid: p.pid, ExitCode: ws.ExitStatus()}
			if ws.Signaled() {
				ev = StopEvent{Kind: Killed, Tid: p.pid, Signal: int(ws.Signal())}
			}
			p.setExited(ev)
		}
	case ws.Stopped():
		t.stopped = true
		p.noteStopKind(t, isEventStop(ws))
		p.handleStop(t, ws)
	}
}

// isEventStop reports whether ws is a PTRACE_EVENT or syscall stop, from
// which a signal cannot be injected.
func isEventStop(ws unix.WaitStatus) bool {
	return ws.TrapCause() > 0 || ws.StopSignal() == unix.SIGTRAP|0x80
}

// isGone reports whether err says the thread no longer exists.
func isGone(err error) bool { return errors.Is(err, unix.ESRCH) }

// threadGone forgets an exited thread and its queued events.
func (p *Process) threadGone(t *thread) {
	delete(p.threads, t.tid)
	p.forgetThreadSignals(t.tid)
	kept := p.pending[:0]
	for _, ev := range p.pending {
		if ev.Tid != t.tid {
			kept = append(kept, ev)
		}
	}
	p.pending = kept
	p.updateTids()
}

// setExited records the end of the process.
func (p *Process) setExited(ev StopEvent) {
	if p.exitEvent == nil {
		p.exitEvent = &ev
	}
	p.pending = nil
	for tid := range p.threads {
		delete(p.threads, tid)
	}
	p.updateTids()
	p.runningFlag.Store(false)
	p.gone.Store(true)
	p.guardMemory()
}

// queue records a reportable event; the thread stays stopped.
func (p *Process) queue(ev StopEvent) {
	p.pending = append(p.pending, ev)

}

func (p *Process) hasPending(tid int) bool {
	for _, ev := range p.pending {
		if ev.Tid == tid {
			return true
		}
	}
	return false
}

// resumeThread lets a stopped thread run again as it was last resumed,
// unless a stop of every thread is in progress or it has an event queued.
// The next signal due to it is delivered.
func (p *Process) resumeThread(t *thread) {
	if p.stopping || p.paused > 0 || !t.stopped || !t.resumed || p.hasPending(t.tid) || p.exitEvent != nil {
		return
	}
	_ = p.resumeDelivering(t)
}

// rawResume continues or steps t delivering qs (its siginfo written back
// first; see prepareSignal), writing stale debug registers first. A
// signal it fails to deliver is queued again for the thread.
func (p *Process) rawResume(t *thread, step bool, qs queuedSignal) error {
	t.lowerStopped()
	if err := p.flushBeforeResume(t); err != nil {
		return fmt.Errorf("resuming thread %d: %w", t.tid, err)
	}
	p.updateOptions(t)
	if t.drGen != p.drGen {
		if err := p.writeDebugRegs(t); err == nil {
			t.drGen = p.drGen
		}
	}
	t.interrupted, t.rehit, t.atSyscallEntry = false, false, false
	// It moves: a later step-over needs a new reported stop or hook.
	t.stopPC, t.hookedAt = 0, 0
	sig := p.prepareSignal(t, qs)
	t.stepArmed = step
	if step {
		p.stepsArmed.Store(true)
	}
	var err error
	switch {
	case step:
		err = ptraceStep(t.tid, sig)
	case p.catch.on:
		err = unix.PtraceSyscall(t.tid, sig)
	default:
		err = ptraceCont(t.tid, sig)
	}
	if err != nil {
		if sig != 0 {
			p.requeueSignal(t, qs)
		}
		if errors.Is(err, unix.ESRCH) {
			// Gone (being killed): its exit status will come.
			t.stopped = false
			return err
		}
		return fmt.Errorf("resuming thread %d: %w", t.tid, err)
	}
	t.stopped = false
	return nil
}

// handleStop processes a ptrace-stop of t.
func (p *Process) handleStop(t *thread, ws unix.WaitStatus) {
	sig := ws.StopSignal()
	switch {
	case sig == unix.SIGTRAP && ws.TrapCause() != 0:
		p.handleEvent(t, ws.TrapCause())
	case sig == unix.SIGTRAP|0x80:
		p.syscallStop(t)
	case sig == unix.SIGSTOP && p.takeInterrupt(t):
		// A stop request of ours still in flight merged with the
		// interrupt's SIGSTOP (a pending SIGSTOP is delivered once):
		// this one stop answers both, and gdb must hear of the
		// interrupt — swallowing it lost gdb's ^C for good while trap
		// tracepoints kept stopping every thread.
		p.queueInterrupt(t)
	case sig == unix.SIGSTOP && t.sigstopExpected:
		t.sigstopExpected = false
		if t.drGen != p.drGen {
			if err := p.writeDebugRegs(t); err == nil {
				t.drGen = p.drGen
			}
		}
		p.threadStarted(t)
		if t.stopRequested {
			p.stopAsRequested(t)
			return
		}
		p.resumeThread(t)
	case sig == unix.SIGTRAP:
		p.handleTrap(t)
	case (sig == unix.SIGSEGV || sig == unix.SIGBUS) && p.fixFault(t, int(sig)):
		if t.step {
			// gdb's single-step ended in the fixed-up fault.
			p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP)})
			return
		}
		p.resumeThread(t)
	default:
		if p.passSignal(t, int(sig)) {
			return
		}
		p.queueSignalStop(t, int(sig))
	}
}

// takeInterrupt reports whether t's SIGSTOP is the one Interrupt sent,
// and consumes it.
func (p *Process) takeInterrupt(t *thread) bool {
	p.intrMu.Lock()
	defer p.intrMu.Unlock()
	if p.intrTid == t.tid {
		p.intrTid = 0
		return true
	}
	return false
}

// queueInterrupt reports t's stop at Interrupt's SIGSTOP (which may have
// merged with one of ours) as the interrupt's SIGINT.
func (p *Process) queueInterrupt(t *thread) {
	t.sigstopExpected = false
	t.interrupted = true
	p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGINT), Interrupted: true})
}

// handleEvent processes a PTRACE_EVENT stop.
func (p *Process) handleEvent(t *thread, event int) {
	switch event {
	case unix.PTRACE_EVENT_CLONE:
		msg, err := unix.PtraceGetEventMsg(t.tid)
		if err == nil {
			// The kernel gives an auto-attached thread its creator's
			// ptrace options.
			nt := &thread{tid: int(msg), resumed: p.newThreadRuns(t), sigstopExpected: true, optionsGen: t.optionsGen, fresh: true}
			if p.orphans[nt.tid] {
				delete(p.orphans, nt.tid)
				nt.stopped, nt.sigstopExpected = true, false
			}
			p.threads[nt.tid] = nt
			p.updateTids()
			if nt.stopped {
				if err := p.writeDebugRegs(nt); err == nil {
					nt.drGen = p.drGen
				}
				p.threadStarted(nt)
				p.resumeThread(nt)
			}
		}
		p.resumeThread(t)
	case unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK:
		if !p.onForkEvent(t, event == unix.PTRACE_EVENT_VFORK) {
			p.resumeThread(t)
		}
	case unix.PTRACE_EVENT_VFORK_DONE:
		if !p.onVForkDone(t) {
			p.resumeThread(t)
		}
	case unix.PTRACE_EVENT_EXEC:
		p.onExec(t)
	case unix.PTRACE_EVENT_EXIT:
		p.exitEventStop(t)
	default:
		p.resumeThread(t)
	}
}

// newThreadRuns reports whether a thread that parent just cloned runs at
// once. It does, as its parent was resumed, except in all-stop mode while
// gdb single-steps the parent: then it waits for gdb's next resume, as
// with gdbserver. gdb single-steps a displaced copy of the clone system
// call, and a child run at once starts in gdb's displaced-step buffer and
// can reach an abort before the parent's step is reported (gdb bug 19675;
// gdb.base/step-over-syscall.exp's "single step over clone final pc").
func (p *Process) newThreadRuns(parent *thread) bool {
	return parent.resumed && (p.nonStop || !parent.step)
}

// onExec resets the state an execve destroyed and queues the exec stop.
func (p *Process) onExec(t *thread) {
	// The execing thread now has the leader's tid; every other thread is
	// gone. It was running as gdb asked, whatever gdb asked of the
	// leader (a non-leader's exec with the leader held stopped, under
	// scheduler-locking or in non-stop mode, must still be reported).
	if msg, err := unix.PtraceGetEventMsg(t.tid); err == nil && int(msg) != t.tid {
		if old := p.threads[int(msg)]; old != nil {
			t.resumed, t.step, t.stopRequested = old.resumed, old.step, old.stopRequested
		}
	}
	for tid := range p.threads {
		if tid != t.tid {
			delete(p.threads, tid)
		}
	}
	p.pending = nil
	t.sigstopExpected, t.hookedAt, t.zombie = false, 0, false
	// Signals the kernel had handed over survive the exec, as pending
	// signals do; the other threads' are gone with them.
	ts := p.lookupTsigs(t.tid)
	p.sigs().threads = map[int]*threadSignals{}
	if ts != nil {
		ts.event, ts.gdbInfo, ts.eventStop = queuedSignal{}, nil, false
		p.sigs().threads[t.tid] = ts
	}
	p.swbps = map[uint64]*swBreakpoint{}
	p.patches = newPatchSet()
	p.forgetLive()
	p.debugRegs = debugRegisters{} // the kernel flushes them on exec
	p.drGen++
	t.drGen = p.drGen
	p.updateTids()
	_ = p.openMem()
	p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP), Exec: true})
}

// handleTrap classifies a SIGTRAP: our int3, a debug-register hit, the end
// of a single-step, or a plain SIGTRAP.
func (p *Process) handleTrap(t *thread) {
	si, err := getSiginfo(t.tid)
	if err != nil {
		p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP)})
		return
	}
	if ev, ok := p.debugRegStop(t, si); ok {
		p.queue(ev)
		return
	}
	if si.softwareBreakpoint() {
		pc, err := getPC(t.tid)
		if err == nil {
			if bp := p.swbps[pc-breakpointPCAdjust]; bp != nil && bp.inserted {
				_ = setPC(t.tid, pc-breakpointPCAdjust)
				p.breakpointHit(t, bp)
				return
			}
			if p.liveTrap(t, pc) {
				return
			}
		}
	}
	p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP)})
}

// breakpointHit handles t stopped at one of our int3s (pc already rewound).
func (p *Process) breakpointHit(t *thread, bp *swBreakpoint) {
	trapEv := StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP), Reason: "swbreak"}
	if !bp.internal || (p.hook == nil && len(p.trapHooks) == 0) || p.inHook {
		if !bp.user {
			trapEv.Reason = ""
		}
		p.queue(trapEv)
		return
	}
	action := TrapResume
	if t.hookDoneAt == bp.addr {
		// Second execution of a trap whose hook already ran for this
		// hit (see hookDoneAt): only gdb's breakpoint matters now.
		t.hookDoneAt = 0
	} else {
		t.hookDoneAt = 0
		st := &Stopped{p: p, t: t, addr: bp.addr}
		p.inHook = true
		action = p.runTrapHooks(st)
		p.inHook = false
	}
	if p.threads[t.tid] != t || p.exitEvent != nil {
		return // the thread vanished during the hook
	}
	pc, err := getPC(t.tid)
	if err != nil {
		return
	}
	cur := p.swbps[bp.addr]
	userHere := cur != nil && cur.user && cur.inserted
	switch {
	case userHere && pc == bp.addr:
		p.queue(trapEv)
	case action == TrapReport:
		if !userHere || pc != bp.addr {
			trapEv.Reason = ""
		}
		p.queue(trapEv)
	default:
		if pc == bp.addr && cur != nil && cur.inserted {
			t.hookedAt = bp.addr
			if p.stopping {
				// Everything is being stopped anyway: whoever resumes
				// the thread steps it over the trap first.
				return
			}
			if p.displacedStepOff(t, true) {
				return // out of line, the others running on
			}
			// Step over the trap in place. The int3 is out of memory
			// meanwhile, so stop the other threads first lest they run
			// through it unseen, and let them go again afterwards.
			p.stopAll()
			p.resumeAfterHooks()
			return
		}
		if t.step {
			// gdb's single-step ended inside the trap's handling.
			p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP)})
			return
		}
		p.resumeThread(t)
	}
}

// recordReportedStopPC arms the step-over for the thread whose breakpoint
// stop is being reported. Other threads stay as they were: a thread that
// was merely stopped (SIGSTOP) on a breakpoint address, or whose hit gdb
// never saw (gdb removed the breakpoint meanwhile), must execute the
// breakpoint when resumed, so gdb sees the hit. A thread is disarmed as
// soon as it runs (rawResume).
func (p *Process) recordReportedStopPC(ev StopEvent) {
	if t := p.threads[ev.Tid]; t != nil && t.hookDoneAt != 0 {
		if pc, err := getPC(t.tid); err != nil || pc != t.hookDoneAt {
			t.hookDoneAt = 0 // it went elsewhere: a later arrival is a new hit
		}
	}
	if ev.Kind != SignalStop || ev.Reason != "swbreak" {
		return
	}
	if t := p.threads[ev.Tid]; t != nil && t.stopped && !t.zombie {
		if pc, err := getPC(t.tid); err == nil {
			t.stopPC = pc
		}
	}
}

// recordStopPCs notes every stopped thread's pc: Resume steps a thread
// over a breakpoint only if it is still where it stopped.
func (p *Process) recordStopPCs() {
	for _, t := range p.threads {
		if t.stopped && !t.zombie && !t.rehit {
			if pc, err := getPC(t.tid); err == nil {
				t.stopPC = pc
			}
		}
	}
}

// resumeAfterHooks lets every thread that should run go again after an
// internal stop of all threads: first the threads left on an internal
// trap whose hook already ran are stepped over it, one at a time with
// everything stopped, then all are resumed.
func (p *Process) resumeAfterHooks() {
	tids := p.sortedTids()
	for _, tid := range tids {
		t := p.threads[tid]
		if t == nil || t.hookedAt == 0 {
			continue
		}
		addr := t.hookedAt
		t.hookedAt = 0
		if !t.stopped || !t.resumed || p.hasPending(t.tid) {
			continue
		}
		bp := p.swbps[addr]
		if pc, err := getPC(t.tid); err != nil || pc != addr || bp == nil || !bp.inserted {
			continue
		}
		if err := p.stepOverBreakpoint(t, bp, queuedSignal{}); err != nil {
			continue
		}
		if t.step && p.threads[tid] == t && !p.hasPending(tid) {
			p.queue(StopEvent{Kind: SignalStop, Tid: tid, Signal: int(unix.SIGTRAP)})
		}
	}
	for _, tid := range tids {
		if t := p.threads[tid]; t != nil {
			p.resumeThread(t)
		}
	}
}

// stopAll stops every thread (SIGSTOP, swallowed on arrival) and waits
// until each is in a ptrace-stop or gone.
func (p *Process) stopAll() {
	p.stopAllCalls++
	p.handleStashed()
	p.stopping = true
	defer func() { p.stopping = false }()
	for _, t := range p.threads {
		if !t.stopped && !t.zombie && !t.sigstopExpected {
			if err := unix.Tgkill(p.pid, t.tid, unix.SIGSTOP); err == nil {
				t.sigstopExpected = true
			}
		}
	}
	deadline := time.Now().Add(20 * time.Millisecond)
	for p.anyRunning() && p.exitEvent == nil {
		wpid, ws, err := wait4(-1, unix.WNOHANG)
		if err != nil {
			if errors.Is(err, unix.ECHILD) {
				// Nothing left to wait for: everything is gone.
				for _, t := range p.threads {
					t.zombie = true
				}
				return
			}
			return
		}
		if wpid > 0 {
			p.handleStatus(wpid, ws)
			continue
		}
		select {
		case <-p.sigchld:
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			// A thread that never stops may be a zombie (an exited
			// leader waiting for the others) or already dead.
			for _, t := range p.threads {
				if t.stopped || t.zombie {
					continue
				}
				switch st := threadState(p.pid, t.tid); {
				case st == 'Z' || st == 'X':
					t.zombie = true
				case st != 't' && st != 'T' && t.sigstopExpected && !sigstopPending(p.pid, t.tid):
					// Our SIGSTOP was discarded (a SIGCONT came in
					// between): send another.
					_ = unix.Tgkill(p.pid, t.tid, unix.SIGSTOP)
				}
			}
			p.updateTids()
			deadline = time.Now().Add(20 * time.Millisecond)
		}
	}
}

// threadState returns the state letter of /proc/PID/task/TID/stat, or 'X'
// when the thread is gone.
func threadState(pid, tid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 'X'
	}
	return statState(string(b))
}

// sigstopPending reports whether SIGSTOP is pending for the thread or its
// process (/proc/PID/task/TID/status SigPnd and ShdPnd). Unknown counts as
// pending.
func sigstopPending(pid, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return true
	}
	pnd, ok1 := statusSigMask(string(b), "SigPnd")
	shd, ok2 := statusSigMask(string(b), "ShdPnd")
	if !ok1 || !ok2 {
		return true
	}
	bit := uint64(1) << (unix.SIGSTOP - 1)
	return (pnd|shd)&bit != 0
}

// statusSigMask parses a signal mask line ("SigPnd:\t0000000000040000")
// of /proc/.../status.
func statusSigMask(status, field string) (uint64, bool) {
	for _, line := range strings.Split(status, "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64)
		if err != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// statState extracts the state letter from a /proc stat line ("pid (comm)
// S ..."; comm may contain spaces and parentheses), or 'X' if malformed.
func statState(s string) byte {
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) || s[i+1] != ' ' {
		return 'X'
	}
	return s[i+2]
}

// serviceWaiter answers a pending Wait when there is something to report.
func (p *Process) serviceWaiter() {
	if p.waiter == nil {
		return
	}
	var ev StopEvent
	switch {
	case p.exitEvent != nil:
		ev = *p.exitEvent
	case p.nonStop:
		var ok bool
		if ev, ok = p.nextNonStopEvent(); !ok {
			return
		}
	default:
		p.dropStaleEvents()
		if p.reportable() < 0 {
			if p.anyResumed() {
				return
			}
			ev = StopEvent{Kind: NoResumed}
		} else {
			p.stopAll()
			if p.exitEvent != nil {
				ev = *p.exitEvent
				break
			}
			p.dropStaleEvents()
			i := p.reportable()
			if i < 0 {
				// Every queued event went stale while stopping: run on.
				p.resumeAfterHooks()
				return
			}
			ev = p.pending[i]
			p.pending = append(p.pending[:i], p.pending[i+1:]...)
			for _, t := range p.threads {
				t.resumed = false
			}
			p.recordReportedStopPC(ev)
			p.noteReported(ev)
			p.markForkReported(ev)
			p.consumeInterrupt()
		}
	}
	p.runningFlag.Store(false)
	p.waiter <- waitResult{ev: ev}
	p.waiter = nil
}

// reportable returns the index in p.pending of the first event of a
// thread gdb resumed, or -1. The events of threads gdb keeps stopped wait
// until it resumes them, as with gdbserver: gdb stepping one thread over
// a breakpoint (vCont;s:TID) expects to hear of that thread only, and a
// queued stop of another thread there trips an assertion in gdb
// (gdb.threads/signal-while-stepping-over-bp-other-thread.exp).
func (p *Process) reportable() int {
	for i, ev := range p.pending {
		if t := p.threads[ev.Tid]; t != nil && t.resumed {
			return i
		}
	}
	return -1
}

func (p *Process) anyResumed() bool {
	for _, t := range p.threads {
		if t.resumed && !t.zombie {
			return true
		}
	}
	return false
}

// consumeInterrupt turns an interrupt SIGSTOP still in flight into an
// expected one, so it is swallowed instead of reported later.
func (p *Process) consumeInterrupt() {
	p.intrMu.Lock()
	defer p.intrMu.Unlock()
	if p.intrTid != 0 {
		if t := p.threads[p.intrTid]; t != nil {
			t.sigstopExpected = true
		}
		p.intrTid = 0
	}
}

// dropStaleEvents discards queued breakpoint stops whose breakpoint gdb
// removed meanwhile; those threads simply run on when resumed (in
// non-stop mode at once: runOnAfterDrop).
func (p *Process) dropStaleEvents() {
	kept := p.pending[:0]
	var dropped []*thread
	defer func() {
		for _, t := range dropped {
			p.runOnAfterDrop(t)
		}
	}()
	for _, ev := range p.pending {
		if ev.Reason == "swbreak" {
			pc, err := getPC(ev.Tid)
			if err == nil {
				if bp := p.swbps[pc]; bp == nil || !bp.user {
					if t := p.threads[ev.Tid]; t != nil && bp != nil && bp.internal {
						// The hook ran for this hit already, and the
						// stop was queued for gdb's breakpoint, now
						// removed: when the thread executes the trap
						// again, report gdb's breakpoint if it is
						// back, without running the hook twice.
						t.hookDoneAt = pc
					} else if t != nil {
						// gdb never saw this hit (it removed the
						// breakpoint meanwhile, typically to step
						// another thread over it). The pc is back on
						// the breakpoint address: when gdb reinserts
						// it, the thread must hit it again, not be
						// stepped over it as if the hit was reported.
						t.stopPC, t.rehit = 0, true
					}
					if t := p.threads[ev.Tid]; t != nil {
						dropped = append(dropped, t)
					}
					continue
				}
			}
		}
		kept = append(kept, ev)
	}
	p.pending = kept
}

// Wait blocks until a resumed thread has a reportable event and returns
// it with every thread stopped (all-stop). It returns Exited or Killed
// once the process is gone, and NoResumed when no thread was resumed.
// Events beyond the first stay queued for later Waits (and for the
// resumption of their thread).
func (p *Process) Wait() (StopEvent, error) {
	wait, err := p.StartWait()
	if err != nil {
		return StopEvent{}, err
	}
	return wait()
}

// StartWait begins a Wait at once and returns the function that waits
// for its result (Wait is both). A CancelWait made after StartWait
// returns ends that wait: a caller that waits on another goroutine
// starts the wait on its own first, or a CancelWait made before that
// goroutine ran would find no wait to end, and the wait would go on
// until some event came (none may: gotpstub hung so when every thread
// was stopped, gdb.threads/next-fork-other-thread.exp).
func (p *Process) StartWait() (wait func() (StopEvent, error), err error) {
	ch := make(chan waitResult, 1)
	err = p.do(func() error {
		if p.waiter != nil {
			return errors.New("inferior: concurrent Wait")
		}
		p.waiter = ch
		return nil
	})
	if err != nil {
		return nil, err
	}
	return func() (StopEvent, error) { return p.waitResult(ch) }, nil
}

// waitResult waits for the result of the wait whose channel is ch.
func (p *Process) waitResult(ch chan waitResult) (StopEvent, error) {
	select {
	case r := <-ch:
		return r.ev, r.err
	case <-p.done:
		select {
		case r := <-ch:
			return r.ev, r.err
		default:
			return StopEvent{}, ErrClosed
		}
	}
}

// Resume resumes threads with vCont semantics: each thread takes the
// first action that names it (Tid -1 names every thread not named
// earlier); threads no action names stay stopped. A thread sitting on one
// of our int3s is first stepped over it alone. When an event of a thread
// it resumes is still queued nothing is resumed and the next Wait reports
// one at once; events of threads that stay stopped wait for them to be
// resumed.
func (p *Process) Resume(actions []Action) error {
	return p.do(func() error { return p.resume(actions) })
}

func (p *Process) resume(actions []Action) error {
	if p.exitEvent != nil {
		return ErrExited
	}
	for _, a := range actions {
		if a.Tid > 0 && p.threads[a.Tid] == nil {
			return fmt.Errorf("resume: thread %d: %w", a.Tid, ErrNoThread)
		}
	}
	if p.nonStop {
		return p.resumeNonStop(actions)
	}
	tids := p.sortedTids()
	var toRun []*thread
	for _, tid := range tids {
		t := p.threads[tid]
		t.resumed, t.step, t.sig = false, false, 0
		if a, named := ActionFor(actions, tid); named && !a.Stop && !t.zombie {
			t.resumed, t.step, t.sig = true, a.Step, a.Signal
			p.noteResumeSignal(t)
			toRun = append(toRun, t)
		}
	}
	if len(toRun) == 0 {
		return nil
	}
	p.runningFlag.Store(true)
	p.dropStaleEvents()
	if p.reportable() >= 0 {
		p.deferSignals(toRun)
		return nil
	}
	// Step threads off our breakpoints one at a time, the others stopped.
	for _, t := range toRun {
		if err := p.stepOffBreakpoint(t); err != nil {
			return err
		}
		if p.exitEvent != nil {
			return nil
		}
	}
	if p.reportable() >= 0 {
		p.deferSignals(toRun)
		return nil
	}
	for _, t := range toRun {
		if p.threads[t.tid] != t || !t.stopped {
			continue
		}
		if err := p.resumeDelivering(t); err != nil {
			if isGone(err) {
				continue
			}
			return fmt.Errorf("resume: %w", err)
		}
	}
	return nil
}

// onReportedBreakpoint returns the breakpoint a stopped thread about to
// run must first be stepped over: one whose hit was reported (or whose
// hook ran) and which the thread has not left. A thread gdb moved onto a
// breakpoint (jump) gets none: it is to hit it, as with gdbserver.
func (p *Process) onReportedBreakpoint(t *thread) (*swBreakpoint, uint64) {
	if !t.stopped {
		return nil, 0
	}
	pc, err := getPC(t.tid)
	if err != nil {
		return nil, 0
	}
	bp := p.swbps[pc]
	if bp == nil || !bp.inserted || (pc != t.stopPC && pc != t.hookedAt) {
		return nil, 0
	}
	return bp, pc
}

// stepOffBreakpoint steps t, about to be resumed, over the breakpoint it
// stopped on, alone; every other thread must be stopped meanwhile.
func (p *Process) stepOffBreakpoint(t *thread) error {
	bp, pc := p.onReportedBreakpoint(t)
	if bp == nil {
		return nil
	}
	// gdb's signal goes with the step over, unless older signals
	// are queued for the thread: they all wait for the real
	// resumption (delivered during the step, their handler
	// would return onto the breakpoint and hit it a second time).
	var qs queuedSignal
	if !p.signalsQueued(t) {
		qs = p.takeGDBSignal(t)
	}
	if err := p.stepOverBreakpoint(t, bp, qs); err != nil {
		if errors.Is(err, ErrNoThread) || errors.Is(err, unix.ESRCH) {
			return nil // it died: Wait reports what happened
		}
		return fmt.Errorf("resume: stepping thread %d over the breakpoint at %#x: %w", t.tid, pc, err)
	}
	if p.threads[t.tid] == t && t.step && !p.hasPending(t.tid) {
		// The step over the breakpoint was the step gdb asked for.
		p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP)})
	}
	return nil
}

// deferSignals keeps the signals gdb asked to deliver to threads that
// stay stopped (an event is queued) for their next real resumption.
func (p *Process) deferSignals(threads []*thread) {
	for _, t := range threads {
		p.deferGDBSignal(t)
	}
}

// stepOverBreakpoint removes bp, single-steps t alone (delivering qs),
// and puts bp back. Any event the step produced other than its own trap
// is queued.
func (p *Process) stepOverBreakpoint(t *thread, bp *swBreakpoint, qs queuedSignal) error {
	if err := p.putOriginal(bp); err != nil {
		return err
	}
	bp.inserted = false
	_, err := p.stepThread(t, qs)
	if cur := p.swbps[bp.addr]; cur == bp && p.exitEvent == nil {
		if ierr := p.putBreakpoint(bp); ierr == nil {
			bp.inserted = true
		} else if err == nil {
			err = ierr
		}
	}
	return err
}

// stepThread single-steps t alone (delivering qs) and waits for the step
// to finish. It returns true when the step completed; a signal that
// arrived instead is queued as an event (and false returned), unless gdb
// passes it silently: it is then kept for the thread's next real
// resumption and the step goes on. The thread's exit is recorded.
func (p *Process) stepThread(t *thread, qs queuedSignal) (bool, error) {
	if err := p.rawResume(t, true, qs); err != nil {
		return false, err
	}
	for {
		ws, err := p.waitThread(t)
		if err != nil {
			if errors.Is(err, unix.ECHILD) {
				p.threadGone(t)
				return false, fmt.Errorf("thread %d: %w", t.tid, ErrNoThread)
			}
			return false, fmt.Errorf("waiting for thread %d: %w", t.tid, err)
		}
		if ws.Exited() || ws.Signaled() {
			p.handleStatus(t.tid, ws)
			return false, fmt.Errorf("thread %d exited while stepping: %w", t.tid, ErrNoThread)
		}
		if !ws.Stopped() {
			continue
		}
		t.stopped = true
		p.noteStopKind(t, isEventStop(ws))
		s := ws.StopSignal()
		switch {
		case s == unix.SIGSTOP && p.takeInterrupt(t):
			// The interrupt's SIGSTOP, possibly merged with one of
			// ours (handleStop): reported.
			p.queueInterrupt(t)
			return false, nil
		case s == unix.SIGSTOP && t.sigstopExpected:
			t.sigstopExpected = false
			p.threadStarted(t)
		case s == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_CLONE:
			saved := p.stopping
			p.stopping = true // keep the new thread stopped for now
			p.handleEvent(t, unix.PTRACE_EVENT_CLONE)
			p.stopping = saved
		case s == unix.SIGTRAP && (ws.TrapCause() == unix.PTRACE_EVENT_FORK || ws.TrapCause() == unix.PTRACE_EVENT_VFORK):
			if p.onForkEvent(t, ws.TrapCause() == unix.PTRACE_EVENT_VFORK) {
				// Reported: the step goes on at the next resumption.
				return false, nil
			}
		case s == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_VFORK_DONE:
			if p.onVForkDone(t) {
				return false, nil
			}
		case s == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXEC:
			p.onExec(t)
			return false, nil
		case s == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXIT:
			// It exits instead of completing the step (exit hook set).
			p.exitEventStop(t)
			if t.tid == p.pid && len(p.threads) > 1 {
				// The leader's exit status may be held back until the
				// other threads, stopped meanwhile, are gone: do not
				// wait for it here; it is collected like any other
				// status (or the leader found a zombie).
				return false, fmt.Errorf("thread %d exited while stepping: %w", t.tid, ErrNoThread)
			}
			continue // its exit status comes next
		case s == unix.SIGTRAP && ws.TrapCause() != 0:
		case s == unix.SIGTRAP|0x80:
		case s == unix.SIGTRAP:
			si, err := getSiginfo(t.tid)
			if err == nil {
				if ev, ok := p.debugRegStop(t, si); ok && ev.Reason != "" {
					p.queue(ev)
					return false, nil
				}
			}
			return true, nil
		case (s == unix.SIGSEGV || s == unix.SIGBUS) && p.fixFault(t, int(s)):
			// The faulting instruction was abandoned for the hook's
			// recovery address: the step is over.
			return true, nil
		default:
			if p.holdSignalWhileStepping(t, int(s)) {
				break // delivered at the next real resumption
			}
			p.queueSignalStop(t, int(s))
			return false, nil
		}
		if err := p.rawResume(t, true, queuedSignal{}); err != nil {
			return false, err
		}
	}
}

// leaderSpinPolls bounds waitThread's busy polling of the leader before
// it starts sleeping between polls (each poll is a wait4 and a
// sched_yield, about a microsecond).
const leaderSpinPolls = 500

// schedYield gives the CPU away for a moment, so a tracee on the same core
// can run while we poll for its status.
func schedYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// waitThread waits for the next status of t alone. The leader's exit is
// reported only once every other thread has been reaped, so while it
// exits the other threads' exits are collected meanwhile.
func (p *Process) waitThread(t *thread) (unix.WaitStatus, error) {
	if p.live.flushing || p.nonStop && p.live.enabled && t.tid == p.pid && p.othersRunning(t) {
		// Threads meeting a flush's int3s are sent on meanwhile, and
		// the leader is not polled with yields that cost the stub a
		// time slice each while the other threads keep the CPUs busy.
		return p.waitLive(t)
	}
	if t.tid != p.pid || len(p.threads) == 1 {
		_, ws, err := wait4(t.tid, 0)
		return ws, err
	}
	// A blocking wait4 on the leader could hang for good: if another
	// thread ends the process meanwhile, the leader's exit is held back
	// until every other thread is reaped. So poll. A single-step or a
	// stop normally lands within microseconds, so first poll with only a
	// sched_yield between tries, and back off to sleeping only if that
	// fails: sleeping at once made every trap-tracepoint hit in the
	// leader of a multi-threaded program cost ~0.5 ms instead of ~80 µs.
	for i := 0; i < leaderSpinPolls; i++ {
		wpid, ws, err := wait4(t.tid, unix.WNOHANG)
		if err != nil || wpid == t.tid {
			return ws, err
		}
		schedYield()
	}
	delay := 10 * time.Microsecond
	for {
		wpid, ws, err := wait4(t.tid, unix.WNOHANG)
		if err != nil || wpid == t.tid {
			return ws, err
		}
		if st := threadState(p.pid, t.tid); st == 'Z' || st == 'X' {
			for _, o := range p.threads {
				if o == t {
					continue
				}
				if w, ows, err := wait4(o.tid, unix.WNOHANG); err == nil && w == o.tid {
					p.handleStatus(o.tid, ows)
				}
			}
		}
		time.Sleep(delay)
		if delay < time.Millisecond {
			delay *= 2
		}
	}
}

// Interrupt stops the running process: the next Wait reports a SIGINT
// stop of the thread group leader, or of another running thread when the
// leader is not running (the SIGSTOP used is never delivered).
// It is safe from any goroutine at any time and does nothing when no
// thread is running.
func (p *Process) Interrupt() {
	if !p.runningFlag.Load() {
		return
	}
	p.intrMu.Lock()
	defer p.intrMu.Unlock()
	if p.intrTid != 0 {
		return // one is already on its way
	}
	// The leader if it runs, else the first running thread: a zombie
	// leader or one gdb left stopped (vCont;c:OTHER) would never report.
	tids := p.Threads()
	for _, tid := range tids {
		if st := threadState(p.pid, tid); st == 'Z' || st == 'X' || st == 't' || st == 'T' {
			continue
		}
		if unix.Tgkill(p.pid, tid, unix.SIGSTOP) == nil {
			p.intrTid = tid
			return
		}
	}
	// Everything looks stopped (a trap hook may be running): the leader
	// reports once it runs again.
	for _, tid := range tids {
		if unix.Tgkill(p.pid, tid, unix.SIGSTOP) == nil {
			p.intrTid = tid
			return
		}
	}
}

// Kill kills the process with SIGKILL and reaps every thread; a pending
// Wait then returns Killed.
func (p *Process) Kill() error {
	select {
	case <-p.done:
		return ErrClosed
	default:
	}
	if p.gone.Load() {
		return nil // reaped already: the pid may belong to someone else now
	}
	if err := unix.Kill(p.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %d: %w", p.pid, err)
	}
	return p.do(func() error {
		p.releaseForks(true)
		p.reapKilled()
		return nil
	})
}

// reapKilled collects the exits of a process sent SIGKILL.
func (p *Process) reapKilled() {
	for p.exitEvent == nil {
		wpid, ws, err := wait4(-1, 0)
		if err != nil {
			p.setExited(StopEvent{Kind: Killed, Tid: p.pid, Signal: int(unix.SIGKILL)})
			break
		}
		if t := p.threads[wpid]; t != nil && (ws.Exited() || ws.Signaled()) {
			p.handleStatus(wpid, ws)
		} else if isExitEvent(ws) {
			// The kernel may stop a SIGKILLed thread at
			// PTRACE_EVENT_EXIT (exit hook set): let it go on.
			if t != nil {
				p.exitEventStop(t)
			} else {
				p.releaseExitingThread(wpid)
			}
		}
	}
	// Reap the remaining zombies quietly.
	for {
		if wpid, _, err := wait4(-1, unix.WNOHANG); err != nil || wpid <= 0 {
			break
		}
	}
}

// Detach removes every breakpoint, trap and code patch from memory (the
// memory a patch jumps to is not the package's: it stays), clears the debug
// registers and detaches every thread, passing on signals that were
// queued for gdb (other than SIGSTOP and SIGTRAP). The process keeps
// running.
func (p *Process) Detach() error {
	return p.do(p.detach)
}

func (p *Process) detach() error {
	if p.exitEvent != nil {
		return ErrExited
	}
	err := p.detachThreads()
	p.releaseForks(false)
	p.setExited(StopEvent{Kind: Exited, Tid: p.pid})
	return err
}

// detachThreads is Detach without forgetting the process: every thread is
// detached with our breakpoints, patches and debug registers gone.
func (p *Process) detachThreads() error {
	p.stopAll()
	var firstErr error
	for addr, bp := range p.swbps {
		if bp.inserted {
			if err := p.putOriginal(bp); err != nil && firstErr == nil {
				firstErr = fmt.Errorf("detach: removing the breakpoint at %#x: %w", addr, err)
			}
		}
		delete(p.swbps, addr)
		p.guardUntrap(addr)
	}
	for addr, c := range p.patches.byAddr {
		if err := p.writeRaw(addr, c.orig); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("detach: removing the code patch at %#x: %w", addr, err)
		}
	}
	p.patches = newPatchSet()
	p.debugRegs = debugRegisters{}
	p.drGen++
	sigs := map[int]queuedSignal{}
	for _, ev := range p.pending {
		if ev.Kind == SignalStop && ev.Signal != int(unix.SIGSTOP) && ev.Signal != int(unix.SIGTRAP) && ev.Signal != int(unix.SIGINT) {
			sigs[ev.Tid] = queuedSignal{sig: ev.Signal, info: ev.info}
		}
	}
	for tid, t := range p.threads {
		if _, ok := sigs[tid]; !ok {
			if qs := p.firstQueuedSignal(t); qs.sig != 0 {
				sigs[tid] = qs
			}
		}
	}
	p.pending = nil
	p.consumeInterrupt()
	if err := p.flushWrites(); err != nil {
		firstErr = fmt.Errorf("detach: %w", err)
	}
	for tid, t := range p.threads {
		if t.zombie {
			continue
		}
		_ = p.writeDebugRegs(t)
		if t.sigstopExpected {
			// SIGCONT discards the SIGSTOP still queued.
			_ = unix.Tgkill(p.pid, tid, unix.SIGCONT)
		}
		qs := sigs[tid]
		if qs.info != nil {
			_ = setSiginfo(tid, qs.info)
		}
		if err := ptraceDetach(tid, qs.sig); err != nil && !errors.Is(err, unix.ESRCH) && firstErr == nil {
			firstErr = fmt.Errorf("detach thread %d: %w", tid, err)
		}
	}
	return firstErr
}
