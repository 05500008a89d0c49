package server

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"gotpstub/inferior"
	"gotpstub/rsp"
)

// Non-stop mode (QNonStop:1). Resumption packets are answered OK at once
// and the threads they name run while gdb goes on sending packets; a
// goroutine waits for the process (startAsyncWait) and Serve's loop turns each
// event into a %Stop notification (onAsyncStop). Stops gdb has not yet
// acknowledged wait in a queue: its head is the one last sent (as the
// notification, or as the reply to ? or vStopped), and each vStopped
// takes it off and answers with the next one, or OK.
type nonStopState struct {
	on     atomic.Bool // read by the reader goroutine's dispatch
	events chan asyncStop
	// waiting: the processes a startAsyncWait goroutine waits for.
	waiting map[*inferior.Process]bool
	// gen counts resumptions: a NoResumed that a resumption overtook is
	// no reason to stop waiting.
	gen    int
	queue  []inferior.StopEvent
	acts   map[int]inferior.Action // each thread's last resumption
	ranges map[int]rangeStep       // threads range-stepping
}

// asyncStop is what a startAsyncWait goroutine found.
type asyncStop struct {
	proc *inferior.Process
	ev   inferior.StopEvent
	err  error
	gen  int
}

func newNonStopState() nonStopState {
	return nonStopState{events: make(chan asyncStop, 1), waiting: map[*inferior.Process]bool{}}
}

// qNonStop switches between all-stop (QNonStop:0) and non-stop mode.
func (s *Server) qNonStop(pkt []byte) []byte {
	arg := string(bytes.TrimPrefix(pkt, []byte("QNonStop:")))
	if arg != "0" && arg != "1" {
		return rsp.ErrorMessage("QNonStop takes 0 or 1")
	}
	on := arg == "1"
	if on == s.ns.on.Load() {
		return rsp.OK
	}
	if !on {
		s.leaveNonStop()
		return rsp.OK
	}
	for _, p := range s.processes() {
		if err := p.SetNonStop(true); err != nil {
			return rsp.ErrorMessage("non-stop: " + err.Error())
		}
	}
	s.ns.on.Store(true)
	s.ns.queue = nil
	s.ns.resetThreads()
	return rsp.OK
}

// resetThreads forgets what gdb asked of each thread.
func (ns *nonStopState) resetThreads() {
	ns.acts = map[int]inferior.Action{}
	ns.ranges = map[int]rangeStep{}
}

// leaveNonStop stops every thread gdb has running and returns to
// all-stop mode, where everything is stopped while gdb is not waiting
// for a stop (gdb switched modes, or went away).
func (s *Server) leaveNonStop() {
	s.ns.on.Store(false)
	s.ns.queue = nil
	procs := s.processes()
	if len(procs) == 0 {
		s.drainAsync()
		return
	}
	for _, p := range procs {
		if err := p.Resume([]inferior.Action{{Tid: -1, Stop: true}}); err != nil {
			s.logf("non-stop: stopping every thread of %d: %v", p.Pid(), err)
		}
	}
	s.ns.gen++
	s.startAsyncWait()
	deadline := time.After(5 * time.Second)
	for len(s.ns.waiting) > 0 {
		select {
		case w := <-s.ns.events:
			delete(s.ns.waiting, w.proc)
			if !s.isProcess(w.proc) || w.err != nil {
				break
			}
			switch w.ev.Kind {
			case inferior.Exited, inferior.Killed:
				s.withFocus(w.proc, func() { s.noteExit(w.ev) })
			case inferior.NoResumed:
			default:
				if w.proc == s.proc {
					s.lastStop, s.haveStop = w.ev, true
				}
				s.startAsyncWaitFor(w.proc)
			}
		case <-deadline:
			s.logf("non-stop: threads still running after 5 s of stopping them")
			return
		}
	}
	for _, p := range s.processes() {
		_ = p.SetNonStop(false)
	}
}

// drainAsync forgets waits left over from an earlier process.
func (s *Server) drainAsync() {
	timeout := time.After(time.Second)
	for len(s.ns.waiting) > 0 {
		select {
		case w := <-s.ns.events:
			delete(s.ns.waiting, w.proc)
		case <-timeout:
			clear(s.ns.waiting)
		}
	}
}

// attachedNonStop answers vAttach in non-stop mode: OK, the attached
// threads counting as running with a stop (signal 0) each to report.
// The stops go out once gdb, its attach set up, asks for them (vCont;t:
// a notification before that made gdb fail an assertion, as it knew no
// thread yet), as gdbserver does.
func (s *Server) attachedNonStop() []byte {
	if err := s.proc.ReportAllStopped(); err != nil {
		return rsp.ErrorMessage("attach: " + err.Error())
	}
	return rsp.OK
}

// resumeNonStop applies a resumption packet in non-stop mode: OK at once,
// the stops come as notifications.
func (s *Server) resumeNonStop(pkt []byte) error {
	if !s.needProcess() {
		return s.conn.Send(errReply(errNoProcess))
	}
	// An event taken from a process but not yet handled goes to gdb's
	// queue first: its thread stays stopped, and a fork child it
	// announces stays held.
	if err := s.takeEventInFlight(); err != nil {
		return err // the connection failed
	}
	if !s.needProcess() {
		return s.conn.Send(errReply(errNoProcess))
	}
	if err := s.resumeTarget(pkt); err != nil {
		s.logf("%s: %v", pkt, err)
		s.startAsyncWait()
		return s.conn.Send(rsp.ErrorMessage(err.Error()))
	}
	targets := []*inferior.Process{s.proc}
	if _, all := resumedPids(pkt); all {
		targets = s.processes()
	}
	acts, ranges, err := s.parseResume(pkt)
	if err != nil {
		s.logf("%s: %v", pkt, err)
		s.startAsyncWait()
		return s.conn.Send(rsp.ErrorMessage(err.Error()))
	}
	for _, p := range targets {
		if !s.isProcess(p) {
			continue // gone with the event in flight
		}
		s.withFocus(p, func() {
			pa := actionsOf(p, s.keepUnheardStops(acts))
			s.noteActions(pa, ranges)
			if rerr := p.Resume(pa); rerr != nil && err == nil {
				err = rerr
			}
		})
	}
	s.ns.gen++
	s.startAsyncWait()
	if err != nil {
		s.logf("%s: %v", pkt, err)
		return s.conn.Send(rsp.ErrorMessage(err.Error()))
	}
	return s.conn.Send(rsp.OK)
}

// keepUnheardStops keeps stopped, whatever acts say of every thread,
// the threads whose stop is queued for gdb and not yet acknowledged: gdb
// still counts them running, and its vCont;c for all threads must not
// resume them before it hears of their stop (gdbserver does the same).
// A Stop action for a thread stopped already changes nothing.
func (s *Server) keepUnheardStops(acts []inferior.Action) []inferior.Action {
	var keep []inferior.Action
	for _, ev := range s.ns.queue {
		if ev.Kind == inferior.SignalStop {
			keep = append(keep, inferior.Action{Tid: ev.Tid, Stop: true})
		}
	}
	if len(keep) == 0 {
		return acts
	}
	return append(keep, acts...)
}

// takeEventInFlight handles the event a waiting goroutine may have
// taken from the process and not yet handed over, before gdb's
// resumption applies: a thread whose stop gdb has not heard of is still
// running for gdb, and its vCont;c must leave it to the stop (or to the
// stub's own resumption), not resume it unreported.
func (s *Server) takeEventInFlight() error {
	for p := range s.ns.waiting {
		p.CancelWait()
	}
	for len(s.ns.waiting) > 0 {
		w := <-s.ns.events
		delete(s.ns.waiting, w.proc)
		if errors.Is(w.err, inferior.ErrWaitCancelled) {
			continue
		}
		if _, err := s.handleAsync(w); err != nil { // the resumption waits again
			return err
		}
	}
	return nil
}

// noteActions records what each thread was asked to do, for the stops
// the stub handles without gdb (range steps, false conditions, passed
// signals).
func (s *Server) noteActions(acts []inferior.Action, ranges []rangeStep) {
	running := s.proc.ResumedThreads()
	for _, tid := range s.proc.Threads() {
		if a, named := inferior.ActionFor(acts, tid); named && !a.Stop && !running[tid] {
			a.Tid = tid
			s.ns.acts[tid] = a
			delete(s.ns.ranges, tid)
		}
	}
	for _, r := range ranges {
		s.ns.ranges[r.tid] = r
	}
}

// startAsyncWait has a goroutine wait for each process's next event,
// unless one does already.
func (s *Server) startAsyncWait() {
	for _, p := range s.processes() {
		s.startAsyncWaitFor(p)
	}
}

// startAsyncWaitFor has a goroutine wait for p's next event, unless one
// does already.
func (s *Server) startAsyncWaitFor(p *inferior.Process) {
	if p == nil || s.ns.waiting[p] {
		return
	}
	s.ns.waiting[p] = true
	gen := s.ns.gen
	// Started here, not in the goroutine: takeEventInFlight's CancelWait
	// must find it.
	wait, err := p.StartWait()
	go func() {
		var ev inferior.StopEvent
		if err == nil {
			ev, err = wait()
		}
		s.ns.events <- asyncStop{proc: p, ev: ev, err: err, gen: gen}
	}()
}

// onAsyncStop handles an event found while gdb has threads running and
// waits for the next one.
func (s *Server) onAsyncStop(w asyncStop) error {
	delete(s.ns.waiting, w.proc)
	wait, err := s.handleAsync(w)
	if wait && s.isProcess(w.proc) {
		s.startAsyncWaitFor(w.proc)
	}
	return err
}

// handleAsync reports w's event to gdb, or resumes its thread past it;
// wait tells whether threads may still be running. The event's process
// is current while it is handled; the one gdb selected is again after.
func (s *Server) handleAsync(w asyncStop) (wait bool, err error) {
	if !s.isProcess(w.proc) || !s.ns.on.Load() {
		return false, nil // the process is gone or replaced, or non-stop ended
	}
	s.withFocus(w.proc, func() { wait, err = s.handleAsyncEvent(w) })
	return wait, err
}

// handleAsyncEvent is handleAsync with w's process current.
func (s *Server) handleAsyncEvent(w asyncStop) (wait bool, err error) {
	ev := w.ev
	if w.err != nil {
		s.logf("wait: %v", w.err)
		ev = inferior.StopEvent{Kind: inferior.Killed, Tid: w.proc.Pid(), Signal: 9}
	}
	switch ev.Kind {
	case inferior.NoResumed:
		return w.gen != s.ns.gen, nil
	case inferior.Exited, inferior.Killed:
		s.noteExit(ev)
		return false, s.notifyStop(ev)
	}
	if !s.continueAfter(&ev) {
		s.lastStop, s.haveStop = ev, true
		s.flushTraps()
		if err := s.notifyStop(ev); err != nil {
			return false, err
		}
	}
	return true, nil
}

// continueAfter resumes ev's thread again, without telling gdb, when the
// stop is one gdb asked not to hear of: a step still inside its range, a
// breakpoint whose conditions are false, a signal gdb passes silently.
// When gdb has asked for the thread to stop meanwhile, a step or a false
// condition becomes that stop (signal 0), and a passed signal is reported
// for gdb to pass on.
func (s *Server) continueAfter(ev *inferior.StopEvent) bool {
	a, ok := s.ns.acts[ev.Tid]
	if !ok {
		return false
	}
	again := []inferior.Action{{Tid: ev.Tid, Step: a.Step}}
	switch r, ranged := s.ns.ranges[ev.Tid]; {
	case ranged && s.rangeContinues(*ev, r):
		again[0].Step = true
	case s.conditionsFalse(*ev, []inferior.Action{a}):
	case s.passesSilently(*ev, a.Step):
		if ev.StopRequested {
			return false
		}
		again[0].Signal = ev.Signal
	default:
		return false
	}
	if ev.StopRequested {
		*ev = inferior.StopEvent{Kind: inferior.SignalStop, Tid: ev.Tid}
		return false
	}
	if err := s.proc.Resume(again); err != nil {
		s.logf("non-stop: resuming thread %d: %v", ev.Tid, err)
		return false
	}
	return true
}

// rangeContinues reports whether a range step of ev's thread goes on.
func (s *Server) rangeContinues(ev inferior.StopEvent, r rangeStep) bool {
	if s.traps != nil {
		s.traps.Stabilize()
	}
	return s.continueRange(ev, []rangeStep{r})
}

// flushTraps does what the trace engine left for a stop (removals asked
// for during a hit) and moves stopped threads out of jump pads. The
// running threads are paused only when code is to change.
func (s *Server) flushTraps() {
	if s.traps == nil {
		return
	}
	if s.traps.FlushDue() {
		done, _ := s.holdForCodeChange("flushing tracepoint removals")
		s.traps.Flush()
		done()
	}
	s.traps.Stabilize()
}

// holdForCodeChange readies a code change made while gdb may have
// threads running: with live patching (inferior/livepatch.go) nothing
// is stopped as a whole; otherwise every running thread is paused
// (paused) until done, which logs what the change cost (--timing).
func (s *Server) holdForCodeChange(what string) (done func(), paused bool) {
	p := s.traced()
	if p.CanPatchLive() {
		p.SetExactHolds(s.timingLog() != nil) // for logLive
		before := p.LiveStats()
		p.ResetLongestHold()
		start := time.Now()
		return func() { s.logLive(p, what, before, start) }, false
	}
	release := p.Pause()
	return func() { s.logPause(what, release()) }, true
}

// logPause records how long the running threads were paused.
func (s *Server) logPause(what string, d time.Duration) {
	if w := s.timingLog(); w != nil {
		fmt.Fprintf(w, "gotpstub: non-stop: threads paused %.0f µs for %s\n", float64(d.Nanoseconds())/1e3, what)
	}
}

// logLive records, for a packet that changed code with threads running,
// how long it took and the longest stop of any thread for it (before:
// the counts when it began).
func (s *Server) logLive(p *inferior.Process, what string, before inferior.LiveStats, start time.Time) {
	w := s.timingLog()
	if w == nil {
		return
	}
	after := p.LiveStats()
	fmt.Fprintf(w, "gotpstub: non-stop: %s changed code live in %.0f µs: %d patches, %d threads checked, %d moved, %d sent on from an int3, %d parked, %d sent back to an int3; longest thread stop %.0f µs (%.0f µs not counting time it was runnable), %s\n",
		what, float64(time.Since(start).Nanoseconds())/1e3, after.Patches-before.Patches, after.Checked-before.Checked,
		after.Moved-before.Moved, after.Redirected-before.Redirected, after.Parked-before.Parked, after.Rewound-before.Rewound,
		float64(after.LongestHold.Nanoseconds())/1e3, float64(after.LongestPause.Nanoseconds())/1e3, cmp.Or(after.LongestWhy, "none"))
}

// notifyStop queues a stop for gdb, sending it as a %Stop notification
// when gdb has none to acknowledge.
func (s *Server) notifyStop(ev inferior.StopEvent) error {
	s.ns.queue = append(s.ns.queue, ev)
	if len(s.ns.queue) > 1 {
		return nil
	}
	return s.conn.SendNotification(append([]byte("Stop:"), s.stopReply(ev)...))
}

// vStopped acknowledges the stop last sent and asks for the next.
func (s *Server) vStopped([]byte) []byte {
	if len(s.ns.queue) > 0 {
		s.ns.queue = s.ns.queue[1:]
	}
	if len(s.ns.queue) == 0 {
		return rsp.OK
	}
	return s.stopReply(s.ns.queue[0])
}

// haltReasonNonStop answers ? in non-stop mode: a stop for every thread
// gdb does not have running (the rest through vStopped), or OK.
func (s *Server) haltReasonNonStop() []byte {
	s.ns.queue = nil
	for _, p := range s.processes() {
		running := p.ResumedThreads()
		for _, tid := range p.Threads() {
			if running[tid] {
				continue
			}
			ev := inferior.StopEvent{Kind: inferior.SignalStop, Tid: tid}
			if tid == s.lastStop.Tid {
				ev = s.lastStop
			}
			s.ns.queue = append(s.ns.queue, ev)
		}
	}
	if len(s.ns.queue) == 0 {
		return rsp.OK
	}
	return s.stopReply(s.ns.queue[0])
}

// pausesThreads reports whether pkt changes code while gdb may have
// threads running (non-stop): tracepoint packets, and breakpoints while
// a trace runs (a breakpoint inside a jump turns it into a trap).
func (s *Server) pausesThreads(pkt []byte) bool {
	if !s.ns.on.Load() || !s.needProcess() {
		return false
	}
	if bytes.HasPrefix(pkt, []byte("QTStart")) || bytes.HasPrefix(pkt, []byte("QTStop")) {
		return true
	}
	if !s.trace.Running() {
		return false // nothing is in the code to change
	}
	for _, p := range codeChangingWhileRunning {
		if bytes.HasPrefix(pkt, []byte(p)) {
			return true
		}
	}
	return false
}

// codeChangingWhileRunning are the packets that put in or take out jumps
// and traps while a trace runs: QTinit ends it, QTDP installs a
// tracepoint into it (InstallInTrace), QTEnable/QTDisable switch one, and
// a breakpoint inside a jump's bytes turns the jump into a trap.
var codeChangingWhileRunning = []string{"QTinit", "QTDP:", "QTEnable:", "QTDisable:", "Z", "z"}
