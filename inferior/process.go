package inferior

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"gotpstub/prio"
	"gotpstub/tdesc"
)

// Process is a debugged process. Its methods are safe for concurrent use.
type Process struct {
	pid      int
	attached bool
	layout   *tdesc.Layout
	// sigState is the signal bookkeeping (signals.go), owned by the
	// ptrace goroutine; nil until first used.
	sigState *sigState
	// catch is the syscalls to stop at (syscalls.go), owned by the
	// ptrace goroutine.
	catch catchState
	// writeBatch counts the Exclusive calls running; kept are the
	// memory writes kept until the outermost ends (writebatch.go).
	writeBatch int
	kept       pendingWrites
	// injectingNoMemory is set while an injected system call that reads
	// no memory of the process runs: only the kept writes on its
	// instruction's pages are made first (flushBeforeResume).
	injectingNoMemory bool
	// keptData holds the kept writes' bytes; pageBuf is flushPage's.
	keptData keptBytes
	pageBuf  []byte
	spanBuf  []memSpan // flushPage's
	// displacer runs non-stop step-overs out of line (displaced.go);
	// displacedSteps counts them.
	displacer      DisplacedStepper
	displacedSteps int
	// live is the code patched while threads run (livepatch.go).
	live liveState
	// stepsArmed: a thread may keep a step's state (stepsettle.go).
	stepsArmed atomic.Bool
	// schedFds are the threads' schedstat files (schedclock.go).
	schedFds schedClocks

	reqs      chan func()
	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	tracerTid int // the ptrace goroutine's OS thread
	// tracerG is the ptrace goroutine's curG while it runs, 0 after.
	tracerG atomic.Uintptr
	// opMu is held by the ptrace goroutine while it works on the
	// process (a request, an event); direct takes it to run an operation
	// that needs no ptrace call on the caller's own thread.
	opMu sync.Mutex
	// robust is the tracer thread's robust futex list (MarkTracerAlive),
	// kept referenced for the kernel.
	robust *robustList

	// tids is a snapshot of the live threads for callers that must not
	// queue behind the ptrace goroutine (Threads, Interrupt).
	tidsMu sync.Mutex
	tids   []int

	// Interrupt bookkeeping, shared with Interrupt's caller.
	intrMu      sync.Mutex
	intrTid     int         // thread an interrupt SIGSTOP was sent to, 0 for none
	runningFlag atomic.Bool // threads were resumed and no Wait has returned since
	gone        atomic.Bool // the process exited, was killed or detached

	// Everything below belongs to the ptrace goroutine.
	threads   map[int]*thread
	orphans   map[int]bool // new threads seen stopping before their clone event
	pending   []StopEvent  // reportable events not yet returned by Wait
	exitEvent *StopEvent   // set once the process is gone
	waiter    chan waitResult
	stopping  bool // stopAll in progress: leave stopped threads stopped
	// nonStop: gdb's non-stop mode (SetNonStop); paused counts the
	// Pause calls not yet released (no thread is resumed meanwhile).
	nonStop bool
	// baseNice is the ptrace thread's nice value before it was raised
	// (prioUnchanged: it was not), which a launched program gets back.
	baseNice int
	paused   int
	sigchld  chan os.Signal
	// statusWake and statusTaken link the ptrace goroutine with
	// statusWaiter (non-stop mode); nonStopFlag mirrors nonStop for
	// statusWaiter, which counts its wakes in waiterWakes.
	statusWake  chan struct{}
	statusTaken chan struct{}
	nonStopFlag atomic.Bool
	tracerRT    func() // puts the ptrace thread back (tracerRealtime)
	waiterWakes atomic.Int64
	memFile     *os.File
	swbps       map[uint64]*swBreakpoint
	patches     patchSet // code patches by start address
	// Fork events (SetReportForks): children held for gdb, by pid.
	reportFork, reportVFork bool
	forks                   map[int]*forkChild
	debugRegs               debugRegisters
	drGen                   int // bumped whenever debugRegs change
	hook                    func(*Stopped) TrapAction
	trapHooks               []func(*Stopped) (TrapAction, bool) // AddTrapHook's, tried before hook
	faultHook               FaultHook
	guard                   Guard // told about every int3 (SetGuard)
	// Exit hook (SetExitHook): with traceExit every thread should have
	// PTRACE_O_TRACEEXIT. baseOptions are the options set at launch or
	// attach; optionsGen is bumped whenever the options change, and a
	// thread whose optionsGen differs gets them at its next resumption.
	exitHook    func(*Stopped)
	startHook   func(*Stopped) // SetThreadStartHook's
	traceExit   bool
	inExitHook  bool
	baseOptions int
	optionsGen  int
	// exitEventStops counts PTRACE_EVENT_EXIT stops, for tests that check
	// TRACEEXIT is off without a hook.
	exitEventStops int
	// stopAllCalls counts stopAll calls, for tests that check a trap
	// costs no stop of the other threads.
	stopAllCalls int
	inHook       bool
	xstateLen    int    // size of the XSAVE area (0: use FXSAVE only)
	fpBuf        []byte // readFPState's buffer, reused
}

// traceOptions are the ptrace options of every tracee. Forks are traced
// only to take our int3s out of the child before letting it go.
const traceOptions = unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACESYSGOOD |
	unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK

// thread is the ptrace goroutine's view of one thread.
type thread struct {
	tid             int
	stopped         bool   // in a ptrace-stop
	resumed         bool   // gdb asked it to run and no all-stop has happened since
	step            bool   // resumed by single-step
	stepArmed       bool   // last resumed by PTRACE_SINGLESTEP (stepsettle.go)
	sig             int    // signal to deliver at the next resumption
	sigstopExpected bool   // a SIGSTOP we sent (or attach/clone's) is still to arrive
	zombie          bool   // exited but not reapable yet (a leader with live threads)
	drGen           int    // debugRegs generation written into the thread
	hookedAt        uint64 // internal trap whose hook ran while the thread stays on it
	// hookDoneAt: the hook ran for this thread's hit here, but gdb's
	// breakpoint at the same address lost its report (gdb removed it to
	// step another thread): when the thread executes the int3 again it is
	// gdb's breakpoint hit, not a new tracepoint hit.
	hookDoneAt  uint64
	stopPC      uint64 // pc of its reported breakpoint stop: Resume steps over only there
	interrupted bool   // its last stop is Interrupt's SIGSTOP, reported as SIGINT
	optionsGen  int    // Process.optionsGen of the ptrace options it has
	rehit       bool   // an unreported breakpoint hit was dropped: hit it again, no step-over
	fresh       bool   // created by a clone and not yet stopped once (SetThreadStartHook)
	// atSyscallEntry: stopped at a syscall-entry stop (SetCatchSyscalls);
	// skipEntry is a syscall number + 1 whose next entry stop is not
	// reported (injectAtSyscallEntry rewound the thread to run it again).
	atSyscallEntry bool
	skipEntry      int
	// stopRequested: gdb asked for this running thread to stop (non-stop
	// vCont;t); its SIGSTOP is reported as a stop with signal 0.
	stopRequested bool
	// sentOn is when a flush last sent the thread on from one of its
	// int3s (liveTrap): its next stop at one came after (int3Hold);
	// sentOnClock is its schedstat run + wait time then (-1: unknown).
	sentOn      time.Time
	sentOnClock time.Duration
	// stopRaise puts back the scheduling class the thread had before
	// raiseToStop (nil: not raised).
	stopRaise func()
}

type waitResult struct {
	ev  StopEvent
	err error
}

// prioUnchanged says the ptrace thread's priority was left as it was.
const prioUnchanged = 1 << 10

func newProcess() *Process {
	p := &Process{
		reqs:    make(chan func()),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		threads: map[int]*thread{},
		orphans: map[int]bool{},
		swbps:   map[uint64]*swBreakpoint{},
		patches: newPatchSet(),
		forks:   map[int]*forkChild{},
		sigchld: make(chan os.Signal, 1),
		layout:  hostLayout(),
	}
	started := make(chan struct{})
	go p.loop(started)
	<-started
	return p
}

// loop is the ptrace goroutine.
func (p *Process) loop(started chan struct{}) {
	// Never unlocked: when this goroutine returns, its thread exits with
	// it, and the kernel detaches any tracee still attached (or kills it,
	// with LaunchOptions.KillOnTracerExit).
	runtime.LockOSThread()
	p.tracerTid = unix.Gettid()
	p.tracerG.Store(curG())
	// gdb's packets and every thread the stub stops wait for this one:
	// a program keeping the CPUs busy must not starve it (package prio).
	p.baseNice = prioUnchanged
	if nice, err := prio.Nice(p.tracerTid); err == nil && nice > prio.UrgentNice {
		p.baseNice = nice
		prio.Raise(p.tracerTid)
	}
	signal.Notify(p.sigchld, unix.SIGCHLD)
	close(started)
	defer func() {
		p.opMu.Lock()
		defer p.opMu.Unlock()
		// Do not rely on the thread's exit to release the tracees (the
		// runtime keeps the main thread alive even when locked): a
		// launched program is killed, an attached one detached.
		if p.exitEvent == nil && len(p.threads) > 0 {
			if p.attached {
				_ = p.detach()
			} else {
				p.releaseForks(true)
				_ = unix.Kill(p.pid, unix.SIGKILL)
				p.reapKilled()
			}
		}
		p.releaseForks(false)
		p.schedFds.keepOnly(nil)
		p.kept = pendingWrites{} // its bytes are keptData's
		p.keptData.release()
		signal.Stop(p.sigchld)
		if p.memFile != nil {
			p.memFile.Close()
		}
		if p.waiter != nil {
			p.waiter <- waitResult{err: ErrClosed}
		}
		p.tracerG.Store(0) // curG's value may go to another goroutine
		close(p.done)
	}()
	for {
		select {
		case <-p.quit:
			return // a pending Wait gets ErrClosed
		default:
		}
		p.opMu.Lock()
		p.handleStashed()
		p.serviceWaiter()
		block := p.waiter != nil && !p.nonStop && p.anyRunning() && len(p.reqs) == 0 && len(p.pending) == 0
		p.opMu.Unlock()
		if block {
			// Someone waits for the running process: block in wait4
			// on this thread. Waking through SIGCHLD instead costs
			// several thread hand-offs in the runtime per event, which
			// is most of a trap tracepoint's cost. Nothing else needs
			// this goroutine while the process runs (all-stop): a
			// request made meanwhile (Kill sends SIGKILL first,
			// Interrupt a SIGSTOP) is served after the next event.
			if wpid, ws, err := wait4(-1, 0); err == nil && wpid > 0 {
				p.locked(func() {
					p.handleStatus(wpid, ws)
					p.drain()
				})
				continue
			}
		}
		var poll <-chan time.Time
		p.opMu.Lock()
		if p.waiter != nil || p.anyRunning() {
			// SIGCHLD tells us about tracee changes; polling is only a
			// safety net.
			poll = time.After(100 * time.Millisecond)
		}
		p.opMu.Unlock()
		select {
		case f := <-p.reqs:
			p.locked(f)
		case <-p.statusWake:
			p.locked(p.drainForWaiter)
		case <-p.sigchld:
			p.locked(p.drain)
		case <-poll:
			p.locked(p.drain)
		case <-p.quit:
			return
		}
	}
}

// locked runs f holding opMu.
func (p *Process) locked(f func()) {
	p.opMu.Lock()
	defer p.opMu.Unlock()
	f()
}

// onTracer reports whether the caller is the ptrace goroutine.
func (p *Process) onTracer() bool { return curG() == p.tracerG.Load() }

// direct runs f, an operation that makes no ptrace call (memory goes
// through process_vm_readv and /proc/PID/mem, which any thread of the
// stub may use), on the caller's thread, excluding the ptrace
// goroutine's work with opMu: a hand-off to that goroutine costs 50-100
// µs on a VM, 3-4 times what gdbserver takes for a whole memory read
// packet. Called on the ptrace goroutine it runs f directly, as do does.
func (p *Process) direct(f func() error) error {
	if p.onTracer() {
		return f()
	}
	select {
	case <-p.done:
		return ErrClosed
	default:
	}
	p.opMu.Lock()
	defer p.opMu.Unlock()
	return f()
}

// Exclusive runs f on the ptrace goroutine: the Process's methods f
// calls run there directly, with no hand-off to that goroutine each (a
// hand-off costs tens of µs here, most of an operation's time). Nothing
// else reaches the process until f returns, so f must not wait for
// another goroutine that uses the Process. It returns ErrClosed, without
// running f, once the Process is closed.
func (p *Process) Exclusive(f func()) error {
	return p.do(func() error {
		// f's memory writes are made at its end, a page at a time
		// (writebatch.go).
		p.writeBatch++
		defer func() {
			if p.writeBatch--; p.writeBatch == 0 {
				// A failed write there means the process is gone.
				_ = p.flushLive()
				_ = p.flushWrites()
			}
		}()
		f()
		return nil
	})
}

// do runs f on the ptrace goroutine and returns its error. Called on that
// goroutine (from a trap hook) it runs f directly.
func (p *Process) do(f func() error) error {
	if p.onTracer() {
		return f()
	}
	errc := make(chan error, 1)
	select {
	case p.reqs <- func() { errc <- f() }:
	case <-p.done:
		return ErrClosed
	}
	select {
	case err := <-errc:
		return err
	case <-p.done:
		return ErrClosed
	}
}

// Launch starts a program stopped at its first instruction (after the
// exec, with SIGTRAP, like gdbserver).
func Launch(o LaunchOptions) (*Process, error) {
	p := newProcess()
	if err := p.do(func() error { return p.launch(o) }); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func lookPath(file string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path, err := exec.LookPath(file)
	if err != nil {
		return "", fmt.Errorf("finding %s: %w", file, err)
	}
	return path, nil
}

func (p *Process) launch(o LaunchOptions) error {
	if o.Path == "" {
		return errors.New("launch: no program")
	}
	args := o.Args
	if len(args) == 0 {
		args = []string{o.Path}
	}
	argv := append([]string(nil), args...)
	file := o.Path
	if len(o.Wrapper) > 0 {
		file = o.Wrapper[0]
		argv = append(append(append([]string(nil), o.Wrapper...), o.Path), args[1:]...)
	}
	path, err := lookPath(file)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	files := []uintptr{0, 1, 2}
	for i, f := range []*os.File{o.Stdin, o.Stdout, o.Stderr} {
		if f != nil {
			files[i] = f.Fd()
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   o.Dir,
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Ptrace: true, Setpgid: true},
	}
	var oldPersona uint64
	if o.DisableASLR {
		// The personality is per thread and inherited by the child: set
		// it on this (locked) thread around the fork only.
		oldPersona, err = personality(0xffffffff)
		if err == nil {
			_, err = personality(oldPersona | addrNoRandomize)
		}
		if err != nil {
			return fmt.Errorf("launch: disabling address randomization: %w", err)
		}
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	if o.DisableASLR {
		_, _ = personality(oldPersona)
	}
	if err != nil {
		return fmt.Errorf("launch %s: %w", path, err)
	}
	p.pid = pid
	// The child inherited the ptrace thread's raised priority: the
	// program runs at the stub's own (it stops at its exec, before any
	// of its code runs).
	if p.baseNice != prioUnchanged {
		_ = unix.Setpriority(unix.PRIO_PROCESS, pid, p.baseNice)
	}
	// The exec of a PTRACE_TRACEME child stops with a plain SIGTRAP.
	if err := p.waitStartupTrap(); err != nil {
		return err
	}
	opts := traceOptions
	if o.KillOnTracerExit {
		opts |= unix.PTRACE_O_EXITKILL
	}
	p.baseOptions = opts
	if err := unix.PtraceSetOptions(pid, opts); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		_, _, _ = wait4(pid, 0)
		return fmt.Errorf("launch: setting ptrace options: %w", err)
	}
	if len(o.Wrapper) > 0 {
		if err := p.runWrapper(); err != nil {
			return err
		}
	}
	p.threads[pid] = &thread{tid: pid, stopped: true}
	p.recordStopPCs()
	p.updateTids()
	return p.openMem()
}

// waitStartupTrap waits for the launched child's first stop.
func (p *Process) waitStartupTrap() error {
	for {
		_, ws, err := wait4(p.pid, 0)
		if err != nil {
			return fmt.Errorf("launch: waiting for the program to start: %w", err)
		}
		switch {
		case ws.Exited():
			return fmt.Errorf("launch: program exited during startup with code %d", ws.ExitStatus())
		case ws.Signaled():
			return fmt.Errorf("launch: program killed during startup by signal %d", ws.Signal())
		case ws.Stopped() && ws.StopSignal() == unix.SIGTRAP:
			return nil
		case ws.Stopped():
			if err := ptraceCont(p.pid, int(ws.StopSignal())); err != nil {
				return fmt.Errorf("launch: %w", err)
			}
		}
	}
}

// runWrapper lets the wrapper run until it execs the program.
func (p *Process) runWrapper() error {
	sig := 0
	for {
		if err := ptraceCont(p.pid, sig); err != nil {
			return fmt.Errorf("launch: running the wrapper: %w", err)
		}
		sig = 0
		_, ws, err := wait4(p.pid, 0)
		if err != nil {
			return fmt.Errorf("launch: running the wrapper: %w", err)
		}
		switch {
		case ws.Exited():
			return fmt.Errorf("launch: wrapper exited with code %d before running the program", ws.ExitStatus())
		case ws.Signaled():
			return fmt.Errorf("launch: wrapper killed by signal %d", ws.Signal())
		case ws.Stopped() && ws.StopSignal() == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXEC:
			return nil
		case ws.Stopped() && ws.StopSignal() == unix.SIGTRAP:
			// an event or trap of the wrapper's own: keep going
		case ws.Stopped():
			sig = int(ws.StopSignal())
		}
	}
}

func (p *Process) openMem() error {
	if p.memFile != nil {
		p.memFile.Close()
		p.memFile = nil
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", p.pid), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening the memory of %d: %w", p.pid, err)
	}
	p.memFile = f
	p.guardMemory()
	return nil
}

// Attach takes control of a running process: every thread is attached
// and stopped.
func Attach(pid int) (*Process, error) {
	p := newProcess()
	p.pid = pid
	p.attached = true
	if err := p.do(p.attach); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// AlreadyTracedError says a process could not be attached to because
// another process traces it.
type AlreadyTracedError struct{ Tracer int }

func (e AlreadyTracedError) Error() string {
	return fmt.Sprintf("already traced by process %d", e.Tracer)
}

// tracerPid returns the TracerPid of /proc/PID/status (0: none or unknown).
func tracerPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "TracerPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func (p *Process) attach() error {
	opts := traceOptions
	p.baseOptions = opts
	// Threads may be created while we attach: repeat until a pass over
	// /proc/PID/task finds nothing new.
	for {
		tids, err := taskTids(p.pid)
		if err != nil {
			p.detachAll()
			if errors.Is(err, os.ErrNotExist) {
				err = unix.ESRCH // no /proc/PID: no such process
			}
			return fmt.Errorf("attach %d: %w", p.pid, err)
		}
		found := false
		for _, tid := range tids {
			if p.threads[tid] != nil {
				continue
			}
			found = true
			if err := unix.PtraceAttach(tid); err != nil {
				if tid == p.pid {
					p.detachAll()
					if tracer := tracerPid(p.pid); err == unix.EPERM && tracer != 0 {
						err = AlreadyTracedError{Tracer: tracer}
					}
					return fmt.Errorf("attach %d: %w", p.pid, err)
				}
				continue // the thread exited meanwhile
			}
			t := &thread{tid: tid, sigstopExpected: true}
			p.threads[tid] = t
			if err := p.waitAttachStop(t); err != nil {
				delete(p.threads, tid)
				if tid == p.pid {
					p.detachAll()
					return fmt.Errorf("attach %d: %w", p.pid, err)
				}
				continue
			}
			if err := unix.PtraceSetOptions(tid, opts); err != nil && tid == p.pid {
				p.detachAll()
				return fmt.Errorf("attach %d: setting ptrace options: %w", p.pid, err)
			}
		}
		if !found {
			break
		}
	}
	p.recordStopPCs()
	p.updateTids()
	if err := p.openMem(); err != nil {
		p.detachAll()
		return err
	}
	return nil
}

// waitAttachStop waits for the stop PTRACE_ATTACH causes; another signal
// arriving first is kept as a pending event.
func (p *Process) waitAttachStop(t *thread) error {
	for {
		_, ws, err := wait4(t.tid, 0)
		if err != nil {
			return err
		}
		if ws.Exited() || ws.Signaled() {
			return ErrNoThread
		}
		if !ws.Stopped() {
			continue
		}
		t.stopped = true
		if ws.StopSignal() == unix.SIGSTOP {
			t.sigstopExpected = false
			return nil
		}
		// Some other signal came first; our SIGSTOP is still queued.
		p.pending = append(p.pending, StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(ws.StopSignal())})
		return nil
	}
}

// detachAll detaches every attached thread (attach failure cleanup).
func (p *Process) detachAll() {
	_ = p.flushWrites()
	for tid, t := range p.threads {
		if t.sigstopExpected {
			_ = unix.Tgkill(p.pid, tid, unix.SIGCONT)
		}
		_ = ptraceDetach(tid, 0)
		delete(p.threads, tid)
	}
}

// taskTids lists /proc/PID/task.
func taskTids(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, n)
		}
	}
	sort.Ints(tids)
	return tids, nil
}

// updateTids refreshes the thread snapshot (on the ptrace goroutine).
func (p *Process) updateTids() {
	var tids []int
	for tid, t := range p.threads {
		if !t.zombie {
			tids = append(tids, tid)
		}
	}
	sort.Slice(tids, func(i, j int) bool {
		if (tids[i] == p.pid) != (tids[j] == p.pid) {
			return tids[i] == p.pid
		}
		return tids[i] < tids[j]
	})
	p.tidsMu.Lock()
	p.tids = tids
	p.tidsMu.Unlock()
	p.schedFds.keepOnly(p.threads)
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.pid }

// Attached reports whether the process was attached to (qAttached) rather
// than launched.
func (p *Process) Attached() bool { return p.attached }

// Layout returns the register layout of the process.
func (p *Process) Layout() *tdesc.Layout { return p.layout }

// Threads returns the live threads, the leader first, the rest sorted.
func (p *Process) Threads() []int {
	p.tidsMu.Lock()
	defer p.tidsMu.Unlock()
	return append([]int(nil), p.tids...)
}

// LeaderExited reports whether the thread group leader has exited
// (pthread_exit) while other threads run on: it is then a zombie the
// kernel reaps only with the last thread, and gdb must hear of it as
// gone, as gdbserver lists it no more.
func (p *Process) LeaderExited() bool {
	tids := p.Threads()
	return len(tids) > 1 && threadState(p.pid, p.pid) == 'Z'
}

// Alive reports whether tid is a live thread of the process.
func (p *Process) Alive(tid int) bool {
	for _, t := range p.Threads() {
		if t == tid {
			return true
		}
	}
	return false
}

// ThreadName returns the thread's name (/proc/PID/task/TID/comm), or "".
// A clone without CLONE_THREAD (a thread to gdb, a thread group of its
// own to the kernel) has none, as with gdbserver; a held fork child's is
// its process's.
func (p *Process) ThreadName(tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", p.pid, tid))
	if err != nil {
		if !p.IsForkChild(tid) {
			return ""
		}
		if b, err = os.ReadFile(fmt.Sprintf("/proc/%d/comm", tid)); err != nil {
			return ""
		}
	}
	return strings.TrimRight(string(b), "\n")
}

// Auxv returns the process's auxiliary vector (/proc/PID/auxv).
func (p *Process) Auxv() ([]byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", p.pid))
	if err != nil {
		return nil, fmt.Errorf("reading auxv: %w", err)
	}
	return b, nil
}

// ExePath returns the path of the program the process runs.
func (p *Process) ExePath() (string, error) {
	s, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.pid))
	if err != nil {
		return "", fmt.Errorf("reading the executable path: %w", err)
	}
	return filepath.Clean(s), nil
}

// Close ends the ptrace goroutine. A launched program still alive is
// killed; an attached one is detached (breakpoints removed) and keeps
// running. Methods called afterwards return ErrClosed.
func (p *Process) Close() {
	p.closeOnce.Do(func() { close(p.quit) })
	if p.onTracer() {
		return // called from a trap hook: the loop ends when the hook returns
	}
	// The loop may be blocked in wait4 for the running process: a stop
	// request wakes it (the loop then kills or detaches on its way out).
	p.Interrupt()
	<-p.done
}

// SetTrapHook sets the function run when a thread hits an internal trap
// that no hook added with AddTrapHook claimed (nil: such traps are
// reported like breakpoints).
func (p *Process) SetTrapHook(h func(s *Stopped) TrapAction) {
	_ = p.do(func() error { p.hook = h; return nil })
}

// AddTrapHook adds a hook for internal traps. When a thread hits one, the
// added hooks are tried in the order they were added, before the one set
// with SetTrapHook; the first that returns true owns the trap and its
// TrapAction decides. A hook that does not recognise the trap must return
// false without touching the thread. Hooks cannot be removed: a hook
// whose owner is gone declines every trap.
func (p *Process) AddTrapHook(h func(s *Stopped) (TrapAction, bool)) {
	if h == nil {
		return
	}
	_ = p.do(func() error { p.trapHooks = append(p.trapHooks, h); return nil })
}

// runTrapHooks asks the added hooks, then SetTrapHook's, what to do with
// an internal trap; nobody claiming it means reporting it.
func (p *Process) runTrapHooks(s *Stopped) TrapAction {
	for _, h := range p.trapHooks {
		if action, ok := h(s); ok {
			return action
		}
	}
	if p.hook != nil {
		return p.hook(s)
	}
	return TrapReport
}
