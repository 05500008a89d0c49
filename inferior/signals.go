package inferior

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Signals gdb passes silently.
//
// gdb's `handle SIG nostop noprint pass` (QPassSignals) means the signal
// goes to the program and gdb wants to hear nothing of it. Reporting such
// a signal as a stop would stop every thread (all-stop), wake the server,
// and resume everything again: tens to hundreds of microseconds per signal,
// and every other thread's progress with it. So, like gdbserver, the
// ptrace goroutine hands such a signal straight back to the thread it
// stopped, from the thread's own signal-delivery-stop (PTRACE_CONT with
// the signal: the kernel keeps the siginfo the sender gave it), without
// touching any other thread. Nothing is reported.
//
// Not every signal stop can go straight back:
//   - a thread gdb is single-stepping reports its signals (gdb must see a
//     signal that interrupts its step), as do SIGTRAP, SIGSTOP and the
//     synchronous fault signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS),
//     which an internal single-step would raise again at every retry;
//   - a thread that must stay stopped for now (every thread is being
//     stopped, or it has an event queued for gdb) keeps the signal, with
//     its siginfo, in a queue; so does a thread that stops with a signal in
//     the middle of an internal single-step (a trap tracepoint's displaced
//     step, a step over a breakpoint, an injected system call), which then
//     steps on. Queued signals are delivered, oldest first, at the
//     thread's next real resumptions, their siginfo written back first
//     (PTRACE_SETSIGINFO) since the thread is then in another stop. One
//     resumption delivers one signal: when more are queued, a SIGSTOP of
//     ours makes the thread stop again right after the first is delivered,
//     and the next goes with the resumption from that stop.
//
// A signal that is reported to gdb keeps its siginfo too: when gdb passes
// it back (vCont;C), it is delivered with the siginfo it came with even if
// the thread has been stepped meanwhile, and qXfer:siginfo:read shows it.
// Without that, a signal that arrived during an internal single-step was
// re-injected from the step's SIGTRAP stop and the kernel made up a
// siginfo for it (SI_USER from the tracer): a sigqueue value was lost.
//
// A signal is never injected at a PTRACE_EVENT stop (clone, fork, exec,
// exit), where the kernel ignores it: it stays queued, and a SIGSTOP of
// ours provides a signal-delivery-stop to inject it from.

// queuedSignal is a signal due to a thread, with the siginfo it arrived
// with (nil when unknown: the kernel then makes one up if the thread is
// in another stop).
type queuedSignal struct {
	sig  int
	info *siginfo
}

// threadSignals is one thread's signal bookkeeping.
type threadSignals struct {
	// queue holds the signals to deliver at the thread's next real
	// resumptions, oldest first.
	queue []queuedSignal
	// event is the thread's signal stop last reported to gdb, with its
	// siginfo: gdb passing that signal back delivers it with this
	// siginfo. Cleared when gdb resumes the thread.
	event queuedSignal
	// gdbInfo is the siginfo for the signal gdb's last resumption asked
	// to deliver (thread.sig), when that is the reported one.
	gdbInfo *siginfo
	// eventStop: the thread is in a PTRACE_EVENT stop, where a signal
	// given at resumption is ignored.
	eventStop bool
}

// sigState is a process's signal bookkeeping, owned by its ptrace
// goroutine.
type sigState struct {
	pass    [65]bool // host signals gdb passes silently
	threads map[int]*threadSignals
	// passed counts signals handed straight back (tests).
	passed int
}

// sigs returns p's signal state, creating it on first use. Only p's
// ptrace goroutine calls it.
func (p *Process) sigs() *sigState {
	if p.sigState == nil {
		p.sigState = &sigState{threads: map[int]*threadSignals{}}
	}
	return p.sigState
}

// tsigs returns thread tid's signal bookkeeping, creating it.
func (p *Process) tsigs(tid int) *threadSignals {
	st := p.sigs()
	ts := st.threads[tid]
	if ts == nil {
		ts = &threadSignals{}
		st.threads[tid] = ts
	}
	return ts
}

// lookupTsigs returns thread tid's signal bookkeeping, or nil if it has
// none.
func (p *Process) lookupTsigs(tid int) *threadSignals {
	return p.sigs().threads[tid]
}

// forgetThreadSignals drops tid's bookkeeping (the thread is gone).
func (p *Process) forgetThreadSignals(tid int) {
	delete(p.sigs().threads, tid)
}

// SetPassSignals sets the host signals gdb passes to the program without
// wanting to hear of them (QPassSignals). A thread that stops with one of
// them is resumed with it at once, alone, and nothing is reported (see
// the rules above). The set replaces the previous one; nil clears it.
func (p *Process) SetPassSignals(sigs map[int]bool) {
	_ = p.do(func() error {
		st := p.sigs()
		st.pass = [65]bool{}
		for sig, on := range sigs {
			if on && sig > 0 && sig < len(st.pass) {
				st.pass[sig] = true
			}
		}
		return nil
	})
}

// passable reports whether sig may go straight back to the thread it
// stopped: gdb passes it silently, and it is neither a stop or trap of
// the debugger's nor a synchronous fault a retried step would raise again.
func (st *sigState) passable(sig int) bool {
	switch sig {
	case int(unix.SIGTRAP), int(unix.SIGSTOP), int(unix.SIGKILL),
		int(unix.SIGSEGV), int(unix.SIGBUS), int(unix.SIGILL), int(unix.SIGFPE), int(unix.SIGSYS):
		return false
	}
	return sig > 0 && sig < len(st.pass) && st.pass[sig]
}

// passSignal hands sig, which just stopped t (a signal-delivery-stop while
// running), back to t without reporting anything, if gdb lets it pass
// silently and t is not being stepped by gdb. It reports whether it did.
func (p *Process) passSignal(t *thread, sig int) bool {
	st := p.sigs()
	if !st.passable(sig) || t.step || !t.resumed || p.exitEvent != nil {
		return false
	}
	st.passed++
	ts := st.threads[t.tid]
	if !p.stopping && !p.hasPending(t.tid) && t.sig == 0 && (ts == nil || len(ts.queue) == 0) {
		// The usual case: straight back from the signal's own
		// delivery-stop; the kernel still has its siginfo.
		_ = p.rawResume(t, false, queuedSignal{sig: sig})
		return true
	}
	p.holdSignal(t, sig)
	p.resumeThread(t)
	return true
}

// holdSignal queues sig, which t is stopped with (its signal-delivery-
// stop), with its siginfo, for t's next real resumption.
func (p *Process) holdSignal(t *thread, sig int) {
	qs := queuedSignal{sig: sig}
	if si, err := getSiginfo(t.tid); err == nil && int(si.Signo) == sig {
		qs.info = &si
	}
	ts := p.tsigs(t.tid)
	ts.queue = append(ts.queue, qs)
}

// holdSignalWhileStepping is passSignal for a signal that stopped t in the
// middle of an internal single-step: a signal gdb passes silently is kept
// for t's next real resumption (the step goes on); it reports whether it
// did so.
func (p *Process) holdSignalWhileStepping(t *thread, sig int) bool {
	st := p.sigs()
	if !st.passable(sig) || t.step {
		return false
	}
	st.passed++
	p.holdSignal(t, sig)
	return true
}

// queueSignalStop queues t's signal stop for gdb, with its siginfo.
func (p *Process) queueSignalStop(t *thread, sig int) {
	ev := StopEvent{Kind: SignalStop, Tid: t.tid, Signal: sig}
	if si, err := getSiginfo(t.tid); err == nil && int(si.Signo) == sig {
		ev.info = &si
	}
	p.queue(ev)
}

// noteReported remembers the siginfo of a signal stop Wait returns.
func (p *Process) noteReported(ev StopEvent) {
	if ev.Kind != SignalStop {
		return
	}
	if ev.info == nil {
		if ts := p.lookupTsigs(ev.Tid); ts != nil {
			ts.event = queuedSignal{}
		}
		return
	}
	p.tsigs(ev.Tid).event = queuedSignal{sig: ev.Signal, info: ev.info}
}

// noteResumeSignal records, as resume applies gdb's action to t (t.sig
// set), which siginfo goes with the signal gdb asked for: the reported
// signal's when gdb passes that one back.
func (p *Process) noteResumeSignal(t *thread) {
	ts := p.lookupTsigs(t.tid)
	if ts == nil {
		return
	}
	ts.gdbInfo = nil
	if t.sig != 0 && ts.event.sig == t.sig {
		ts.gdbInfo = ts.event.info
	}
	ts.event = queuedSignal{}
}

// takeGDBSignal returns the signal gdb's last resumption asked to deliver
// to t (with its siginfo when it is the one t reported), and clears it.
func (p *Process) takeGDBSignal(t *thread) queuedSignal {
	if t.sig == 0 {
		return queuedSignal{}
	}
	qs := queuedSignal{sig: t.sig}
	t.sig = 0
	if ts := p.lookupTsigs(t.tid); ts != nil {
		qs.info, ts.gdbInfo = ts.gdbInfo, nil
	}
	return qs
}

// takeSignal returns the signal to deliver at t's next real resumption:
// the oldest queued one; gdb's (from its last resumption) goes after the
// ones queued before it.
func (p *Process) takeSignal(t *thread) queuedSignal {
	ts := p.lookupTsigs(t.tid)
	if ts == nil || len(ts.queue) == 0 {
		return p.takeGDBSignal(t)
	}
	p.deferGDBSignal(t)
	qs := ts.queue[0]
	ts.queue = ts.queue[1:]
	return qs
}

// requeueSignal puts qs back at the head of t's queue (a resumption
// could not deliver it). Without a siginfo of its own it takes the one of
// t's stop if that is qs's signal's.
func (p *Process) requeueSignal(t *thread, qs queuedSignal) {
	if qs.info == nil {
		if si, err := getSiginfo(t.tid); err == nil && int(si.Signo) == qs.sig {
			qs.info = &si
		}
	}
	ts := p.tsigs(t.tid)
	ts.queue = append([]queuedSignal{qs}, ts.queue...)
}

// deferGDBSignal keeps the signal gdb asked to deliver to t, which stays
// stopped (an event is queued), for its next real resumption.
func (p *Process) deferGDBSignal(t *thread) {
	if qs := p.takeGDBSignal(t); qs.sig != 0 {
		ts := p.tsigs(t.tid)
		ts.queue = append(ts.queue, qs)
	}
}

// signalsQueued reports whether signals wait for t's next resumptions.
func (p *Process) signalsQueued(t *thread) bool {
	ts := p.lookupTsigs(t.tid)
	return ts != nil && len(ts.queue) > 0
}

// firstQueuedSignal returns the oldest signal queued for t, or none.
func (p *Process) firstQueuedSignal(t *thread) queuedSignal {
	if ts := p.lookupTsigs(t.tid); ts != nil && len(ts.queue) > 0 {
		return ts.queue[0]
	}
	return queuedSignal{}
}

// resumeDelivering continues or steps t as gdb asked, delivering the next
// signal due to it; when more wait, t is made to stop again at once (a
// SIGSTOP of ours) so that the next goes with the following resumption.
func (p *Process) resumeDelivering(t *thread) error {
	qs := p.takeSignal(t)
	if qs.sig != 0 && p.signalsQueued(t) {
		p.stopSoon(t)
	}
	return p.rawResume(t, t.step, qs)
}

// stopSoon sends t a SIGSTOP of ours (swallowed when it arrives) unless
// one is on its way already.
func (p *Process) stopSoon(t *thread) {
	if t.sigstopExpected || t.zombie {
		return
	}
	if unix.Tgkill(p.pid, t.tid, unix.SIGSTOP) == nil {
		t.sigstopExpected = true
	}
}

// prepareSignal readies the stopped t for a resumption delivering qs and
// returns the signal number to give ptrace: the siginfo qs came with is
// written back, or, at a PTRACE_EVENT stop (which would ignore it), the
// signal is queued again and t made to stop soon, and 0 is returned.
func (p *Process) prepareSignal(t *thread, qs queuedSignal) int {
	ts := p.lookupTsigs(t.tid)
	if ts != nil && ts.eventStop {
		ts.eventStop = false
		if qs.sig != 0 {
			p.requeueSignal(t, qs)
			p.stopSoon(t)
			return 0
		}
	}
	if qs.sig != 0 && qs.info != nil {
		_ = setSiginfo(t.tid, qs.info)
	}
	return qs.sig
}

// noteStopKind records whether t's new stop is a PTRACE_EVENT (or
// syscall) stop.
func (p *Process) noteStopKind(t *thread, event bool) {
	if event {
		p.tsigs(t.tid).eventStop = true
	} else if ts := p.lookupTsigs(t.tid); ts != nil {
		ts.eventStop = false
	}
}

// reportedSiginfo returns the siginfo of the signal stop of t reported to
// gdb, if the package kept it.
func (p *Process) reportedSiginfo(t *thread) (siginfo, bool) {
	if ts := p.lookupTsigs(t.tid); ts != nil && ts.event.sig != 0 && ts.event.info != nil {
		return *ts.event.info, true
	}
	return siginfo{}, false
}

// PassedSignals returns how many signals were handed straight back to
// their thread (or kept for it) without being reported.
func (p *Process) PassedSignals() int {
	n := 0
	_ = p.do(func() error { n = p.sigs().passed; return nil })
	return n
}

// setSiginfo writes tid's siginfo (PTRACE_SETSIGINFO).
func setSiginfo(tid int, si *siginfo) error {
	return ptracePtr(unix.PTRACE_SETSIGINFO, tid, 0, unsafe.Pointer(si))
}
