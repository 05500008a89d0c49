package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"gotpstub/inferior"
	"gotpstub/rsp"
)

// isResume reports whether pkt resumes the inferior (and so is answered
// by a stop reply once it stops again).
func isResume(pkt []byte) bool {
	if len(pkt) == 0 {
		return false
	}
	switch pkt[0] {
	case 'c', 's', 'C', 'S':
		return true
	}
	return bytes.HasPrefix(pkt, []byte("vCont;"))
}

// rangeStep is a vCont 'r' action: step the thread while its pc stays in
// [start, end).
type rangeStep struct {
	tid        int
	start, end uint64
}

// parseResume turns c/s/C/S/vCont packets into inferior actions.
func (s *Server) parseResume(pkt []byte) ([]inferior.Action, []rangeStep, error) {
	str := string(pkt)
	defTid := -1
	if s.cThread > 0 {
		defTid = s.cThread
	}
	switch str[0] {
	case 'c', 's':
		if len(str) > 1 {
			return nil, nil, fmt.Errorf("resume at an address is not supported")
		}
		a := inferior.Action{Tid: defTid, Step: str[0] == 's'}
		if defTid > 0 {
			// The named thread does the action, the others continue (c) or stay (s).
			if a.Step {
				return []inferior.Action{a}, nil, nil
			}
			return []inferior.Action{a, {Tid: -1}}, nil, nil
		}
		if a.Step {
			a.Tid = s.currentThread()
			return []inferior.Action{a}, nil, nil
		}
		return []inferior.Action{a}, nil, nil
	case 'C', 'S':
		sigStr, _, _ := strings.Cut(str[1:], ";")
		g, err := strconv.ParseUint(sigStr, 16, 8)
		if err != nil {
			return nil, nil, fmt.Errorf("bad signal: %w", err)
		}
		sig, _ := GDBToHostSignal(int(g))
		tid := defTid
		if tid <= 0 {
			tid = s.currentThread()
		}
		a := inferior.Action{Tid: tid, Step: str[0] == 'S', Signal: sig}
		if a.Step {
			return []inferior.Action{a}, nil, nil
		}
		return []inferior.Action{a, {Tid: -1}}, nil, nil
	}
	// vCont;ACTION[:TID];...
	var acts []inferior.Action
	var ranges []rangeStep
	// A held fork child a vCont resumes was made a process of its own
	// by resumeTarget (non-stop leaves held a child whose fork gdb has
	// not acknowledged; an action for every process does not run it).
	for _, f := range strings.Split(str[len("vCont;"):], ";") {
		if f == "" {
			continue
		}
		act, tidStr, hasTid := strings.Cut(f, ":")
		tid := -1
		if hasTid {
			_, t, err := rsp.ParseThreadID(tidStr)
			if err != nil {
				return nil, nil, fmt.Errorf("bad thread id %q: %w", tidStr, err)
			}
			tid = int(t)
			if tid == 0 {
				tid = s.currentThread()
			}
		}
		var a inferior.Action
		a.Tid = tid
		switch act[0] {
		case 'c':
		case 's':
			a.Step = true
		case 't':
			a.Stop = true
		case 'C', 'S':
			g, err := strconv.ParseUint(act[1:], 16, 8)
			if err != nil {
				return nil, nil, fmt.Errorf("bad signal in %q: %w", f, err)
			}
			a.Signal, _ = GDBToHostSignal(int(g))
			a.Step = act[0] == 'S'
		case 'r':
			lo, hi, ok := strings.Cut(act[1:], ",")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if !ok || err1 != nil || err2 != nil {
				return nil, nil, fmt.Errorf("bad range in %q", f)
			}
			if tid <= 0 {
				tid = s.currentThread()
				a.Tid = tid
			}
			a.Step = true
			ranges = append(ranges, rangeStep{tid: tid, start: start, end: end})
		default:
			return nil, nil, fmt.Errorf("unknown vCont action %q", act)
		}
		acts = append(acts, a)
	}
	if len(acts) == 0 {
		return nil, nil, fmt.Errorf("empty vCont")
	}
	return acts, ranges, nil
}

// resume runs the process according to pkt until it stops, reporting the
// stop; \x03 from gdb interrupts it.
func (s *Server) resume(pkt []byte) error {
	if !s.needProcess() {
		if s.haveStop {
			return s.conn.Send(s.stopReply(s.lastStop))
		}
		return s.conn.Send(errReply(errNoProcess))
	}
	if err := s.resumeTarget(pkt); err != nil {
		s.logf("%s: %v", pkt, err)
		return s.conn.Send(rsp.ErrorMessage(err.Error()))
	}
	acts, ranges, err := s.parseResume(pkt)
	if err != nil {
		s.logf("%s: %v", pkt, err)
		return s.conn.Send(rsp.ErrorMessage(err.Error()))
	}
	for {
		ev, err := s.runOnce(acts)
		if err != nil {
			return err
		}
		if ev == nil {
			return nil // connection gone; onDisconnect has run
		}
		// Range stepping: keep stepping while the pc stays in the range.
		// A step into a jump pad is not a step out of the range: the
		// thread goes through the pad (collecting the hit) first.
		if len(ranges) > 0 && s.traps != nil {
			s.traps.Stabilize()
		}
		if again := s.continueRange(*ev, ranges); again {
			acts = []inferior.Action{{Tid: ev.Tid, Step: true}}
			continue
		}
		// A breakpoint whose conditions are all false does not stop.
		if s.conditionsFalse(*ev, acts) {
			continue
		}
		// Signals gdb told us to pass silently go straight back, unless
		// gdb is stepping the thread (like gdbserver: gdb must see the
		// signal that interrupts its step, to step over the handler or
		// into it, rather than find the step ended at the handler's
		// first instruction).
		if s.passesSilently(*ev, stepping(acts, ev.Tid)) {
			acts = passOn(acts, *ev)
			continue
		}
		return s.reportStop(*ev)
	}
}

// passesSilently reports whether ev is a signal gdb passes without
// hearing of it (QPassSignals), which goes straight back to its thread,
// unless gdb is stepping that thread (like gdbserver: gdb must see the
// signal that interrupts its step, to step over the handler or into it).
func (s *Server) passesSilently(ev inferior.StopEvent, stepping bool) bool {
	return ev.Kind == inferior.SignalStop && ev.Signal != 5 && ev.Reason == "" &&
		s.passSignals[ev.Signal] && !stepping
}

// stepping reports whether acts single-step thread tid (the first
// action naming it, or the default one, decides).
func stepping(acts []inferior.Action, tid int) bool {
	a, _ := inferior.ActionFor(acts, tid)
	return a.Step
}

// passOn re-resumes after a pass-through signal: the thread that got it
// continues with it, the rest as they were asked.
func passOn(acts []inferior.Action, ev inferior.StopEvent) []inferior.Action {
	out := []inferior.Action{{Tid: ev.Tid, Signal: ev.Signal}}
	for _, a := range acts {
		if a.Tid == ev.Tid {
			out[0].Step = a.Step
			continue
		}
		a.Signal = 0
		out = append(out, a)
	}
	return out
}

func (s *Server) continueRange(ev inferior.StopEvent, ranges []rangeStep) bool {
	if ev.Kind != inferior.SignalStop || ev.Signal != 5 || ev.Reason != "" || ev.Syscall != inferior.NoSyscall {
		return false
	}
	for _, r := range ranges {
		if r.tid != ev.Tid {
			continue
		}
		pc, err := s.proc.PC(ev.Tid)
		if err != nil {
			return false
		}
		return pc >= r.start && pc < r.end
	}
	return false
}

// runOnce resumes with acts and waits for the next reportable event,
// forwarding gdb's interrupts. It returns nil when the connection closed.
func (s *Server) runOnce(acts []inferior.Action) (*inferior.StopEvent, error) {
	if s.several {
		return s.runSeveral(acts)
	}
	if ev := s.takeKept(s.proc); ev != nil {
		return ev, nil // stopped while another process's event was reported
	}
	if err := s.proc.Resume(acts); err != nil {
		s.logf("resume: %v", err)
		return nil, s.conn.Send(rsp.ErrorMessage("resume: " + err.Error()))
	}
	type result struct {
		ev  inferior.StopEvent
		err error
	}
	done := make(chan result, 1)
	p := s.proc
	go func() {
		ev, err := p.Wait()
		done <- result{ev, err}
	}()
	in := s.conn.Incoming()
	for {
		select {
		case r := <-done:
			if r.err != nil {
				s.logf("wait: %v", r.err)
				ev := inferior.StopEvent{Kind: inferior.Killed, Signal: 9}
				return &ev, nil
			}
			return &r.ev, nil
		case pkt, ok := <-in:
			if !ok {
				// gdb vanished while the program runs: stop it, then
				// behave as on any disconnect.
				p.Interrupt()
				r := <-done
				if r.err == nil && (r.ev.Kind == inferior.Exited || r.ev.Kind == inferior.Killed) {
					s.noteExit(r.ev)
				}
				s.onDisconnect()
				return nil, nil
			}
			s.handledOne()
			if pkt.Interrupt {
				p.Interrupt()
				continue
			}
			// In all-stop mode gdb sends nothing else while running;
			// answer politely so it is not left waiting.
			_ = s.conn.Send([]byte{})
			in = s.conn.Incoming()
		}
	}
}

// noteExit records that the process is gone.
func (s *Server) noteExit(ev inferior.StopEvent) {
	if q := s.proc; q != nil && q != s.main {
		// A side process ended; the others go on.
		s.lastStop, s.haveStop = ev, true
		s.progressExit(ev)
		s.dropSide(q)
		return
	}
	s.mu.Lock()
	s.exited = true
	s.lastStop = ev
	s.haveStop = true
	s.mu.Unlock()
	s.trace.OnInferiorExit()
	s.progressExit(ev)
	if s.proc != nil && !s.mainGone() {
		s.proc.Close()
		s.proc = nil
		s.main = nil
	}
}

// progressExit prints gdbserver's line for a process's end.
func (s *Server) progressExit(ev inferior.StopEvent) {
	switch ev.Kind {
	case inferior.Exited:
		s.progressf("\nChild exited with status %d\n", ev.ExitCode)
	case inferior.Killed:
		s.progressf("\nChild terminated with signal = 0x%x\n", ev.Signal)
	}
}

func (s *Server) reportStop(ev inferior.StopEvent) error {
	if ev.Kind == inferior.Exited || ev.Kind == inferior.Killed {
		s.noteExit(ev)
	} else {
		s.lastStop = ev
		s.haveStop = true
		s.gThread = 0
		if s.traps != nil {
			s.traps.Flush()
			// No thread may show gdb a pc inside a jump pad.
			s.traps.Stabilize()
		}
	}
	return s.conn.Send(s.stopReply(ev))
}

// stopReply formats a stop event as T/W/X/N.
func (s *Server) stopReply(ev inferior.StopEvent) []byte {
	switch ev.Kind {
	case inferior.Exited:
		return []byte(fmt.Sprintf("W%02x", ev.ExitCode&0xff) + s.processSuffix(ev))
	case inferior.Killed:
		return []byte(fmt.Sprintf("X%02x", HostToGDBSignal(ev.Signal)) + s.processSuffix(ev))
	case inferior.NoResumed:
		return []byte("N")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "T%02x%sthread:%s;", HostToGDBSignal(ev.Signal), syscallStopField(ev), s.threadID(ev.Tid))
	if p, held := s.owner(ev.Tid); p != nil && !held {
		if regs, err := p.Registers(ev.Tid); err == nil {
			// The frame pointer, stack pointer and pc, as gdbserver
			// expedites them (rbp, rsp, rip; x29, sp, pc).
			for _, n := range []int{regs.Layout.FP, regs.Layout.SP, regs.Layout.PC} {
				var v [8]byte
				binary.LittleEndian.PutUint64(v[:], regs.Uint64(n))
				fmt.Fprintf(&b, "%02x:%x;", n, v[:])
			}
		}
	}
	b.WriteString(s.forkStopFields(ev))
	if ev.Exec && s.execEvents && s.proc != nil {
		// The program image changed: gdb reloads symbols from this path.
		if path, err := s.proc.ExePath(); err == nil {
			fmt.Fprintf(&b, "exec:%x;", path)
		}
	}
	switch ev.Reason {
	case "swbreak", "hwbreak":
		b.WriteString(ev.Reason + ":;")
	case "watch", "rwatch", "awatch":
		fmt.Fprintf(&b, "%s:%x;", ev.Reason, ev.WatchAddr)
	}
	return []byte(b.String())
}

// processSuffix is the ";process:PID" of W and X replies in multiprocess mode.
func (s *Server) processSuffix(ev inferior.StopEvent) string {
	pid := ev.Tid
	if pid == 0 {
		pid = s.lastPid
	}
	if !s.multiprocess || pid == 0 {
		return ""
	}
	return fmt.Sprintf(";process:%x", pid)
}
