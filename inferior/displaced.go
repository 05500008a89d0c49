package inferior

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Displaced steps over breakpoints in non-stop mode.
//
// A thread resumed from a breakpoint it stopped on must first run the
// instruction the int3 replaced. In place, that means taking the int3
// out for one single-step, and every other thread must be stopped
// meanwhile (one could run through the breakpoint unseen): in non-stop
// mode the whole program pauses for each such resumption. With a
// DisplacedStepper (package trapfallback's) the instruction runs out of
// line instead, relocated to a scratch slot, with the int3 left in
// memory and the other threads running on.

// DisplacedStepper executes, for the thread of st, the instruction a
// software breakpoint replaced at addr out of line: the breakpoint stays
// in memory and the thread's pc ends after that instruction (or at its
// branch target). It returns false, having run nothing, when it cannot
// (an instruction it does not relocate, or a scratch slot it could only
// map with every thread stopped); the step is then made in place.
//
// A stepper that could prepare the step only with every thread stopped
// (mapping its first scratch slot near addr injects a system call)
// returns ErrNeedStop, having run nothing; after a breakpoint's hook it
// is then called again with every thread stopped, once.
type DisplacedStepper func(st *Stopped, addr uint64) (bool, error)

// ErrNeedStop is a DisplacedStepper's answer when it can prepare the
// step only with every thread stopped.
var ErrNeedStop = errors.New("displaced step: every thread must be stopped to prepare it")

// SetDisplacedStepper installs f for the step-overs of non-stop
// resumptions.
func (p *Process) SetDisplacedStepper(f DisplacedStepper) {
	_ = p.do(func() error {
		p.displacer = f
		return nil
	})
}

// displacedStepOff steps t, about to be resumed from the breakpoint it
// stopped on, over it out of line and resumes it (or queues the stop of
// the step gdb asked for), the other threads running on. It reports
// whether it did; if not, the caller steps t in place. mayStop: see
// displacedStep.
func (p *Process) displacedStepOff(t *thread, mayStop bool) bool {
	if !p.displacedStep(t, mayStop) {
		return false
	}
	p.afterDisplacedStep(t)
	p.resumeThread(t)
	return true
}

// afterDisplacedStep queues the stop of the step gdb asked for, when the
// step over the breakpoint was that step.
func (p *Process) afterDisplacedStep(t *thread) {
	if p.threads[t.tid] == t && t.step && !p.hasPending(t.tid) {
		p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP)})
	}
}

// displacedStep runs t's step over the breakpoint it stopped on out of
// line, if the stepper can, and reports whether it did. mayStop lets it
// stop every thread for a stepper that needs them stopped (ErrNeedStop),
// resuming them after (resumeAfterHooks): after a breakpoint's hook,
// where the in-place step would stop them anyway.
func (p *Process) displacedStep(t *thread, mayStop bool) bool {
	if p.displacer == nil || t.sig != 0 && !p.signalsQueued(t) {
		return false // gdb's signal goes with an in-place step
	}
	bp, pc := p.onReportedBreakpoint(t)
	if bp == nil || len(p.patches.overlapping(pc, maxInsnLen)) > 0 {
		// Code the stub patched (a fast tracepoint's jump): its bytes in
		// memory are not the ones gdb sees.
		return false
	}
	ok, err := p.displacer(&Stopped{p: p, t: t, addr: pc}, pc)
	if errors.Is(err, ErrNeedStop) && mayStop {
		p.stopAll()
		defer p.resumeAfterHooks()
		ok, err = p.displacer(&Stopped{p: p, t: t, addr: pc}, pc)
	}
	if !ok {
		return false
	}
	if err == nil {
		p.displacedSteps++
	}
	return true // if err: it died, or Wait reports what stopped it
}

// DisplacedSteps returns how many step-overs ran out of line.
func (p *Process) DisplacedSteps() int {
	n := 0
	_ = p.do(func() error {
		n = p.displacedSteps
		return nil
	})
	return n
}
