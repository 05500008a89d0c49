package server

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"gotpstub/agentexpr"
	"gotpstub/inferior"
	"gotpstub/rsp"
	"gotpstub/solib"
	"gotpstub/tdesc"
)

// Error codes used in E NN replies.
const (
	errNoProcess = 0x01
	errBadPacket = 0x02
	errMemory    = 0x0e // EFAULT-ish, what gdbserver answers for bad memory
	errThread    = 0x10
	errRegister  = 0x0f
)

func errReply(code int) []byte { return rsp.ErrorReply(code) }

// buildMux registers every packet the stub answers.
func (s *Server) buildMux() *rsp.Mux {
	m := rsp.NewMux()
	h := func(prefix string, fn rsp.Handler) {
		for _, d := range s.cfg.DisabledPackets {
			if d == prefix {
				return
			}
		}
		m.Handle(prefix, fn)
	}
	h("qSupported", s.qSupported)
	h("QStartNoAckMode", s.startNoAck)
	h("!", func([]byte) []byte { s.extended = true; return rsp.OK })
	h("?", s.haltReason)
	h("qC", s.qC)
	h("qfThreadInfo", s.threadInfoFirst)
	h("qsThreadInfo", func([]byte) []byte { return []byte("l") })
	h("qAttached", s.qAttached)
	h("qOffsets", func([]byte) []byte { return []byte{} })
	h("qSymbol", func([]byte) []byte { return rsp.OK })
	h("qRcmd,", s.monitor)
	h("qXfer:", s.qXfer)
	h("H", s.setThread)
	h("T", s.threadAlive)
	h("g", s.readRegisters)
	h("G", s.writeRegisters)
	h("p", s.readRegister)
	h("P", s.writeRegister)
	h("m", s.readMemory)
	h("M", s.writeMemory)
	h("X", s.writeMemoryBinary)
	h("Z", s.insertBreakpoint)
	h("z", s.removeBreakpoint)
	h("k", s.kill)
	h("vKill", s.kill)
	h("D", s.detach)
	h("QNonStop:", s.qNonStop)
	h("vStopped", s.vStopped)
	h("vCont?", func([]byte) []byte { return []byte("vCont;c;C;s;S;t;r") })
	h("vMustReplyEmpty", func([]byte) []byte { return []byte{} })
	h("vRun;", s.refusedIf(s.cfg.NoRunAttach, "--no-run-attach", s.vRun))
	h("vAttach;", s.refusedIf(s.cfg.NoRunAttach, "--no-run-attach", s.vAttach))
	h("vFile:", s.refusedIf(s.cfg.NoFileAccess, "--no-file-access", s.files.Handle))
	h("QPassSignals:", s.qPassSignals)
	h("QCatchSyscalls:", s.qCatchSyscalls)
	h("QProgramSignals:", s.qProgramSignals)
	h("QEnvironmentHexEncoded:", s.envSet)
	h("QEnvironmentUnset:", s.envUnset)
	h("QEnvironmentReset", func([]byte) []byte { s.env.reset(); return rsp.OK })
	h("QSetWorkingDir:", s.setWorkingDir)
	h("QStartupWithShell:", func([]byte) []byte { return rsp.OK })
	h("QDisableRandomization:", s.disableRandomization)
	h("QThreadEvents:", func([]byte) []byte { return rsp.OK })
	h("qGetTLSAddr:", s.qGetTLSAddr)
	h("qTfSTM", s.markersFirst)
	h("qTsSTM", s.markersNext)
	h("qTSTMat:", s.markersAt)
	// Everything else of the trace experiment goes to the engine.
	for _, p := range []string{"QT", "qT", "qXfer:traceframe-info:", "qXfer:statictrace:"} {
		h(p, s.tracePacket)
	}
	return m
}

// timingLog is where tstart's and tstop's times go: the debug log, or
// --timing's alone.
func (s *Server) timingLog() io.Writer {
	if s.cfg.Log != nil {
		return s.cfg.Log
	}
	return s.cfg.TimingLog
}

func (s *Server) tracePacket(pkt []byte) []byte {
	// The stub's own part of tstart/tstop (scripts/bench-insert.sh): its
	// time, and the CPU time the stub's threads spent meanwhile (what a
	// busy virtual machine's noise touches least). Other packets are not
	// timed: the engine gets many.
	name := string(pkt)
	timed := name == "QTStart" || name == "QTStop"
	var start time.Time
	var cpu time.Duration
	if timed {
		start, cpu = time.Now(), processCPU()
	}
	reply, ok := s.trace.HandlePacket(pkt)
	if !ok {
		return []byte{}
	}
	if w := s.timingLog(); timed && w != nil {
		fmt.Fprintf(w, "gotpstub: %s took %.1f ms, %.1f ms of CPU (%d tracepoints)\n", name, float64(time.Since(start).Microseconds())/1000,
			float64((processCPU()-cpu).Microseconds())/1000, len(s.trace.Tracepoints()))
	}
	if string(reply) == "OK" && strings.HasPrefix(string(pkt), "QTDP:") {
		s.logJIT(pkt)
	}
	return reply
}

func (s *Server) qSupported(pkt []byte) []byte {
	s.multiprocess, s.execEvents = false, false
	offered := strings.Split(strings.TrimPrefix(string(pkt), "qSupported:"), ";")
	s.parseForkFeatures(offered)
	for _, f := range offered {
		switch f {
		case "multiprocess+":
			s.multiprocess = true
		case "exec-events+":
			s.execEvents = true
		}
	}
	feats := []string{
		fmt.Sprintf("PacketSize=%x", rsp.MaxPacketSize),
		"QPassSignals+", "QProgramSignals+", "QCatchSyscalls+", "ConditionalBreakpoints+", "QStartupWithShell+",
		"QEnvironmentHexEncoded+", "QEnvironmentReset+", "QEnvironmentUnset+",
		"QSetWorkingDir+", "QDisableRandomization+",
		"qXfer:libraries-svr4:read+", "qXfer:auxv:read+", "qXfer:features:read+",
		"qXfer:exec-file:read+", "qXfer:threads:read+", "qXfer:siginfo:read+",
		"QStartNoAckMode+", "swbreak+", "hwbreak+", "vContSupported+",
		"QThreadEvents+", "QNonStop+",
	}
	if s.multiprocess {
		feats = append(feats, "multiprocess+")
	}
	if s.execEvents {
		feats = append(feats, "exec-events+")
	}
	feats = append(feats, s.forkFeatures()...)
	s.applyForkReporting()
	feats = append(feats, s.trace.Features()...)
	var out []string
	for _, f := range feats {
		name := strings.TrimRight(strings.SplitN(f, "=", 2)[0], "+-")
		if !s.disabled(name) {
			out = append(out, f)
		}
	}
	return []byte(strings.Join(out, ";"))
}

// refusedIf returns fn, or when refuse is set a handler that refuses the
// packet with an E.message naming the option that says so.
func (s *Server) refusedIf(refuse bool, option string, fn rsp.Handler) rsp.Handler {
	if !refuse {
		return fn
	}
	return func(pkt []byte) []byte {
		name, _, _ := strings.Cut(string(pkt), ";")
		name, _, _ = strings.Cut(name, ":")
		return rsp.ErrorMessage(fmt.Sprintf("%s refused: the stub runs with %s", name, option))
	}
}

func (s *Server) disabled(name string) bool {
	for _, d := range s.cfg.DisabledPackets {
		if d == name {
			return true
		}
	}
	return false
}

func (s *Server) startNoAck([]byte) []byte {
	if err := s.conn.Send(rsp.OK); err != nil {
		s.logf("QStartNoAckMode: %v", err)
	}
	s.conn.SetNoAck(true)
	return nil
}

// haltReason answers '?': the last stop, or W/X if the process is gone.
func (s *Server) haltReason([]byte) []byte {
	if s.proc == nil && s.ns.on.Load() {
		return rsp.OK // non-stop: no thread is stopped (there is none)
	}
	if s.proc == nil {
		if s.haveStop && s.exited {
			return s.stopReply(s.lastStop)
		}
		return []byte("W00")
	}
	if s.ns.on.Load() && !s.exited {
		return s.haltReasonNonStop()
	}
	return s.stopReply(s.lastStop)
}

func (s *Server) needProcess() bool { return s.proc != nil && !s.exited }

func (s *Server) qC([]byte) []byte {
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	return []byte("QC" + s.threadID(s.currentThread()))
}

// currentThread is the thread g/m/p act on: Hg's choice if alive, else the
// thread of the last stop, else the leader.
func (s *Server) currentThread() int {
	if s.gThread > 0 && s.alive(s.gThread) {
		return s.gThread
	}
	if s.lastStop.Tid > 0 && s.alive(s.lastStop.Tid) {
		return s.lastStop.Tid
	}
	ts := s.proc.Threads()
	if len(ts) > 0 {
		return ts[0]
	}
	return s.proc.Pid()
}

func (s *Server) threadInfoFirst([]byte) []byte {
	if !s.needProcess() {
		return []byte("l")
	}
	var b strings.Builder
	b.WriteByte('m')
	for i, t := range s.listedThreads() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.threadID(t.tid))
	}
	return []byte(b.String())
}

func (s *Server) qAttached([]byte) []byte {
	if s.attached {
		return []byte("1")
	}
	return []byte("0")
}

func (s *Server) setThread(pkt []byte) []byte {
	if len(pkt) < 3 {
		return errReply(errBadPacket)
	}
	pid, tid, err := rsp.ParseThreadID(string(pkt[2:]))
	if err != nil {
		return errReply(errBadPacket)
	}
	if !s.needProcess() && tid > 0 {
		return errReply(errThread)
	}
	sel, reply := s.selectProcess(int(pid), int(tid))
	if reply != nil {
		return reply
	}
	switch pkt[1] {
	case 'g':
		s.gThread = sel
	case 'c':
		s.cThread = sel
	default:
		return errReply(errBadPacket)
	}
	return rsp.OK
}

func (s *Server) threadAlive(pkt []byte) []byte {
	_, tid, err := rsp.ParseThreadID(string(pkt[1:]))
	if err != nil {
		return errReply(errBadPacket)
	}
	if p, _ := s.owner(int(tid)); p != nil && s.needProcess() {
		return rsp.OK
	}
	return errReply(errThread)
}

// ---- registers

func (s *Server) readRegisters([]byte) []byte {
	if regs, ok := s.trace.FrameRegisters(); ok {
		return encodeRegs(regs)
	}
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	regs, err := s.threadRegisters()
	if errors.Is(err, inferior.ErrRunning) && s.ns.on.Load() {
		// A thread running in non-stop mode has no registers to show:
		// every one unavailable, as gdbserver answers (gdb's gcore asks
		// for every thread's).
		return encodeRegs(s.layout.NewRegs())
	}
	if err != nil {
		s.logf("g: %v", err)
		return errReply(errRegister)
	}
	return encodeRegs(regs)
}

// encodeRegs hex-encodes a register block, with "xx" for unavailable registers.
func encodeRegs(regs *tdesc.Regs) []byte {
	out := []byte(hex.EncodeToString(regs.Data))
	if regs.Valid == nil {
		return out
	}
	for i, r := range regs.Layout.Regs {
		if i < len(regs.Valid) && !regs.Valid[i] {
			for j := r.Offset * 2; j < (r.Offset+r.Size)*2 && j < len(out); j++ {
				out[j] = 'x'
			}
		}
	}
	return out
}

func (s *Server) writeRegisters(pkt []byte) []byte {
	if s.trace.FrameSelected() {
		return rsp.ErrorMessage("cannot write registers while a trace frame is selected")
	}
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	data, err := hex.DecodeString(string(pkt[1:]))
	if err != nil {
		return errReply(errBadPacket)
	}
	regs, err := s.threadRegisters()
	if err != nil {
		return errReply(errRegister)
	}
	copy(regs.Data, data)
	if err := s.setThreadRegisters(regs); err != nil {
		s.logf("G: %v", err)
		return errReply(errRegister)
	}
	return rsp.OK
}

func (s *Server) readRegister(pkt []byte) []byte {
	n, err := strconv.ParseUint(string(pkt[1:]), 16, 32)
	if err != nil || int(n) >= len(s.layout.Regs) {
		return errReply(errBadPacket)
	}
	if regs, ok := s.trace.FrameRegisters(); ok {
		r := s.layout.Regs[n]
		if regs.Valid != nil && !regs.Valid[n] {
			return bytes.Repeat([]byte("xx"), r.Size)
		}
		return []byte(hex.EncodeToString(regs.Data[r.Offset : r.Offset+r.Size]))
	}
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	regs, err := s.threadRegisters()
	if err != nil {
		return errReply(errRegister)
	}
	return []byte(hex.EncodeToString(regs.Get(int(n))))
}

func (s *Server) writeRegister(pkt []byte) []byte {
	if s.trace.FrameSelected() {
		return rsp.ErrorMessage("cannot write registers while a trace frame is selected")
	}
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	eq := bytes.IndexByte(pkt, '=')
	if eq < 0 {
		return errReply(errBadPacket)
	}
	n, err := strconv.ParseUint(string(pkt[1:eq]), 16, 32)
	if err != nil || int(n) >= len(s.layout.Regs) {
		return errReply(errBadPacket)
	}
	val, err := hex.DecodeString(string(pkt[eq+1:]))
	if err != nil {
		return errReply(errBadPacket)
	}
	regs, err := s.threadRegisters()
	if err != nil {
		return errReply(errRegister)
	}
	if err := regs.Set(int(n), val); err != nil {
		return errReply(errBadPacket)
	}
	if err := s.setThreadRegisters(regs); err != nil {
		return errReply(errRegister)
	}
	return rsp.OK
}

// ---- memory

// parseAddrLen parses "ADDR,LEN" (both hex).
func parseAddrLen(s string) (uint64, int, error) {
	a, l, ok := strings.Cut(s, ",")
	if !ok {
		return 0, 0, errors.New("missing ','")
	}
	addr, err := strconv.ParseUint(a, 16, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("address: %w", err)
	}
	n, err := strconv.ParseUint(l, 16, 31)
	if err != nil {
		return 0, 0, fmt.Errorf("length: %w", err)
	}
	return addr, int(n), nil
}

func (s *Server) readMemory(pkt []byte) []byte {
	addr, n, err := parseAddrLen(string(pkt[1:]))
	if err != nil {
		return errReply(errBadPacket)
	}
	if max := (rsp.MaxPacketSize - 32) / 2; n > max {
		n = max
	}
	buf := make([]byte, n)
	var got int
	if s.trace.FrameSelected() {
		got, err = s.trace.FrameMemory(addr, buf)
	} else if c := s.heldChild(); c != 0 {
		got, err = s.proc.ReadForkChildMemory(c, addr, buf)
	} else if s.needProcess() {
		got, err = s.proc.ReadMemory(addr, buf)
	} else {
		return errReply(errNoProcess)
	}
	if got == 0 && n > 0 {
		s.logf("m %x,%x: %v", addr, n, err)
		return errReply(errMemory)
	}
	return []byte(hex.EncodeToString(buf[:got]))
}

func (s *Server) writeMemory(pkt []byte) []byte {
	head, data, ok := bytes.Cut(pkt[1:], []byte(":"))
	if !ok {
		return errReply(errBadPacket)
	}
	addr, n, err := parseAddrLen(string(head))
	if err != nil {
		return errReply(errBadPacket)
	}
	b, err := hex.DecodeString(string(data))
	if err != nil || len(b) != n {
		return errReply(errBadPacket)
	}
	return s.doWriteMemory(addr, b)
}

func (s *Server) writeMemoryBinary(pkt []byte) []byte {
	head, data, ok := bytes.Cut(pkt[1:], []byte(":"))
	if !ok {
		return errReply(errBadPacket)
	}
	addr, n, err := parseAddrLen(string(head))
	if err != nil {
		return errReply(errBadPacket)
	}
	b, err := rsp.UnescapeBinary(data)
	if err != nil || len(b) != n {
		return errReply(errBadPacket)
	}
	return s.doWriteMemory(addr, b)
}

func (s *Server) doWriteMemory(addr uint64, b []byte) []byte {
	if s.trace.FrameSelected() {
		return rsp.ErrorMessage("cannot write memory while a trace frame is selected")
	}
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	if len(b) == 0 {
		return rsp.OK
	}
	write := s.proc.WriteMemory
	if c := s.heldChild(); c != 0 {
		write = func(addr uint64, b []byte) error { return s.proc.WriteForkChildMemory(c, addr, b) }
	}
	if err := write(addr, b); err != nil {
		s.logf("write %x: %v", addr, err)
		return errReply(errMemory)
	}
	return rsp.OK
}

// ---- breakpoints

func (s *Server) breakpointArgs(pkt []byte) (inferior.BreakpointKind, uint64, int, bool) {
	parts := strings.Split(strings.SplitN(string(pkt[1:]), ";", 2)[0], ",")
	if len(parts) != 3 {
		return 0, 0, 0, false
	}
	var kind inferior.BreakpointKind
	switch parts[0] {
	case "0":
		kind = inferior.SoftwareBreakpoint
	case "1":
		kind = inferior.HardwareBreakpoint
	case "2":
		kind = inferior.WriteWatchpoint
	case "3":
		// x86 debug registers cannot trap reads alone: answer
		// "unsupported" so gdb emulates the read watchpoint with an
		// access watchpoint (Z4), as it does with gdbserver.
		if !inferior.ReadWatchpoints {
			return 0, 0, 0, false
		}
		kind = inferior.ReadWatchpoint
	case "4":
		kind = inferior.AccessWatchpoint
	default:
		return 0, 0, 0, false
	}
	addr, err1 := strconv.ParseUint(parts[1], 16, 64)
	size, err2 := strconv.ParseUint(parts[2], 16, 16)
	if err1 != nil || err2 != nil {
		return 0, 0, 0, false
	}
	return kind, addr, int(size), true
}

func (s *Server) insertBreakpoint(pkt []byte) []byte {
	kind, addr, size, ok := s.breakpointArgs(pkt)
	if !ok {
		return []byte{} // unsupported type: empty reply, gdb falls back
	}
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	if c := s.heldChild(); c != 0 {
		return s.heldBreakpointPacket(c, kind, addr, size, true)
	}
	exec := kind == inferior.SoftwareBreakpoint || kind == inferior.HardwareBreakpoint
	var conds []*agentexpr.Expr
	if _, opts, ok := strings.Cut(string(pkt), ";"); ok && exec {
		var err error
		if conds, err = parseBreakpointConds(opts); err != nil {
			return rsp.ErrorMessage(err.Error())
		}
	}
	traced := s.proc == s.traced() // the process tracepoints are in
	if exec && traced {
		// A fast tracepoint's jump over addr becomes a trap first.
		if err := s.traps.BreakpointInserted(addr); err != nil {
			s.logf("Z %x: %v", addr, err)
			s.traps.BreakpointRemoved(addr)
			return errReply(errMemory)
		}
	}
	if err := s.proc.InsertBreakpoint(kind, addr, size); err != nil {
		s.logf("Z %x: %v", addr, err)
		if exec && traced {
			s.traps.BreakpointRemoved(addr)
		}
		if errors.Is(err, inferior.ErrNoDebugHardware) {
			return []byte{} // unsupported: gdb says so, as with gdbserver
		}
		return errReply(errMemory)
	}
	if exec {
		s.setBreakpointConds(addr, conds)
	}
	return rsp.OK
}

func (s *Server) removeBreakpoint(pkt []byte) []byte {
	kind, addr, size, ok := s.breakpointArgs(pkt)
	if !ok {
		return []byte{}
	}
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	if c := s.heldChild(); c != 0 {
		return s.heldBreakpointPacket(c, kind, addr, size, false)
	}
	if err := s.proc.RemoveBreakpoint(kind, addr, size); err != nil {
		s.logf("z %x: %v", addr, err)
		return errReply(errMemory)
	}
	if kind == inferior.SoftwareBreakpoint || kind == inferior.HardwareBreakpoint {
		if s.proc == s.traced() {
			s.traps.BreakpointRemoved(addr)
		}
		s.setBreakpointConds(addr, nil)
	}
	return rsp.OK
}

// ---- process lifetime

func (s *Server) kill(pkt []byte) []byte {
	if reply := s.killOneOfSeveral(pkt); reply != nil {
		return reply
	}
	if reply := s.killForked(pkt); reply != nil {
		return reply
	}
	s.endSides(false)
	if s.proc != nil {
		if s.trace.Running() {
			s.trace.OnInferiorExit()
		}
		if !s.exited {
			if err := s.proc.Kill(); err != nil {
				s.logf("kill: %v", err)
			}
		}
		s.proc.Close()
		s.proc = nil
		s.main = nil
		s.exited = true
		s.lastStop = inferior.StopEvent{Kind: inferior.Killed, Signal: 9}
	}
	if !s.extended && !s.cfg.Multi {
		// gdbserver exits after 'k' outside extended mode; the reply is
		// the last thing gdb sees.
		_ = s.conn.Send(rsp.OK)
		s.exitReq = true
		return nil
	}
	return rsp.OK
}

func (s *Server) detach(pkt []byte) []byte {
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	pid, err := packetPid(pkt)
	if err != nil {
		return errReply(errBadPacket)
	}
	if reply := s.detachOneOfSeveral(pid); reply != nil {
		return reply
	}
	if reply := s.detachForked(pid); reply != nil {
		return reply
	}
	s.endSides(true)
	if s.trace.Running() {
		s.trace.OnDisconnect()
	}
	if err := s.proc.Detach(); err != nil {
		s.logf("detach: %v", err)
		return errReply(errNoProcess)
	}
	s.proc.Close()
	s.proc = nil
	s.main = nil
	s.exited = true
	s.haveStop = false
	if !s.extended && !s.cfg.Multi {
		_ = s.conn.Send(rsp.OK)
		s.exitReq = true
		return nil
	}
	return rsp.OK
}

func (s *Server) vRun(pkt []byte) []byte {
	fields := strings.Split(string(pkt[len("vRun;"):]), ";")
	var argv []string
	for _, f := range fields {
		b, err := hex.DecodeString(f)
		if err != nil {
			return errReply(errBadPacket)
		}
		argv = append(argv, string(b))
	}
	if len(argv) == 0 || argv[0] == "" {
		if len(s.program) == 0 {
			return rsp.ErrorMessage("no program to run")
		}
		if len(argv) <= 1 {
			argv = s.program
		} else {
			argv = append([]string{s.program[0]}, argv[1:]...)
		}
	}
	if s.proc != nil {
		if !s.exited {
			_ = s.proc.Kill()
		}
		s.proc.Close()
		s.proc = nil
		s.main = nil
	}
	if err := s.Launch(argv); err != nil {
		s.logf("vRun: %v", err)
		return rsp.ErrorMessage(err.Error())
	}
	return s.stopReply(s.lastStop)
}

func (s *Server) vAttach(pkt []byte) []byte {
	pid, err := strconv.ParseUint(string(pkt[len("vAttach;"):]), 16, 31)
	if err != nil {
		return errReply(errBadPacket)
	}
	if s.needProcess() {
		return rsp.ErrorMessage("already debugging a process")
	}
	if s.proc != nil {
		s.proc.Close()
		s.proc = nil
		s.main = nil
	}
	if err := s.Attach(int(pid)); err != nil {
		return rsp.ErrorMessage(err.Error())
	}
	if s.ns.on.Load() {
		return s.attachedNonStop()
	}
	return s.stopReply(s.lastStop)
}

// ---- signals and environment

func parseSignalList(pkt []byte, prefix string) (map[int]bool, error) {
	m := map[int]bool{}
	body := strings.TrimPrefix(string(pkt), prefix)
	if body == "" {
		return m, nil
	}
	for _, f := range strings.Split(body, ";") {
		if f == "" {
			continue // gdb ends the list with ';'
		}
		g, err := strconv.ParseUint(f, 16, 16)
		if err != nil {
			return nil, err
		}
		if h, ok := GDBToHostSignal(int(g)); ok {
			m[h] = true
		}
	}
	return m, nil
}

func (s *Server) qPassSignals(pkt []byte) []byte {
	m, err := parseSignalList(pkt, "QPassSignals:")
	if err != nil {
		return errReply(errBadPacket)
	}
	s.passSignals = m
	for _, p := range s.processes() {
		// The process hands these straight back to the thread they
		// stopped; the rest come here (resume's passOn covers the
		// cases it leaves to us: a thread gdb is stepping, faults).
		p.SetPassSignals(m)
	}
	return rsp.OK
}

func (s *Server) qProgramSignals(pkt []byte) []byte {
	m, err := parseSignalList(pkt, "QProgramSignals:")
	if err != nil {
		return errReply(errBadPacket)
	}
	s.progSignals = m
	return rsp.OK
}

func (s *Server) envSet(pkt []byte) []byte {
	b, err := hex.DecodeString(strings.TrimPrefix(string(pkt), "QEnvironmentHexEncoded:"))
	if err != nil {
		return errReply(errBadPacket)
	}
	k, v, _ := strings.Cut(string(b), "=")
	s.env.set(k, v)
	return rsp.OK
}

func (s *Server) envUnset(pkt []byte) []byte {
	b, err := hex.DecodeString(strings.TrimPrefix(string(pkt), "QEnvironmentUnset:"))
	if err != nil {
		return errReply(errBadPacket)
	}
	s.env.unset(string(b))
	return rsp.OK
}

func (s *Server) setWorkingDir(pkt []byte) []byte {
	b, err := hex.DecodeString(strings.TrimPrefix(string(pkt), "QSetWorkingDir:"))
	if err != nil {
		return errReply(errBadPacket)
	}
	s.workDir = string(b)
	return rsp.OK
}

func (s *Server) disableRandomization(pkt []byte) []byte {
	s.cfg.DisableRandomization = strings.HasSuffix(string(pkt), ":1")
	return rsp.OK
}

// environment is the environment launched programs get, in a stable order.
type environment struct {
	initial []string
	vars    map[string]string
	order   []string
}

func newEnvironment(initial []string) *environment {
	e := &environment{initial: initial}
	e.reset()
	return e
}

func (e *environment) reset() {
	e.vars = map[string]string{}
	e.order = nil
	for _, kv := range e.initial {
		k, v, _ := strings.Cut(kv, "=")
		e.set(k, v)
	}
}

func (e *environment) set(k, v string) {
	if _, ok := e.vars[k]; !ok {
		e.order = append(e.order, k)
	}
	e.vars[k] = v
}

func (e *environment) unset(k string) {
	delete(e.vars, k)
}

func (e *environment) list() []string {
	var out []string
	for _, k := range e.order {
		if v, ok := e.vars[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// ---- qXfer

// qXfer serves qXfer:OBJECT:read:ANNEX:OFFSET,LENGTH from a document built
// on the first read at offset 0.
func (s *Server) qXfer(pkt []byte) []byte {
	parts := strings.SplitN(string(pkt), ":", 5)
	if len(parts) != 5 || parts[2] != "read" {
		return []byte{}
	}
	object, annex := parts[1], parts[3]
	off, n, err := parseAddrLen(parts[4])
	if err != nil {
		return errReply(errBadPacket)
	}
	key := object + ":" + annex
	doc, ok := s.xfer[key]
	if !ok || off == 0 {
		doc, err = s.xferDocument(object, annex)
		if err != nil {
			s.logf("qXfer %s: %v", key, err)
			if errors.Is(err, errUnknownObject) {
				return []byte{}
			}
			return rsp.ErrorMessage(err.Error())
		}
		s.xfer[key] = doc
	}
	if off >= uint64(len(doc)) {
		delete(s.xfer, key)
		return []byte("l")
	}
	end := off + uint64(n)
	prefix := byte('m')
	if end >= uint64(len(doc)) {
		end = uint64(len(doc))
		prefix = 'l'
	}
	chunk := doc[off:end]
	// Escaping may grow the chunk; keep under the packet size.
	esc := rsp.EscapeBinary(chunk)
	for len(esc) > rsp.MaxPacketSize-8 && len(chunk) > 1 {
		chunk = chunk[:len(chunk)/2]
		prefix = 'm'
		esc = rsp.EscapeBinary(chunk)
	}
	return append([]byte{prefix}, esc...)
}

var errUnknownObject = errors.New("unknown qXfer object")

func (s *Server) xferDocument(object, annex string) ([]byte, error) {
	switch object {
	case "features":
		doc, ok := s.layout.XML(annex)
		if !ok {
			return nil, fmt.Errorf("no target description %q", annex)
		}
		return doc, nil
	}
	if !s.needProcess() {
		return nil, errors.New("no process")
	}
	switch object {
	case "auxv":
		return s.proc.Auxv()
	case "exec-file":
		p, err := s.proc.ExePath()
		return []byte(p), err
	case "threads":
		return s.threadsXML(), nil
	case "libraries-svr4":
		auxv, err := s.proc.Auxv()
		if err != nil {
			return nil, err
		}
		return solib.LibraryListSVR4(s.proc, auxv)
	case "siginfo":
		return s.proc.Siginfo(s.currentThread())
	}
	return nil, errUnknownObject
}

func (s *Server) threadsXML() []byte {
	var b strings.Builder
	b.WriteString("<?xml version=\"1.0\"?>\n<threads>\n")
	for _, t := range s.listedThreads() {
		fmt.Fprintf(&b, "<thread id=\"%s\"", s.threadID(t.tid))
		if name := t.p.ThreadName(t.tid); name != "" {
			fmt.Fprintf(&b, " name=\"%s\"", xmlEscape(name))
		}
		b.WriteString("/>\n")
	}
	b.WriteString("</threads>\n")
	return []byte(b.String())
}

func xmlEscape(v string) string {
	var b bytes.Buffer
	for _, r := range v {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// ---- monitor commands

const monitorHelp = "The following monitor commands are supported:\n" +
	"  set debug <0|1>\n    Enable general debugging messages\n" +
	"  set remote-debug <0|1>\n    Enable remote protocol debugging messages\n" +
	"  ftrace\n    How each installed tracepoint is placed: jump (covered bytes, pad, int3 heads) or trap, and why\n" +
	"  exit\n    Quit gotpstub\n"

func (s *Server) monitor(pkt []byte) []byte {
	cmdb, err := hex.DecodeString(string(pkt[len("qRcmd,"):]))
	if err != nil {
		return errReply(errBadPacket)
	}
	cmd := strings.TrimSpace(string(cmdb))
	out := func(text string) {
		_ = s.conn.Send([]byte("O" + hex.EncodeToString([]byte(text))))
	}
	switch {
	case cmd == "help":
		out(monitorHelp)
	case cmd == "ftrace":
		if s.traps == nil {
			out("no process\n")
		} else {
			out(s.traps.Placements())
		}
	case cmd == "exit":
		s.exitReq = true
		_ = s.conn.Send(rsp.OK)
		return nil
	case strings.HasPrefix(cmd, "set debug "):
		if strings.HasSuffix(cmd, "1") {
			s.cfg.Log = s.cfg.Progress
		} else {
			s.cfg.Log = nil
		}
	case strings.HasPrefix(cmd, "set remote-debug "):
		if strings.HasSuffix(cmd, "1") {
			s.conn.SetLog(s.cfg.Progress)
		} else {
			s.conn.SetLog(nil)
		}
	default:
		out(fmt.Sprintf("Unknown monitor command.\n\n%s", monitorHelp))
	}
	return rsp.OK
}

// alive reports whether tid is a live thread of the current process.
func (s *Server) alive(tid int) bool {
	return s.needProcess() && s.proc.Alive(tid)
}

// threadID formats a thread id for gdb: "pPID.TID" once gdb and the stub
// agreed on the multiprocess extensions, the bare tid otherwise.
func (s *Server) threadID(tid int) string {
	pid := tid
	if p, held := s.owner(tid); p != nil && !held {
		pid = p.Pid()
	} else if p == nil && s.proc != nil {
		pid = s.proc.Pid()
	}
	return rsp.FormatThreadID(pid, tid, s.multiprocess)
}

// processCPU returns the CPU time (user and system) the stub's threads
// have used; 0 when the kernel does not say.
func processCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
