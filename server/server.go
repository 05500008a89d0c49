// Package server implements gdbserver's packet semantics on top of the
// remote-protocol framing (rsp), process control (inferior) and the trace
// engine (tracing). One Server serves one gdb connection at a time; the
// process it controls outlives connections (reconnection, disconnected
// tracing, --multi). It serves the program's SDT probes as static
// tracepoint markers (markers.go), evaluates breakpoint conditions gdb
// sends with Z packets (condbreak.go) and tells the fast-tracepoint
// installer of gdb's breakpoints (a breakpoint inside a jump's bytes).
// In no-ack mode, packets that cannot resume the program or end the
// session are handled on the connection's reader goroutine, the others
// on Serve's, one at a time and in order (dispatch.go). In non-stop mode
// (nonstop.go) every packet goes to Serve's goroutine, which also turns
// the processes' events into %Stop notifications. Fork children gdb
// resumes are debugged as processes of their own beside the one launched
// or attached, which the trace experiment lives in (multiproc.go).
package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"gotpstub/agentexpr"
	"gotpstub/fasttp"
	"gotpstub/hostio"
	"gotpstub/inferior"
	"gotpstub/prio"
	"gotpstub/rsp"
	"gotpstub/sdt"
	"gotpstub/tdesc"
	"gotpstub/tracing"
	"gotpstub/trapfallback"
)

// Config holds what the command line decided.
type Config struct {
	// Extended is true with --multi: gdb may use extended-remote (run,
	// attach, kill, run again) and the stub outlives its process.
	Multi bool
	// Once: exit after the first connection closes.
	Once bool
	// Wrapper is the --wrapper command run before launched programs.
	Wrapper []string
	// DisableRandomization makes launched programs run without ASLR (gdbserver's default).
	DisableRandomization bool
	// KillOnStubExit kills launched programs when the stub dies
	// (PTRACE_O_EXITKILL); by default they outlive a crashed stub.
	KillOnStubExit bool
	// DisabledPackets lists packet names disabled with --disable-packet.
	DisabledPackets []string
	// Safety switches for a shared host: NoFileAccess refuses vFile
	// (gdb's remote file access), NoRunAttach refuses vRun and vAttach
	// (starting or attaching to programs from gdb), NoSave refuses
	// QTSave (tsave -r writes a file on this machine) and SaveDir
	// confines QTSave to a directory.
	NoFileAccess, NoRunAttach, NoSave bool
	SaveDir                           string
	// TraceRingSize is the size of the ring fast tracepoints write to
	// inside the inferior (--trace-ring-size); 0 means fasttp's default.
	TraceRingSize uint64
	// ThreadLaneAhead is how much of a new thread's lane the stub
	// prepares before the thread runs (--thread-lane-ahead); nil means
	// fasttp's default.
	ThreadLaneAhead *uint64
	// FtraceShapes restricts the jump shapes fast tracepoints may take
	// (--ftrace-shapes); nil allows all.
	FtraceShapes map[fasttp.Shape]bool
	// LivePatch has code changed with the threads running in non-stop
	// mode (--live-patch, on by default where
	// inferior.LivePatchByDefault: inferior.Process.SetLivePatching)
	// instead of pausing every running thread for it.
	LivePatch bool
	// Log receives debug messages (--debug); nil disables them.
	Log io.Writer
	// TimingLog receives the time tstart and tstop take (--timing, and
	// Log's too); nil disables it.
	TimingLog io.Writer
	// PacketLog receives the packet log (--remote-debug); nil disables it.
	PacketLog io.Writer
	// Progress receives the lines gdbserver prints (process created, exit).
	Progress io.Writer
	// Guard, when set, hears of every int3 in the debugged process
	// (package guard's watchdog takes them out if the stub dies).
	Guard inferior.Guard
	// Stdin and Stdout, when set, replace the standard input and output
	// launched programs inherit (gdbserver's stdio mode keeps the
	// protocol off the program's output this way).
	Stdin, Stdout *os.File
}

// Server is the stub: one process launched or attached (or none, in
// --multi mode) with the trace experiment that lives with it, and the
// fork children of it gdb resumed (multiproc.go).
type Server struct {
	cfg Config

	mu sync.Mutex // guards proc and exit state against the trace hit path
	// proc is the process packets act on (multiproc.go): main, or a side
	// process Hg named or whose stop was reported last.
	proc *inferior.Process
	// main is the process launched or attached; sides are fork children
	// gdb resumed while their parent is debugged, by pid.
	main  *inferior.Process
	sides map[int]*inferior.Process
	// several: the resumption in progress runs every process
	// (runSeveral); kept are events of processes stopped by another's,
	// reported at their next resumption.
	several  bool
	kept     map[int]inferior.StopEvent
	attached bool
	exited   bool // the process has exited; lastStop says how
	lastStop inferior.StopEvent
	haveStop bool
	program  []string // argv used for the last launch (for vRun without args)

	conn     *rsp.Conn
	mux      *rsp.Mux
	extended bool // gdb sent '!'
	// multiprocess: gdb offered the multiprocess extensions in
	// qSupported; thread ids are then pPID.TID.
	multiprocess bool
	// execEvents: gdb understands exec stop reasons (exec-events).
	execEvents bool
	// forkEvents, vforkEvents: gdb offered fork-events / vfork-events
	// (reported only with multiprocess; fork.go).
	forkEvents, vforkEvents bool
	// heldBps: Z packets gdb sent for held fork children, by pid.
	heldBps map[int]map[heldBreakpoint]bool
	// forkTold: the held fork children whose fork event a stop reply
	// has told gdb of; only those are listed (listedThreads).
	forkTold map[int]bool
	lastPid  int  // pid of the current or last process
	exitReq  bool // monitor exit
	disp     dispatchState
	ns       nonStopState // gdb's non-stop mode (nonstop.go)

	gThread, cThread int // Hg / Hc selections (0 = any, -1 = all)

	env         *environment
	workDir     string
	passSignals map[int]bool
	// catchSyscalls is gdb's last QCatchSyscalls.
	catchSyscalls syscallCatch
	// bpConds are the target-side conditions of breakpoints, by address
	// (condbreak.go).
	bpConds     map[uint64][]*agentexpr.Expr
	progSignals map[int]bool // nil = all signals go to the program

	layout *tdesc.Layout
	trace  *tracing.Engine
	traps  *fasttp.Installer // jump pads, with trapfallback behind them
	// markers are the process's SDT probes (static tracepoint markers);
	// markerList what qTsSTM still has to send.
	markers    *markerSource
	markerList []sdt.Located
	files      *hostio.Server
	xfer       map[string][]byte // documents being read in pieces, by object:annex
	threadX    []byte
	tls        *tlsResolver // qGetTLSAddr: resolver of the current libc mapping
}

// New returns a server with no process yet.
func New(cfg Config) *Server {
	if cfg.Progress == nil {
		cfg.Progress = os.Stderr
	}
	s := &Server{
		cfg:         cfg,
		env:         newEnvironment(os.Environ()),
		passSignals: map[int]bool{},
		layout:      tdesc.Host(),
		files:       hostio.NewServer(),
		xfer:        map[string][]byte{},
		ns:          newNonStopState(),
	}
	s.trace = tracing.NewEngine(tracing.Config{Layout: s.layout, Live: liveMemory{s},
		NoSave: cfg.NoSave, SaveDir: cfg.SaveDir})
	// Every process gets a fasttp.Installer (setProcess): ftrace places
	// jump pads where it can and traps elsewhere.
	s.trace.SetFastTracepoints(true)
	s.mux = s.buildMux()
	return s
}

// liveMemory reads the current process's memory for the trace engine.
type liveMemory struct{ s *Server }

func (l liveMemory) ReadMemory(addr uint64, buf []byte) (int, error) {
	p := l.s.proc
	if p == nil {
		return 0, errors.New("no process")
	}
	return p.ReadMemory(addr, buf)
}

// CodeSpan implements tracing.CodeSpanner.
func (l liveMemory) CodeSpan(addr uint64, n int) int {
	if p := l.s.proc; p != nil {
		return p.CodeSpan(addr, n)
	}
	return 0
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Log != nil {
		fmt.Fprintf(s.cfg.Log, "gotpstub: "+format+"\n", args...)
	}
}

func (s *Server) progressf(format string, args ...any) {
	fmt.Fprintf(s.cfg.Progress, format, args...)
}

// Launch starts argv as the debugged process, stopped at its first
// instruction, and prints gdbserver's "Process ... created" line.
func (s *Server) Launch(argv []string) error {
	if len(argv) == 0 {
		return errors.New("no program to run")
	}
	// Programs are executed directly, never through a shell (see README:
	// QStartupWithShell is accepted but has no effect).
	p, err := inferior.Launch(inferior.LaunchOptions{
		Path:             argv[0],
		Args:             argv,
		Env:              s.env.list(),
		Dir:              s.workDir,
		Wrapper:          s.cfg.Wrapper,
		DisableASLR:      s.cfg.DisableRandomization,
		KillOnTracerExit: s.cfg.KillOnStubExit,
		Stdin:            s.cfg.Stdin,
		Stdout:           s.cfg.Stdout,
	})
	if err != nil {
		return err // it names the program
	}
	s.program = append([]string(nil), argv...)
	s.setProcess(p, false)
	s.progressf("Process %s created; pid = %d\n", argv[0], p.Pid())
	return nil
}

// Attach takes control of a running process and all its threads.
func (s *Server) Attach(pid int) error {
	p, err := inferior.Attach(pid)
	if err != nil {
		return err // it names the process
	}
	s.setProcess(p, true)
	s.progressf("Attached; pid = %d\n", pid)
	return nil
}

func (s *Server) setProcess(p *inferior.Process, attached bool) {
	s.mu.Lock()
	s.proc = p
	s.main = p
	s.sides = nil
	s.lastPid = p.Pid()
	s.attached = attached
	s.exited = false
	s.haveStop = true
	s.lastStop = inferior.StopEvent{Kind: inferior.SignalStop, Tid: p.Pid(), Signal: 5}
	if attached {
		// gdbserver reports an attached process as stopped with signal 0
		// (T00): gdb then resumes it with no signal. Reporting the
		// SIGSTOP of the attach would have gdb pass it back on continue,
		// stopping the program again.
		s.lastStop.Signal = 0
	}
	s.mu.Unlock()
	if s.cfg.Guard != nil {
		p.SetGuard(s.cfg.Guard)
	}
	s.gThread, s.cThread = 0, 0
	s.xfer = map[string][]byte{}
	traps := trapfallback.New(p, s.trace)
	s.traps = fasttp.New(p, s.trace, traps, s.logf)
	s.traps.SetShapes(s.cfg.FtraceShapes)
	p.SetLivePatching(s.cfg.LivePatch)
	if s.cfg.TraceRingSize != 0 {
		if err := s.traps.SetRingSize(s.cfg.TraceRingSize); err != nil {
			s.logf("%v", err)
		}
	}
	if n := s.cfg.ThreadLaneAhead; n != nil {
		s.traps.SetThreadLaneAhead(*n)
	}
	s.trace.SetInstaller(s.traps) // jump pads, with the trap installer behind them
	s.markers = &markerSource{pid: p.Pid()}
	s.markerList = nil
	s.trace.SetStaticData(s.markers)
	if s.ns.on.Load() {
		if err := p.SetNonStop(true); err != nil {
			s.logf("non-stop: %v", err)
		}
		s.ns.resetThreads()
	}
	p.SetPassSignals(s.passSignals)
	p.SetCatchSyscalls(s.catchSyscalls.on, s.catchSyscalls.nrs)
	s.heldBps = nil
	s.applyForkReporting()
}

// HasProcess reports whether a live process is being debugged.
func (s *Server) HasProcess() bool {
	return s.proc != nil && !s.exited
}

// ExitRequested reports whether gdb asked the stub to exit (monitor exit).
func (s *Server) ExitRequested() bool { return s.exitReq }

// Serve handles one gdb connection until it closes. It returns nil when
// the client went away or asked the stub to exit.
func (s *Server) Serve(rw io.ReadWriteCloser) error {
	// gdb waits for this goroutine's answers (a packet times out after
	// 2 s): a program keeping every CPU busy must not starve it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer prio.Raise(unix.Gettid())()
	s.disp = dispatchState{}
	s.conn = rsp.NewConnDispatch(rw, s.inlineDispatch)
	if s.cfg.PacketLog != nil {
		s.conn.SetLog(s.cfg.PacketLog)
	}
	s.conn.Start() // the dispatch function uses s.conn
	defer s.conn.Close()
	s.extended = false
	in := s.conn.Incoming()
	for {
		var pkt rsp.Packet
		var ok bool
		select {
		case pkt, ok = <-in:
		case w := <-s.ns.events:
			// Non-stop: an event of a thread gdb has running.
			if err := s.onAsyncStop(w); err != nil {
				return err
			}
			s.settleSteps()
			continue
		}
		if !ok {
			break
		}
		if pkt.Interrupt {
			s.handledOne()
			continue // nothing is running: gdbserver ignores it too
		}
		err := s.handle(pkt.Data)
		s.handledOne()
		if err != nil {
			return err
		}
		if s.exitReq {
			return nil
		}
	}
	s.disp.mu.Lock()
	err := s.disp.err
	s.disp.mu.Unlock()
	if err != nil {
		return err
	}
	s.onDisconnect()
	return nil
}

// settleSteps ends the single-step state the stopped threads keep
// (inferior.SettleSteps) before the stub waits for gdb: should the stub
// die then, the program runs on instead of dying of SIGTRAP.
func (s *Server) settleSteps() {
	for _, p := range s.processes() {
		if err := p.SettleSteps(); err != nil {
			s.logf("%v", err)
		}
	}
}

// onDisconnect does what gdbserver does when gdb vanishes.
func (s *Server) onDisconnect() {
	if s.ns.on.Load() {
		s.leaveNonStop()
	}
	s.releaseHeldForks()
	s.endSides(true)
	s.trace.OnDisconnect()
	s.files.CloseAll()
}

// Shutdown kills a launched process or detaches from an attached one.
func (s *Server) Shutdown() {
	s.endSides(false)
	if s.proc == nil {
		return
	}
	if s.trace.Running() {
		s.trace.OnInferiorExit()
	}
	if !s.exited {
		if s.attached {
			if err := s.proc.Detach(); err != nil {
				s.logf("detach: %v", err)
			}
		} else if err := s.proc.Kill(); err != nil {
			s.logf("kill: %v", err)
		}
	}
	s.proc.Close()
	s.proc = nil
	s.main = nil
}

// handle answers one packet (and, for resumption packets, runs the
// process until it stops and sends the stop reply).
func (s *Server) handle(pkt []byte) error {
	defer s.settleSteps()
	if isResume(pkt) {
		if s.ns.on.Load() {
			return s.resumeNonStop(pkt)
		}
		return s.resume(pkt)
	}
	if s.pausesThreads(pkt) {
		done, paused := s.holdForCodeChange(string(pkt[:min(len(pkt), 8)]))
		defer done()
		if paused {
			// No paused thread may be left inside a pad the packet
			// could take away or reuse. Live, threads stopped for gdb
			// left the pads when their stop was reported (flushTraps);
			// others may be stopped a moment for the stub's own work
			// and are not to be stepped: the memory of a jump taken
			// out is reused only once no thread is inside (fasttp's
			// quarantine).
			s.traps.Stabilize()
		}
	}
	reply, ok := s.mux.Dispatch(pkt)
	if !ok {
		reply = []byte{}
	}
	if reply == nil {
		return nil // the handler already replied (or must not reply)
	}
	if err := s.conn.Send(reply); err != nil {
		return fmt.Errorf("sending reply: %w", err)
	}
	return nil
}
