package server

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gotpstub/inferior"
	"gotpstub/rsp"
	"gotpstub/tdesc"
)

// Fork events (gdb's fork-events and vfork-events, multiprocess only).
//
// When gdb offers them, a fork or vfork in the program stops it with
// "T05fork:pC.C;" (or "vfork:") and the child is held stopped by the
// inferior package. What gdb does next is what gdbserver serves:
//   - follow-fork-mode parent, detach-on-fork on (the default): "Hg" to the
//     child, "z" of every breakpoint there (the child's memory was cleaned
//     of them already, so these only update our record), "D;C";
//   - follow-fork-mode child: "D;P" for the parent, after which the child is
//     the process this stub debugs (Process.FollowForkChild);
//   - detach-on-fork off: the child stays held (listed as a thread of its
//     own process, its registers and memory readable and writable: gdb
//     restores a displaced step's scratch bytes there) until gdb resumes
//     it (it then becomes a side process: multiproc.go), detaches or kills
//     it, or detaches the parent (the child is then followed).

// heldBreakpoint is a Z packet gdb sent for a held fork child.
type heldBreakpoint struct {
	kind inferior.BreakpointKind
	addr uint64
	size int
}

// parseForkFeatures records the fork features gdb offered in qSupported.
func (s *Server) parseForkFeatures(features []string) {
	s.forkEvents, s.vforkEvents = false, false
	for _, f := range features {
		switch f {
		case "fork-events+":
			s.forkEvents = true
		case "vfork-events+":
			s.vforkEvents = true
		}
	}
}

// forkFeatures are the qSupported features announcing fork events.
func (s *Server) forkFeatures() []string {
	fork, vfork := s.negotiatedForks()
	var out []string
	if fork {
		out = append(out, "fork-events+")
	}
	if vfork {
		out = append(out, "vfork-events+")
	}
	return out
}

// negotiatedForks is what gdb offered and --disable-packet left, only with
// the multiprocess extensions, since a fork stop names another process.
func (s *Server) negotiatedForks() (fork, vfork bool) {
	if !s.multiprocess {
		return false, false
	}
	return s.forkEvents && !s.disabled("fork-events"), s.vforkEvents && !s.disabled("vfork-events")
}

// applyForkReporting tells the process which forks gdb wants reported.
func (s *Server) applyForkReporting() {
	for _, p := range s.processes() {
		p.SetReportForks(s.reportingForks())
	}
}

// reportingForks is what the connected gdb negotiated.
func (s *Server) reportingForks() (fork, vfork bool) {
	if s.conn == nil {
		return false, false
	}
	return s.negotiatedForks()
}

// releaseHeldForks stops reporting forks and lets every held child run
// undebugged (gdb went away: nobody would decide for them).
func (s *Server) releaseHeldForks() {
	s.heldBps = nil
	for _, p := range s.processes() {
		p.SetReportForks(false, false)
		p.DetachForkChildren()
	}
}

// heldChild returns the held fork child Hg selected, or 0.
func (s *Server) heldChild() int {
	if s.gThread <= 0 || !s.needProcess() || s.proc.Alive(s.gThread) {
		return 0
	}
	if s.proc.IsForkChild(s.gThread) {
		return s.gThread
	}
	return 0
}

// heldBreakpointPacket records a Z/z packet for a held child: its memory has
// none of our breakpoints; the ones gdb wants are inserted if the child is
// followed.
func (s *Server) heldBreakpointPacket(child int, kind inferior.BreakpointKind, addr uint64, size int, insert bool) []byte {
	if s.heldBps == nil {
		s.heldBps = map[int]map[heldBreakpoint]bool{}
	}
	bps := s.heldBps[child]
	if bps == nil {
		bps = map[heldBreakpoint]bool{}
		s.heldBps[child] = bps
	}
	key := heldBreakpoint{kind, addr, size}
	if insert {
		bps[key] = true
	} else {
		delete(bps, key)
	}
	return rsp.OK
}

// packetPid parses the pid of "D;PID" or "vKill;PID" (0 when absent).
func packetPid(pkt []byte) (int, error) {
	_, rest, ok := strings.Cut(string(pkt), ";")
	if !ok {
		return 0, nil
	}
	pid, err := strconv.ParseUint(rest, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("bad pid in %q: %w", pkt, err)
	}
	return int(pid), nil
}

// detachForked handles "D;PID" when fork children are held. It returns nil
// when the packet is an ordinary detach of the process.
func (s *Server) detachForked(pid int) []byte {
	if !s.needProcess() {
		return nil
	}
	if pid == 0 {
		return nil
	}
	children := s.proc.ForkChildren()
	if pid != s.proc.Pid() && !s.proc.IsForkChild(pid) {
		return rsp.ErrorMessage(fmt.Sprintf("no process %d", pid))
	}
	if len(children) == 0 {
		return nil
	}
	if s.proc.IsForkChild(pid) {
		if err := s.proc.DetachForkChild(pid); err != nil {
			s.logf("detach %d: %v", pid, err)
			return errReply(errNoProcess)
		}
		delete(s.heldBps, pid)
		s.progressf("Detaching from process %d\n", pid)
		return rsp.OK
	}
	// The parent goes: the held child becomes the debugged process.
	if len(children) != 1 {
		return rsp.ErrorMessage(fmt.Sprintf("process %d has %d fork children held: gotpstub can follow only one", pid, len(children)))
	}
	child := children[0]
	if s.trace.Running() {
		// The experiment's tracepoints live in the parent.
		s.traps.Flush()
		s.trace.OnInferiorExit()
	}
	parent := s.proc.Pid()
	if err := s.proc.FollowForkChild(child); err != nil {
		s.logf("follow fork child %d: %v", child, err)
		return rsp.ErrorMessage(fmt.Sprintf("following fork child %d: %v", child, err))
	}
	s.progressf("Detaching from process %d\n", parent)
	s.mu.Lock()
	s.lastPid = child
	s.attached = false
	s.lastStop = inferior.StopEvent{Kind: inferior.SignalStop, Tid: child, Signal: 5}
	s.mu.Unlock()
	s.gThread, s.cThread = child, 0
	s.tls = nil
	for bp := range s.heldBps[child] {
		if err := s.proc.InsertBreakpoint(bp.kind, bp.addr, bp.size); err != nil {
			s.logf("re-inserting %#x in %d: %v", bp.addr, child, err)
		}
	}
	s.heldBps = nil
	return rsp.OK
}

// killForked handles "vKill;PID" for a held fork child (nil otherwise).
func (s *Server) killForked(pkt []byte) []byte {
	pid, err := packetPid(pkt)
	if err != nil || pid == 0 || !s.needProcess() || pid == s.proc.Pid() {
		return nil
	}
	if !s.proc.IsForkChild(pid) {
		return rsp.ErrorMessage(fmt.Sprintf("no process %d", pid))
	}
	if err := s.proc.KillForkChild(pid); err != nil {
		s.logf("kill %d: %v", pid, err)
		return errReply(errNoProcess)
	}
	delete(s.heldBps, pid)
	return rsp.OK
}

// forkStopFields formats a stop's fork fields for a T reply, and notes
// that gdb is being told of the child.
func (s *Server) forkStopFields(ev inferior.StopEvent) string {
	if ev.ForkChild != 0 {
		if s.forkTold == nil {
			s.forkTold = map[int]bool{}
		}
		s.forkTold[ev.ForkChild] = true
	}
	switch {
	case ev.ForkChild != 0 && ev.VFork:
		return fmt.Sprintf("vfork:%s;", rsp.FormatThreadID(ev.ForkChild, ev.ForkChild, true))
	case ev.ForkChild != 0:
		return fmt.Sprintf("fork:%s;", rsp.FormatThreadID(ev.ForkChild, ev.ForkChild, true))
	case ev.VForkDone:
		return "vforkdone:;"
	}
	return ""
}

// threadRegisters reads the registers of the thread g/p act on, a held
// fork child included.
func (s *Server) threadRegisters() (*tdesc.Regs, error) {
	if c := s.heldChild(); c != 0 {
		return s.proc.ForkChildRegisters(c)
	}
	return s.proc.Registers(s.currentThread())
}

// setThreadRegisters writes the registers of the thread G/P act on, a
// held fork child included (gdb fixes up a child that forked during a
// displaced step).
func (s *Server) setThreadRegisters(regs *tdesc.Regs) error {
	if c := s.heldChild(); c != 0 {
		return s.proc.SetForkChildRegisters(c, regs)
	}
	return s.proc.SetRegisters(s.currentThread(), regs)
}

// listedThread is a thread qfThreadInfo lists, with the process that has
// it (or holds it, for a held fork child).
type listedThread struct {
	p   *inferior.Process
	tid int
}

// listedThreads are the threads qfThreadInfo lists: each process's (the
// main one's first, sorted), then the fork children they hold whose fork
// event gdb has been told of (as gdbserver does). A child whose event
// still waits (queued behind another stop in non-stop mode, kept, or not
// yet taken from the process) is left out: gdb, not knowing the fork,
// would take its thread for one of a new process of its own
// (gdb.threads/next-fork-other-thread.exp, non-stop).
func (s *Server) listedThreads() []listedThread {
	var out, held []listedThread
	told := map[int]bool{}
	for _, p := range s.processes() {
		ts := liveThreads(p)
		sort.Ints(ts)
		for _, t := range ts {
			out = append(out, listedThread{p, t})
		}
		for _, c := range p.ForkChildren() {
			if s.forkTold[c] {
				held = append(held, listedThread{p, c})
				told[c] = true
			}
		}
	}
	s.forkTold = told // children no longer held are forgotten
	return append(out, held...)
}

// liveThreads are p's threads, without a leader that has exited while
// the others run on.
func liveThreads(p *inferior.Process) []int {
	ts := p.Threads()
	if !p.LeaderExited() {
		return ts
	}
	return slices.DeleteFunc(ts, func(tid int) bool { return tid == p.Pid() })
}
