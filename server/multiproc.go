package server

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"gotpstub/inferior"
	"gotpstub/rsp"
)

// Several processes at once (gdb's detach-on-fork off, then resuming a
// fork child while its parent is debugged).
//
// s.main is the process the stub launched or attached to; the trace
// experiment lives in it. A fork child that gdb resumes becomes a side
// process (s.sides): the parent's inferior.Process hands it over
// (TakeForkChild) to a Process of its own. s.proc is the process packets
// act on: the one Hg last named, or the one whose stop was last
// reported. In all-stop mode one process runs at a time, as gdb asks with
// schedule-multiple off (its default: vCont names the process), or all of
// them for a vCont for every process (schedule-multiple on: runSeveral);
// a vCont naming some processes but not all is refused (gdb sends none).
// In non-stop mode each process has a goroutine waiting for its events
// (nonstop.go).

// processes returns the debugged processes: main first (unless gone),
// then the side processes by pid.
func (s *Server) processes() []*inferior.Process {
	var out []*inferior.Process
	if s.main != nil && !s.mainExited() {
		out = append(out, s.main)
	}
	pids := make([]int, 0, len(s.sides))
	for pid := range s.sides {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		out = append(out, s.sides[pid])
	}
	return out
}

// mainExited reports whether the main process is gone while s.proc is
// still it.
func (s *Server) mainExited() bool { return s.proc == s.main && s.exited }

// owner returns the process that has tid as a live thread, or that holds
// tid as a fork child (then held is true); nil when none does.
func (s *Server) owner(tid int) (p *inferior.Process, held bool) {
	if s.proc != nil && !s.exited && s.proc.Alive(tid) {
		return s.proc, false
	}
	procs := s.processes()
	for _, q := range procs {
		if q.Alive(tid) {
			return q, false
		}
	}
	for _, q := range procs {
		if q.IsForkChild(tid) {
			return q, true
		}
	}
	return nil, false
}

// processByPid returns the debugged process pid (not a held child).
func (s *Server) processByPid(pid int) *inferior.Process {
	for _, q := range s.processes() {
		if q.Pid() == pid {
			return q
		}
	}
	return nil
}

// focus makes p the process packets act on.
func (s *Server) focus(p *inferior.Process) {
	if p == nil || p == s.proc {
		return
	}
	s.mu.Lock()
	s.proc = p
	s.exited = false
	s.attached = p.Attached()
	s.lastPid = p.Pid()
	s.mu.Unlock()
	s.tls = nil
}

// runChild makes held fork child pid of holder a side process that can
// run: gdb resumed it.
func (s *Server) runChild(holder *inferior.Process, pid int) (*inferior.Process, error) {
	q, err := holder.TakeForkChild(pid)
	if err != nil {
		return nil, fmt.Errorf("running fork child %d: %w", pid, err)
	}
	if s.ns.on.Load() {
		if err := q.SetNonStop(true); err != nil {
			s.logf("non-stop for %d: %v", pid, err)
		}
	}
	if s.sides == nil {
		s.sides = map[int]*inferior.Process{}
	}
	// No Guard: the watchdog follows one process, the main one (its
	// int3s are what a dead stub must not leave behind in the program
	// gdb ran); a side process's breakpoints are not its concern.
	s.sides[pid] = q
	q.SetPassSignals(s.passSignals)
	q.SetCatchSyscalls(s.catchSyscalls.on, s.catchSyscalls.nrs)
	for bp := range s.heldBps[pid] {
		if err := q.InsertBreakpoint(bp.kind, bp.addr, bp.size); err != nil {
			s.logf("inserting %#x in %d: %v", bp.addr, pid, err)
		}
	}
	delete(s.heldBps, pid)
	s.logf("fork child %d runs as a process of its own", pid)
	return q, nil
}

// resumeTarget picks the process a resumption packet runs and focuses it,
// turning a held fork child gdb names into a side process. A packet for
// every process (schedule-multiple on) while there are several, or held
// children, runs them all (s.several): each held child is made a side
// process first.
func (s *Server) resumeTarget(pkt []byte) error {
	s.several = false
	pids, all := resumedPids(pkt)
	if len(s.sides) == 0 && len(pids) <= 1 && (len(pids) == 0 || s.proc == nil || pids[0] == s.proc.Pid()) &&
		(!all || len(s.proc.ForkChildren()) == 0) {
		return nil // the common case: one process
	}
	if all {
		return s.runEveryProcess()
	}
	if len(pids) == 0 {
		return nil
	}
	if len(pids) > 1 {
		return fmt.Errorf("gotpstub runs one process or all of them: vCont names %d processes", len(pids))
	}
	pid := pids[0]
	if q := s.processByPid(pid); q != nil {
		s.focus(q)
		return nil
	}
	holder, held := s.owner(pid)
	if holder == nil || !held {
		return fmt.Errorf("no process %d", pid)
	}
	q, err := s.runChild(holder, pid)
	if err != nil {
		return err
	}
	s.focus(q)
	return nil
}

// runEveryProcess prepares a resumption of every process: held fork
// children become side processes.
func (s *Server) runEveryProcess() error {
	for _, p := range s.processes() {
		for _, pid := range p.ForkChildren() {
			if s.forkUnheard(pid) {
				continue // parseResume leaves it stopped
			}
			if _, err := s.runChild(p, pid); err != nil {
				return err
			}
		}
	}
	s.several = len(s.processes()) > 1 && !s.ns.on.Load()
	return nil
}

// forkUnheard reports whether the fork event that announced child pid
// has not reached gdb yet: queued for gdb in non-stop mode, or kept for a
// process stopped by another's event. gdb has not decided the child's
// fate, and a resumption of every process leaves it held.
func (s *Server) forkUnheard(pid int) bool {
	for _, ev := range s.kept {
		if ev.ForkChild == pid {
			return true
		}
	}
	if !s.ns.on.Load() {
		return false
	}
	for _, ev := range s.ns.queue {
		if ev.ForkChild == pid {
			return true
		}
	}
	return false
}

// resumedPids returns the processes a vCont's actions name explicitly
// (pPID.TID), and whether one applies to every process (no thread id, or
// p-1).
func resumedPids(pkt []byte) (pids []int, all bool) {
	str, ok := strings.CutPrefix(string(pkt), "vCont;")
	if !ok {
		return nil, false
	}
	for _, f := range strings.Split(str, ";") {
		if f == "" {
			continue
		}
		_, tidStr, hasTid := strings.Cut(f, ":")
		if !hasTid {
			all = true
			continue
		}
		pid, _, err := rsp.ParseThreadID(tidStr)
		switch {
		case err != nil || pid == 0:
		case pid < 0:
			all = true
		case !slices.Contains(pids, int(pid)):
			pids = append(pids, int(pid))
		}
	}
	return pids, all
}

// dropSide forgets side process q, which has exited, been killed or been
// detached; the main process (or another side) becomes current if q was.
func (s *Server) dropSide(q *inferior.Process) {
	delete(s.sides, q.Pid())
	delete(s.heldBps, q.Pid())
	delete(s.kept, q.Pid())
	q.Close()
	if s.proc != q {
		return
	}
	if procs := s.processes(); len(procs) > 0 {
		s.mu.Lock()
		s.proc = nil
		s.mu.Unlock()
		s.focus(procs[0])
		return
	}
	s.mu.Lock()
	s.proc = s.main
	s.exited = true
	s.mu.Unlock()
}

// mainGone is called once the main process has exited or been killed or
// detached, with s.proc still naming it: a side process, if any, becomes
// current. It reports whether one did.
func (s *Server) mainGone() bool {
	if len(s.sides) == 0 {
		return false
	}
	s.main.Close()
	s.main = nil
	s.mu.Lock()
	s.proc = nil
	s.mu.Unlock()
	s.focus(s.processes()[0])
	return true
}

// endSides kills the side processes that were launched with the main
// process (its fork children) and detaches those that were attached,
// as Shutdown does for the main one; with detach every one is detached.
func (s *Server) endSides(detach bool) {
	for pid, q := range s.sides {
		var err error
		if detach || q.Attached() {
			err = q.Detach()
		} else {
			err = q.Kill()
		}
		if err != nil {
			s.logf("ending process %d: %v", pid, err)
		}
		q.Close()
		delete(s.sides, pid)
		delete(s.kept, pid)
	}
	if s.proc == s.main {
		return
	}
	s.mu.Lock()
	s.proc = s.main
	s.exited = s.main == nil
	if s.main != nil {
		s.attached = s.main.Attached()
		s.lastPid = s.main.Pid()
	}
	s.mu.Unlock()
}

// sideByPid returns side process pid, or nil.
func (s *Server) sideByPid(pid int) *inferior.Process { return s.sides[pid] }

// detachSide handles "D;PID" for a side process.
func (s *Server) detachSide(q *inferior.Process) []byte {
	if err := q.Detach(); err != nil {
		s.logf("detach %d: %v", q.Pid(), err)
		return errReply(errNoProcess)
	}
	s.progressf("Detaching from process %d\n", q.Pid())
	s.dropSide(q)
	return rsp.OK
}

// killSide handles "vKill;PID" for a side process.
func (s *Server) killSide(q *inferior.Process) []byte {
	if err := q.Kill(); err != nil {
		s.logf("kill %d: %v", q.Pid(), err)
	}
	s.dropSide(q)
	return rsp.OK
}

// killOneOfSeveral handles "vKill;PID" when PID is a side process, a fork
// child held by a process other than the current one, or the main process
// while side processes remain (they go on). It returns nil otherwise.
func (s *Server) killOneOfSeveral(pkt []byte) []byte {
	pid, err := packetPid(pkt)
	if err != nil || pid == 0 {
		return nil
	}
	if q := s.sideByPid(pid); q != nil {
		return s.killSide(q)
	}
	if reply := s.releaseHeldElsewhere(pid, "kill", (*inferior.Process).KillForkChild); reply != nil {
		return reply
	}
	if s.main == nil || pid != s.main.Pid() || len(s.sides) == 0 {
		return nil
	}
	if s.trace.Running() {
		s.trace.OnInferiorExit()
	}
	if err := s.main.Kill(); err != nil {
		s.logf("kill %d: %v", pid, err)
	}
	s.mainLeaves()
	return rsp.OK
}

// detachOneOfSeveral is killOneOfSeveral for "D;PID".
func (s *Server) detachOneOfSeveral(pid int) []byte {
	if pid == 0 {
		return nil
	}
	if q := s.sideByPid(pid); q != nil {
		return s.detachSide(q)
	}
	if reply := s.releaseHeldElsewhere(pid, "detach", (*inferior.Process).DetachForkChild); reply != nil {
		if string(reply) == string(rsp.OK) {
			s.progressf("Detaching from process %d\n", pid)
		}
		return reply
	}
	if s.main == nil || pid != s.main.Pid() || len(s.sides) == 0 || len(s.main.ForkChildren()) > 0 {
		return nil
	}
	if s.trace.Running() {
		s.trace.OnDisconnect()
	}
	if err := s.main.Detach(); err != nil {
		s.logf("detach %d: %v", pid, err)
		return errReply(errNoProcess)
	}
	s.progressf("Detaching from process %d\n", pid)
	s.mainLeaves()
	return rsp.OK
}

// releaseHeldElsewhere kills or detaches (release) pid when it is a fork
// child held by a process other than the current one (the current one's
// are killForked's and detachForked's). It returns nil otherwise.
func (s *Server) releaseHeldElsewhere(pid int, what string, release func(*inferior.Process, int) error) []byte {
	holder, held := s.owner(pid)
	if !held || holder == s.proc {
		return nil
	}
	if err := release(holder, pid); err != nil {
		s.logf("%s %d: %v", what, pid, err)
		return errReply(errNoProcess)
	}
	delete(s.heldBps, pid)
	return rsp.OK
}

// mainLeaves forgets the main process (killed or detached) while side
// processes remain: one of them becomes current.
func (s *Server) mainLeaves() {
	if s.proc != s.main {
		s.main.Close()
		s.main = nil
		return
	}
	s.mainGone()
}

// selectProcess makes the process of Hg's thread current: the one with
// thread tid, or pid's when the packet names a process and any (0) or
// every (-1) thread. A held fork child's holder becomes current (its
// registers and memory are read through it). It returns the thread Hg
// selects (a held child named pCHILD.0 is the child itself), or an error
// reply when no process has the thread.
func (s *Server) selectProcess(pid, tid int) (int, []byte) {
	if tid <= 0 {
		if pid <= 0 {
			return tid, nil
		}
		if q := s.processByPid(pid); q != nil {
			s.focus(q)
			return tid, nil
		}
		tid = pid
	}
	p, _ := s.owner(tid)
	if p == nil {
		return 0, errReply(errThread)
	}
	s.focus(p)
	return tid, nil
}

// runSeveral resumes every debugged process with its part of acts
// (schedule-multiple on) and waits for the first reportable event; the
// other processes are then interrupted, and an event one of them had
// meanwhile is kept and reported at the next resumption instead of
// resuming anything (as all-stop gdbserver does).
func (s *Server) runSeveral(acts []inferior.Action) (*inferior.StopEvent, error) {
	procs := s.processes()
	for _, p := range procs {
		if ev := s.takeKept(p); ev != nil {
			s.focus(p)
			return ev, nil
		}
	}
	done := make(chan procEvent, len(procs))
	var running []*inferior.Process
	for _, p := range procs {
		pa := actionsOf(p, acts)
		if len(pa) == 0 {
			continue
		}
		if err := p.Resume(pa); err != nil {
			s.logf("resume %d: %v", p.Pid(), err)
			continue
		}
		running = append(running, p)
		go func() {
			ev, err := p.Wait()
			done <- procEvent{p, ev, err}
		}()
	}
	if len(running) == 0 {
		return nil, s.conn.Send(rsp.ErrorMessage("resume: no process could be resumed"))
	}
	interruptAll := func() {
		for _, p := range running {
			p.Interrupt()
		}
	}
	first, ok := s.waitRunning(done, interruptAll)
	if !ok {
		interruptAll()
		for range running {
			<-done
		}
		s.onDisconnect()
		return nil, nil
	}
	interruptAll()
	for range running[1:] {
		r := <-done
		if r.err == nil && !r.ev.Interrupted {
			if s.kept == nil {
				s.kept = map[int]inferior.StopEvent{}
			}
			s.kept[r.p.Pid()] = r.ev
		}
	}
	s.focus(first.p)
	if first.err != nil {
		s.logf("wait %d: %v", first.p.Pid(), first.err)
		ev := inferior.StopEvent{Kind: inferior.Killed, Tid: first.p.Pid(), Signal: 9}
		return &ev, nil
	}
	return &first.ev, nil
}

// takeKept returns, and forgets, the event kept for p, or nil.
func (s *Server) takeKept(p *inferior.Process) *inferior.StopEvent {
	ev, ok := s.kept[p.Pid()]
	if !ok {
		return nil
	}
	delete(s.kept, p.Pid())
	return &ev
}

// procEvent is one process's Wait result.
type procEvent struct {
	p   *inferior.Process
	ev  inferior.StopEvent
	err error
}

// waitRunning waits for the first of the running processes' events,
// serving gdb meanwhile as runOnce does (\x03 runs interrupt). ok is false
// when gdb went away.
func (s *Server) waitRunning(done <-chan procEvent, interrupt func()) (procEvent, bool) {
	in := s.conn.Incoming()
	for {
		select {
		case r := <-done:
			return r, true
		case pkt, ok := <-in:
			if !ok {
				return procEvent{}, false
			}
			s.handledOne()
			if pkt.Interrupt {
				interrupt()
				continue
			}
			_ = s.conn.Send([]byte{})
			in = s.conn.Incoming()
		}
	}
}

// actionsOf returns the actions of acts that apply to p: those for every
// thread and those naming one of its threads.
func actionsOf(p *inferior.Process, acts []inferior.Action) []inferior.Action {
	var out []inferior.Action
	for _, a := range acts {
		if a.Tid <= 0 || p.Alive(a.Tid) {
			out = append(out, a)
		}
	}
	return out
}

// isProcess reports whether p is one of the debugged processes.
func (s *Server) isProcess(p *inferior.Process) bool {
	return p != nil && slices.Contains(s.processes(), p)
}

// withFocus runs f with p current, then makes the process that was
// current before current again, if it is still there.
func (s *Server) withFocus(p *inferior.Process, f func()) {
	prev := s.proc
	s.focus(p)
	f()
	if prev != p && s.isProcess(prev) {
		s.focus(prev)
	}
}

// traced returns the process the trace experiment's code lives in: the
// main one, whichever process is current.
func (s *Server) traced() *inferior.Process {
	if s.main != nil {
		return s.main
	}
	return s.proc
}
