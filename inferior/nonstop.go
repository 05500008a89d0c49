package inferior

import (
	"math/rand/v2"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"gotpstub/prio"
)

// Non-stop mode (gdb's QNonStop:1): each thread is stopped and resumed on
// its own. Wait reports one thread's event and leaves the others as they
// are; Resume changes only the threads its actions name, and a Stop
// action stops a running thread, which is then reported with signal 0.
// Where the package must have every thread stopped for a moment (a step
// over one of our int3s, a step in place over an internal trap, Pause)
// it stops the running ones and lets them go again afterwards; threads gdb
// keeps stopped are never resumed by it.

// SetNonStop switches between all-stop (the default) and non-stop mode.
func (p *Process) SetNonStop(on bool) error {
	return p.do(func() error {
		p.nonStop = on
		p.nonStopFlag.Store(on)
		if on {
			p.startStatusWaiter()
		}
		p.tracerRealtime(on)
		return nil
	})
}

// tracerRealtime puts the ptrace thread in the real-time class for
// non-stop mode (on) or takes it out. Raised (nice -10) only, a ptrace
// thread woken by a stopped thread's status waited for the CPU a
// program's thread held, up to the scheduler's next tick: the kernel's
// scheduler trace (e2e's TestNonStopTraceWhileRunning) showed it
// runnable for 4-5 ms on a CPU running a thread of the program's while
// a thread stopped at an int3 waited for it. It blocks when it has
// nothing to do; a flush made it real-time only for its own time.
func (p *Process) tracerRealtime(on bool) {
	switch {
	case on && p.tracerRT == nil:
		p.tracerRT = prio.Realtime(p.tracerTid)
	case !on && p.tracerRT != nil:
		p.tracerRT()
		p.tracerRT = nil
	}
}

// ResumedThreads returns the threads gdb has running: resumed, and no
// stop of theirs reported since (in non-stop mode the others are stopped
// as far as gdb knows).
func (p *Process) ResumedThreads() map[int]bool {
	r := map[int]bool{}
	_ = p.do(func() error {
		for tid, t := range p.threads {
			if t.resumed {
				r[tid] = true
			}
		}
		return nil
	})
	return r
}

// CancelWait ends a pending Wait with ErrWaitCancelled, unless it has
// found its event already (it then returns that event). Afterwards no
// event is on its way to a Wait caller: in non-stop mode a caller about
// to resume threads first takes the event a Wait may have found, lest
// it resume, unaware, a thread whose stop it has yet to hear of.
func (p *Process) CancelWait() {
	_ = p.do(func() error {
		if p.waiter != nil {
			p.waiter <- waitResult{err: ErrWaitCancelled}
			p.waiter = nil
		}
		return nil
	})
}

// ReportAllStopped has every thread, all stopped (just attached), count
// as running with a stop of signal 0 to report, one for each thread: in
// non-stop mode gdb hears of an attached program's threads stopping that
// way, as it does from gdbserver.
func (p *Process) ReportAllStopped() error {
	return p.do(func() error {
		for _, tid := range p.sortedTids() {
			t := p.threads[tid]
			if !t.stopped || t.resumed || t.zombie || p.hasPending(tid) {
				continue
			}
			t.resumed = true
			p.queue(StopEvent{Kind: SignalStop, Tid: tid})
		}
		return nil
	})
}

// maxDrain bounds the statuses one non-stop drain collects, so that
// threads that keep stopping cannot hold the ptrace goroutine.
const maxDrain = 256

// drainAll collects the statuses available, reportable or not: in
// non-stop mode every thread's event must get its turn (fairness; see
// nextNonStopEvent), and no stop of everything follows a report.
//
// Every status there is is collected before any is handled: wait4(-1)
// finds the tracees in the same order every time, so handling each as it
// came let the first threads of a hot loop through a trap tracepoint,
// back at its int3 within microseconds of being resumed, be collected
// again and again ahead of the last one: the kernel's scheduler trace
// (e2e's TestNonStopTraceWhileRunning, nine threads through a trap at a
// ret) showed the oldest thread stopped for up to 150 ms. Rounds follow
// until one finds nothing or maxDrain statuses are handled. The statuses
// collected wait in the stash, where a handler that waits for other
// threads to stop (stopAll, relocateAll) finds them: kept aside, they
// were lost to it, and it waited for ever for threads already stopped.
func (p *Process) drainAll() {
	for n := 0; n < maxDrain; {
		got := 0
		for ; n < maxDrain; n++ {
			wpid, ws, err := wait4(-1, unix.WNOHANG)
			if err != nil || wpid <= 0 {
				break
			}
			p.live.stash = append(p.live.stash, stashedStatus{wpid, ws})
			got++
		}
		if got == 0 {
			return
		}
		p.handleStashed()
	}
}

// nextNonStopEvent takes the next reportable event off the queue (the
// thread it stopped is then stopped for gdb too), or NoResumed when no
// thread runs; ok is false while threads run and nothing is to report.
func (p *Process) nextNonStopEvent() (ev StopEvent, ok bool) {
	p.dropStaleEvents()
	i := p.fairReportable()
	if i < 0 {
		if p.anyResumed() {
			return StopEvent{}, false
		}
		return StopEvent{Kind: NoResumed}, true
	}
	ev = p.pending[i]
	p.pending = append(p.pending[:i], p.pending[i+1:]...)
	if t := p.threads[ev.Tid]; t != nil {
		// Reporting this event answers a stop request too; a SIGSTOP
		// still on its way is swallowed (sigstopExpected).
		ev.StopRequested = t.stopRequested
		t.resumed, t.stopRequested = false, false
	}
	p.recordReportedStopPC(ev)
	p.noteReported(ev)
	p.markForkReported(ev)
	return ev, true
}

// fairReportable picks one of the reportable events at random, as
// gdbserver does: a thread that keeps stopping (stepping, say) must not
// starve the others (gdb.threads/non-stop-fair-events.exp).
func (p *Process) fairReportable() int {
	var idx []int
	for i, ev := range p.pending {
		if t := p.threads[ev.Tid]; t != nil && t.resumed {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return -1
	}
	return idx[rand.IntN(len(idx))]
}

// runOnAfterDrop handles, in non-stop mode, a thread whose queued event
// went stale (dropStaleEvents): nothing else would resume it, so it runs
// on, unless gdb asked for it to stop, which is then reported.
func (p *Process) runOnAfterDrop(t *thread) {
	if !p.nonStop || p.threads[t.tid] != t || p.hasPending(t.tid) {
		return
	}
	if t.stopRequested && t.stopped {
		p.stopAsRequested(t)
		return
	}
	p.resumeThread(t)
}

// resumeNonStop applies actions to the threads they name, leaving the
// others as they are: a running thread named by a continue or step runs
// on unchanged, a stopped one named by a Stop stays stopped.
func (p *Process) resumeNonStop(actions []Action) error {
	var toRun []*thread
	for _, tid := range p.sortedTids() {
		t := p.threads[tid]
		a, named := ActionFor(actions, tid)
		switch {
		case !named || t.zombie:
		case a.Stop:
			p.requestStop(t)
		case !t.resumed:
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
	stepOver := false
	for _, t := range toRun {
		if p.hasPending(t.tid) {
			p.deferGDBSignal(t) // its event is reported first
			continue
		}
		if bp, _ := p.onReportedBreakpoint(t); bp != nil && !p.displacedStepOff(t, false) {
			stepOver = true
		}
	}
	if stepOver {
		// The breakpoint is out of memory during the step: the other
		// threads must not run through it meanwhile.
		p.stopAll()
		for _, t := range toRun {
			if p.hasPending(t.tid) {
				continue
			}
			if p.displacedStep(t, false) {
				// Out of line after all: with every thread stopped
				// the stepper could prepare it (its slot, once).
				p.afterDisplacedStep(t)
				continue
			}
			if err := p.stepOffBreakpoint(t); err != nil {
				p.resumeAfterHooks()
				return err
			}
			if p.exitEvent != nil {
				return nil
			}
		}
		p.resumeAfterHooks()
		return nil
	}
	for _, t := range toRun {
		p.resumeThread(t)
	}
	return nil
}

// ActionFor returns the action of actions that applies to thread tid:
// the first naming it, Tid -1 or 0 naming every thread (vCont's rule).
func ActionFor(actions []Action, tid int) (Action, bool) {
	for _, a := range actions {
		if a.Tid == tid || a.Tid == -1 || a.Tid == 0 {
			return a, true
		}
	}
	return Action{}, false
}

// requestStop stops a thread gdb has running and has its stop reported
// with signal 0; a thread gdb sees stopped already is left alone.
func (p *Process) requestStop(t *thread) {
	switch {
	case !t.resumed:
		// Stopped for gdb already.
	case p.hasPending(t.tid):
		// An event of it is to be reported: that report answers the
		// request (StopRequested), even one the caller would otherwise
		// resume past silently.
		t.stopRequested = true
	case t.stopped:
		p.stopAsRequested(t)
	default:
		t.stopRequested = true
		p.stopSoon(t)
	}
}

// stopAsRequested queues the signal-0 stop gdb's vCont;t asked for.
func (p *Process) stopAsRequested(t *thread) {
	t.stopRequested = false
	p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: 0})
}

// Pause stops every running thread until release is called, so that the
// caller can change code no thread may execute half-changed (jumps put
// in or taken out while gdb has threads running in non-stop mode). In
// all-stop mode, with every thread stopped, it stops nothing. Events met
// while stopping stay queued for Wait; release resumes the threads gdb
// has running that have none. It returns how long the pause took.
func (p *Process) Pause() (release func() time.Duration) {
	start := time.Now()
	stopped := false
	_ = p.do(func() error {
		p.paused++
		if p.anyRunning() {
			p.stopAll()
			stopped = true
		}
		return nil
	})
	return func() time.Duration {
		_ = p.do(func() error {
			if p.paused--; p.paused == 0 && stopped {
				_ = p.flushWrites()
				p.resumeAfterHooks()
			}
			return nil
		})
		return time.Since(start)
	}
}

// sortedTids lists the tracked threads in ascending order.
func (p *Process) sortedTids() []int {
	tids := make([]int, 0, len(p.threads))
	for tid := range p.threads {
		tids = append(tids, tid)
	}
	sort.Ints(tids)
	return tids
}
