// Command gotpstub is a GDB remote-protocol stub for Linux, a drop-in
// replacement for gdbserver whose speciality is tracepoints.
//
//	gotpstub [OPTIONS] COMM PROG [ARGS ...]
//	gotpstub [OPTIONS] --attach COMM PID
//	gotpstub [OPTIONS] --multi COMM
//	gotpstub explain HEX
//	gotpstub check [NAME ...]
//	gotpstub coverage [--json] FILE...
//	gotpstub export --format json|ctf|perfetto [-o OUT] TRACEFILE
//
// COMM is [HOST]:PORT (TCP; an omitted host means loopback only unless
// --listen-all is given), "stdio" or "-" (the stub's stdin/stdout), or a
// path (a unix-domain socket).
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"gotpstub/fasttp"
	"gotpstub/guard"
	"gotpstub/inferior"
	"gotpstub/rsp"
	"gotpstub/server"
)

const version = "0.1.0"

const usage = `Usage:	gotpstub [OPTIONS] COMM PROG [ARGS ...]
	gotpstub [OPTIONS] --attach COMM PID
	gotpstub [OPTIONS] --multi COMM
	gotpstub explain HEX
	gotpstub check [NAME ...]
	gotpstub coverage [--json] FILE...
	gotpstub export --format json|ctf|perfetto [-o OUT] TRACEFILE

COMM may be HOST:PORT to listen for a TCP connection (":PORT" listens on
the loopback interface only, unless --listen-all is given), '-' or 'stdio'
to use stdin/stdout of gotpstub, or a path to listen on a unix socket.
PROG is the executable program.  ARGS are arguments passed to inferior.
PID is the process ID to attach to, when --attach is specified.

Operating modes:

  --attach              Attach to running process PID.
  --multi               Start server without a specific program, and
                        only quit when explicitly commanded.
  --once                Exit after the first connection has closed.
  --help                Print this message and then exit.
  --version             Display version information and exit.

Other options:

  --wrapper WRAPPER --  Run WRAPPER to start new programs.
  --disable-randomization
                        Run PROG with address space randomization disabled.
  --no-disable-randomization
                        Don't disable address space randomization when
                        starting PROG.
  --startup-with-shell, --no-startup-with-shell
                        Accepted for compatibility; PROG is always executed
                        directly (no shell globbing or substitution).
  --listen-all          With ":PORT", listen on every interface instead of
                        loopback only (anyone who reaches the port controls
                        the program: gotpstub warns).
  --kill-on-stub-exit   Have the kernel kill a launched PROG if gotpstub
                        dies (SIGKILL, crash) before killing or detaching
                        it (gdbserver's behaviour).  By default PROG is
                        left running: a watchdog process takes the
                        breakpoints and tracepoints out of it.

Safety switches (for a shared host; a unix socket is always created 0600):

  --no-file-access      Refuse gdb's remote file access (vFile).
  --no-run-attach       Refuse starting or attaching to programs from gdb
                        (vRun, vAttach: run and attach with --multi).
  --no-tsave            Refuse tsave -r (QTSave: a file written here).
  --tsave-dir=DIR       Let tsave -r write only inside DIR (a relative name
                        is taken inside it; symlinks are not followed).

Debug options:

  --debug               Enable general debugging output.
  --remote-debug        Enable remote protocol debugging output.
  --timing              Log only how long tstart and tstop take (the
                        stub's own part, and its CPU time).
  --debug-file=FILE     Write debugging output to FILE.
  --trace-ring-size=N   Bytes of each lane fast tracepoints write to inside
                        the program (memory shared with the stub; a thread
                        gets a lane of its own, up to 16; a power of two;
                        default: four times gdb's trace-buffer-size, 8 to
                        32 MiB). A hit that finds its lane full is
                        dropped and counted in tstatus' notes.
  --thread-lane-ahead=N Bytes of a new thread's lane the stub allocates
                        and maps before the thread runs, while a run
                        with fast tracepoints collects (default 4 MiB,
                        about 4 ms of the thread's start, once per lane;
                        0: none, the thread starts at once and its pads
                        take the page faults of the lane's first lap).
  --live-patch[=on|off] In gdb's non-stop mode, put fast tracepoints' jumps
                        in and take them out with the threads running
                        (int3 first, membarrier SYNC_CORE, tail, first
                        byte) instead of pausing every thread for it.
                        On by default on x86-64; off (pausing) on arm64,
                        whose jumps are always written with the threads
                        paused (a running thread gets a trap there).
  --ftrace-shapes=LIST  Jump shapes fast tracepoints may take, comma-
                        separated: plain, kept (successor-preserving
                        pun), short (jmp rel8 to padding or into a
                        neighbour), evict (the next instruction moved to
                        a trampoline), int3 (int3s at covered heads),
                        push (those shapes after a function entry's push
                        where none fits at the entry), or all (the
                        default). Without a fitting shape a fast
                        tracepoint is a trap.
  --debug-format=OPTS   Accepted for compatibility.
  --disable-packet=OPT1[,OPT2,...]
                        Disable support for RSP packets or features.

Subcommands:

  explain HEX           Show an agent expression (as GDB sends it in QTDP),
                        its optimised form and the generated machine code.
  coverage [--json] FILE...
                        Where "ftrace *ADDR" would get a jump in each ELF
                        file, x86-64 or AArch64 (every instruction of every
                        function, the installer's own planning; pad room
                        modelled from the file's own mappings, ASLR off):
                        a table per file and a total, or JSON Lines. On
                        AArch64 every jump is a b over one instruction,
                        the pad in the nearest free 1 MB; the functions
                        are the symbols' (words in $d data skipped) or,
                        in a stripped file, the .eh_frame FDEs; the file's
                        BTI property note makes landing pads traps.
  export --format json|ctf|perfetto [-o OUT] TRACEFILE
                        Convert a trace file (tsave, tsave -r) for trace
                        viewers and scripts: JSON Lines, one object per
                        frame, or Perfetto's protobuf trace (standard
                        output without -o), or a CTF directory (OUT,
                        default TRACEFILE.ctf) for babeltrace2 and Trace
                        Compass.
  check [NAME ...]      Check what this machine gives the stub (all checks,
                        or the named ones): debug-registers (hardware
                        breakpoints and watchpoints trap; some virtual
                        machines' do not), fsgsbase. Exit status 1 when
                        one fails.
`

type options struct {
	attach, multi, once, listenAll bool
	noFileAccess, noRunAttach      bool
	noSave                         bool
	saveDir                        string
	killOnStubExit                 bool
	debug, remoteDebug             bool
	debugFile                      string
	timing                         bool
	wrapper                        []string
	disableRandomization           bool
	disabled                       []string
	traceRingSize                  uint64
	threadLaneAhead                *uint64
	ftraceShapes                   map[fasttp.Shape]bool
	livePatch                      bool
	comm                           string
	rest                           []string
}

// parseOnOff reads a switch's value: empty (the bare switch), on, off,
// true, false, 1 or 0.
func parseOnOff(v string) (bool, error) {
	switch v {
	case "", "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("want on or off, not %q", v)
}

func parseArgs(args []string) (*options, error) {
	o := &options{disableRandomization: true, livePatch: inferior.LivePatchByDefault}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") || a == "--" {
			if o.comm == "" && a != "--" {
				o.comm = a
				// gdbserver accepts --attach after COMM as well.
				if i+1 < len(args) && args[i+1] == "--attach" {
					o.attach = true
					i++
				}
				i++
			}
			break
		}
		switch {
		case a == "--attach":
			o.attach = true
		case a == "--multi":
			o.multi = true
		case a == "--once":
			o.once = true
		case a == "--listen-all":
			o.listenAll = true
		case a == "--kill-on-stub-exit":
			o.killOnStubExit = true
		case a == "--no-file-access":
			o.noFileAccess = true
		case a == "--no-run-attach":
			o.noRunAttach = true
		case a == "--no-tsave":
			o.noSave = true
		case strings.HasPrefix(a, "--tsave-dir="):
			o.saveDir = strings.TrimPrefix(a, "--tsave-dir=")
			if st, err := os.Stat(o.saveDir); err != nil || !st.IsDir() {
				return nil, fmt.Errorf("%s: not a directory", a)
			}
		case a == "--debug":
			o.debug = true
		case a == "--timing":
			o.timing = true
		case a == "--remote-debug":
			o.remoteDebug = true
		case a == "--event-loop-debug", strings.HasPrefix(a, "--debug-format="):
		case strings.HasPrefix(a, "--trace-ring-size="):
			n, err := strconv.ParseUint(strings.TrimPrefix(a, "--trace-ring-size="), 0, 64)
			if err != nil || n < fasttp.MinRingSize || n&(n-1) != 0 || n > 1<<30 {
				return o, fmt.Errorf("%s: want a power of two between %d and %d bytes", a, fasttp.MinRingSize, 1<<30)
			}
			o.traceRingSize = n
		case strings.HasPrefix(a, "--thread-lane-ahead="):
			n, err := strconv.ParseUint(strings.TrimPrefix(a, "--thread-lane-ahead="), 0, 64)
			if err != nil || n > 1<<30 {
				return o, fmt.Errorf("%s: want a number of bytes up to %d", a, 1<<30)
			}
			o.threadLaneAhead = &n
		case a == "--live-patch" || strings.HasPrefix(a, "--live-patch="):
			on, err := parseOnOff(strings.TrimPrefix(strings.TrimPrefix(a, "--live-patch"), "="))
			if err != nil {
				return o, fmt.Errorf("%s: %w", a, err)
			}
			o.livePatch = on
		case strings.HasPrefix(a, "--ftrace-shapes="):
			shapes, err := fasttp.ParseShapes(strings.TrimPrefix(a, "--ftrace-shapes="))
			if err != nil {
				return o, fmt.Errorf("%s: %w", a, err)
			}
			o.ftraceShapes = shapes
		case strings.HasPrefix(a, "--debug-file="):
			o.debugFile = strings.TrimPrefix(a, "--debug-file=")
		case a == "--disable-randomization":
			o.disableRandomization = true
		case a == "--no-disable-randomization":
			o.disableRandomization = false
		case a == "--startup-with-shell", a == "--no-startup-with-shell":
		case strings.HasPrefix(a, "--disable-packet="):
			o.disabled = append(o.disabled, strings.Split(strings.TrimPrefix(a, "--disable-packet="), ",")...)
		case a == "--wrapper":
			i++
			for ; i < len(args) && args[i] != "--"; i++ {
				o.wrapper = append(o.wrapper, args[i])
			}
			if i == len(args) {
				return nil, errors.New("--wrapper: missing terminating '--'")
			}
			if len(o.wrapper) == 0 {
				return nil, errors.New("--wrapper: empty wrapper command")
			}
		default:
			return nil, fmt.Errorf("unknown option %q", a)
		}
	}
	if o.comm == "" {
		return nil, errors.New("no COMM given")
	}
	o.rest = args[i:]
	switch {
	case o.attach && len(o.rest) != 1:
		return nil, errors.New("--attach needs exactly one PID")
	case !o.multi && !o.attach && len(o.rest) == 0:
		return nil, errors.New("no program specified")
	}
	return o, nil
}

func main() {
	spareProcs()
	stop := cpuProfile(os.Getenv("GOTPSTUB_CPUPROFILE"))
	code := run(os.Args[1:])
	stop()
	os.Exit(code)
}

// spareProcs gives the Go scheduler two Ps more than the machine has
// CPUs (unless GOMAXPROCS is set): the ptrace goroutine, locked to its
// raised thread, needs a P to run, and with one P per CPU it waited in
// the run queue behind the stub's other goroutines (the drainer, the
// packet handler) for up to their 10 ms time slice while a thread of
// the program stood stopped for it (the kernel's scheduler trace of
// e2e's TestNonStopTraceWhileRunning: the ptrace thread handing its P
// back and forth, asleep 1-2 ms between). With spare Ps every runnable
// goroutine has its thread, and the kernel, which knows the ptrace
// thread's priority, picks who runs.
func spareProcs() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(runtime.NumCPU() + 2)
	}
}

// cpuProfile writes the stub's CPU profile to path (pprof format) until
// the returned function is called; nothing when path is "". For
// measuring where the stub's own time goes (README, "Speed").
func cpuProfile(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gotpstub: GOTPSTUB_CPUPROFILE: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// rootCause returns the innermost error of err's chain: the cause alone,
// for messages that already name what failed (gdbserver's "Cannot exec
// PROG: CAUSE").
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "explain" {
		return explain(args[1:])
	}
	if len(args) > 0 && args[0] == "check" {
		return check(args[1:])
	}
	if len(args) > 0 && args[0] == "coverage" {
		return coverageCmd(args[1:])
	}
	if len(args) > 0 && args[0] == "export" {
		return exportCmd(args[1:])
	}
	if len(args) > 0 && args[0] == guard.WatchdogArg {
		return guard.Serve(os.NewFile(3, "watchdog socket"), os.Stderr)
	}
	for _, a := range args {
		switch a {
		case "--help":
			fmt.Print(usage)
			return 0
		case "--version":
			fmt.Printf("gotpstub %s\nA GDB remote stub (gdbserver replacement) for Linux, specialised in tracepoints.\n", version)
			return 0
		}
		if !strings.HasPrefix(a, "--") {
			break
		}
	}
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gotpstub: %v\n\n%s", err, usage)
		return 1
	}
	var logw io.Writer = os.Stderr
	if o.debugFile != "" {
		f, err := os.Create(o.debugFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gotpstub: %v\n", err)
			return 1
		}
		defer f.Close()
		logw = f
	}
	cfg := server.Config{
		Multi:                o.multi,
		Once:                 o.once,
		Wrapper:              o.wrapper,
		DisableRandomization: o.disableRandomization,
		KillOnStubExit:       o.killOnStubExit,
		DisabledPackets:      o.disabled,
		NoFileAccess:         o.noFileAccess,
		NoRunAttach:          o.noRunAttach,
		NoSave:               o.noSave,
		SaveDir:              o.saveDir,
		TraceRingSize:        o.traceRingSize,
		ThreadLaneAhead:      o.threadLaneAhead,
		FtraceShapes:         o.ftraceShapes,
		LivePatch:            o.livePatch,
		Progress:             newProgressSpool(os.Stderr),
	}
	if o.debug {
		cfg.Log = logw
	}
	if o.remoteDebug {
		cfg.PacketLog = logw
	}
	if o.timing {
		cfg.TimingLog = logw
	}
	stdio := o.comm == "stdio" || o.comm == "-"
	if stdio {
		// The protocol owns stdin/stdout: the program reads /dev/null
		// and writes to the stub's stderr, as with gdbserver.
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gotpstub: %v\n", err)
			return 1
		}
		cfg.Stdin, cfg.Stdout = devnull, os.Stderr
	}
	var watchdog *guard.Client
	if !o.killOnStubExit {
		// Should the stub die, the watchdog takes its int3s out of
		// the program, which runs on (package guard).
		w, err := guard.StartSelf(os.Stderr, func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "gotpstub: "+format+"\n", args...)
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gotpstub: %v (a death of the stub would leave breakpoints in the program)\n", err)
		} else {
			watchdog = w
			cfg.Guard = w
			defer w.Close() // after srv.Shutdown: deferred calls run last first
		}
	}
	srv := server.New(cfg)
	// Ctrl-C on the stub's terminal belongs to the program (they share
	// it), as with gdbserver: the stub itself ignores it.
	signal.Ignore(syscall.SIGINT, syscall.SIGTTOU)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-sigs
		srv.Shutdown()
		if watchdog != nil {
			watchdog.Close()
		}
		os.Exit(1)
	}()

	// Bind before starting or attaching to the program: a port in use
	// must not leave a program started (or stopped) for nothing.
	var ln net.Listener
	if o.listenAll {
		fmt.Fprintf(os.Stderr, "gotpstub: warning: --listen-all: anyone who can reach this port can control the program (read and write its memory, run code in it) as this user\n")
	}
	if !stdio {
		var err error
		if ln, err = listen(o.comm, o.listenAll); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				fmt.Fprintf(os.Stderr, "Can't bind address: Address already in use.\n")
			} else {
				fmt.Fprintf(os.Stderr, "Can't open socket: %v.\n", err)
			}
			fmt.Fprintf(os.Stderr, "Exiting\n")
			return 1
		}
		defer ln.Close()
	}

	switch {
	case o.attach:
		pid, err := strconv.Atoi(o.rest[0])
		if err != nil {
			fmt.Fprintf(os.Stderr, "gotpstub: bad PID %q\n", o.rest[0])
			return 1
		}
		if err := srv.Attach(pid); err != nil {
			fmt.Fprintf(os.Stderr, "Cannot attach to process %d: %v\nExiting\n", pid, rootCause(err))
			return 1
		}
	case len(o.rest) > 0:
		if err := srv.Launch(o.rest); err != nil {
			fmt.Fprintf(os.Stderr, "Cannot exec %s: %v.\nExiting\n", o.rest[0], rootCause(err))
			return 1
		}
	}
	defer srv.Shutdown()

	if stdio {
		if err := srv.Serve(stdioConn{}); err != nil {
			fmt.Fprintf(os.Stderr, "gotpstub: %v\n", err)
			return 1
		}
		return 0
	}
	for {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			fmt.Fprintf(os.Stderr, "Listening on port %d\n", a.Port)
		} else {
			fmt.Fprintf(os.Stderr, "Listening on %s\n", ln.Addr())
		}
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "gotpstub: accept: %v\n", err)
			return 1
		}
		if ra, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			fmt.Fprintf(os.Stderr, "Remote debugging from host %s, port %d\n", ra.IP, ra.Port)
		}
		// Plain blocking system calls, not Go's network poller: fewer
		// system calls and wake-ups per packet (rsp's doc).
		var rw io.ReadWriteCloser = c
		if bs, err := rsp.NewBlockingSocket(c); err == nil {
			rw = bs
		} else {
			fmt.Fprintf(os.Stderr, "gotpstub: %v\n", err)
		}
		if err := srv.Serve(rw); err != nil {
			fmt.Fprintf(os.Stderr, "gotpstub: %v\n", err)
		}
		if srv.ExitRequested() || o.once {
			return 0
		}
		if !o.multi && !srv.HasProcess() {
			return 0
		}
		fmt.Fprintf(os.Stderr, "Remote side has terminated connection.  GDBserver will reopen the connection.\n")
	}
}

// listen opens COMM: [HOST]:PORT for TCP, otherwise a unix socket path.
func listen(comm string, all bool) (net.Listener, error) {
	if host, port, err := net.SplitHostPort(comm); err == nil {
		if _, err := strconv.Atoi(port); err == nil {
			if host == "" && !all {
				host = "127.0.0.1"
			}
			return net.Listen("tcp", net.JoinHostPort(host, port))
		}
	}
	if strings.Contains(comm, "/") {
		_ = os.Remove(comm)
		// Only this user may connect: the socket is created 0600.
		old := syscall.Umask(0o177)
		defer syscall.Umask(old)
		return net.Listen("unix", comm)
	}
	return nil, fmt.Errorf("%q is neither HOST:PORT nor a socket path", comm)
}

// stdioConn speaks the protocol over the stub's stdin and stdout.
type stdioConn struct{}

func (stdioConn) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdioConn) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdioConn) Close() error                { return nil }
