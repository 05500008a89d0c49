package inferior

import (
	"errors"
	"os"
)

// LaunchOptions describes a program to start under the stub's control.
type LaunchOptions struct {
	Path string   // the program; looked up in PATH when it has no slash
	Args []string // argv including argv[0]; empty means {Path}
	Env  []string // environment; nil means the stub's own
	Dir  string   // working directory; "" means the stub's

	// Wrapper is a command (gdbserver --wrapper) run in front of the
	// program: it is executed with the program and its arguments appended
	// and must exec the program in turn.
	Wrapper []string

	// DisableASLR runs the program with personality ADDR_NO_RANDOMIZE.
	DisableASLR bool

	// KillOnTracerExit kills the program if the tracer dies without
	// closing the Process (PTRACE_O_EXITKILL: the stub crashed or was
	// killed). Without it the kernel detaches the program, which runs
	// on. Close kills a launched program either way.
	KillOnTracerExit bool

	// Standard files of the program; nil means the stub's.
	Stdin, Stdout, Stderr *os.File
}

// BreakpointKind is the kind of a Z/z packet: Z0 … Z4.
type BreakpointKind int

// Breakpoint kinds, numbered like the Z packets.
const (
	SoftwareBreakpoint BreakpointKind = iota // Z0: int3
	HardwareBreakpoint                       // Z1: debug register, execute
	WriteWatchpoint                          // Z2
	ReadWatchpoint                           // Z3 (x86 has none: unsupported)
	AccessWatchpoint                         // Z4
)

// String names the kind for messages.
func (k BreakpointKind) String() string {
	switch k {
	case SoftwareBreakpoint:
		return "software breakpoint"
	case HardwareBreakpoint:
		return "hardware breakpoint"
	case WriteWatchpoint:
		return "write watchpoint"
	case ReadWatchpoint:
		return "read watchpoint"
	case AccessWatchpoint:
		return "access watchpoint"
	}
	return "unknown breakpoint kind"
}

// Action is what one vCont action asks of threads.
type Action struct {
	Tid    int  // the thread, or -1 for every thread not named by an earlier action
	Step   bool // single-step instead of continuing
	Signal int  // host signal to deliver on resumption, 0 for none
	Stop   bool // vCont t: keep the thread stopped
}

// StopKind says how a Wait ended.
type StopKind int

// Stop kinds.
const (
	// SignalStop: a thread stopped (Signal, Reason). (The brief's name
	// "Stopped" is taken by the trap hook's thread handle type.)
	SignalStop StopKind = iota
	Exited              // the process exited (ExitCode)
	Killed              // the process was killed by Signal
	NoResumed           // no thread was resumed: nothing to wait for
)

// String names the kind for messages.
func (k StopKind) String() string {
	switch k {
	case SignalStop:
		return "stopped"
	case Exited:
		return "exited"
	case Killed:
		return "killed"
	case NoResumed:
		return "no resumed threads"
	}
	return "unknown stop kind"
}

// StopEvent is one reportable event.
type StopEvent struct {
	Kind     StopKind
	Tid      int // the thread that stopped (the pid for Exited/Killed)
	Signal   int // host signal number (Stopped, Killed)
	ExitCode int // Exited

	// Reason is the stop reason of a SIGTRAP: "swbreak" (an int3 of
	// ours; the pc is already rewound to it), "hwbreak", "watch",
	// "rwatch", "awatch", or "" (single-step, anything else).
	Reason    string
	WatchAddr uint64 // data address of a watchpoint stop

	Exec bool // the thread called execve: ExePath and the memory are new

	// ForkChild is the pid of the child the thread's fork (VFork: vfork)
	// created, held for the caller (SetReportForks); 0 for other stops.
	ForkChild int
	VFork     bool
	// VForkDone: the thread's vfork child has exec'd or exited.
	VForkDone bool

	// Syscall is, for a syscall stop (SetCatchSyscalls), which side of
	// syscall SyscallNr the thread stopped at; NoSyscall otherwise.
	Syscall   SyscallStop
	SyscallNr int
	// Interrupted: this SIGINT stop is Interrupt's (the program got no
	// signal).
	Interrupted bool
	// StopRequested: in non-stop mode, gdb had asked for this thread to
	// stop (a Stop action) when this event of it was reported; the
	// event then answers that request too.
	StopRequested bool

	// info is the siginfo of a signal stop: the signal, passed back by
	// the caller, is delivered with it (signals.go).
	info *siginfo
}

// TrapAction is a trap hook's verdict.
type TrapAction int

// Trap hook verdicts.
const (
	// TrapReport reports the trap to gdb as a normal SIGTRAP stop (all
	// threads are then stopped).
	TrapReport TrapAction = iota
	// TrapResume continues the thread silently from the pc the hook
	// left; if the pc is still the trap's address the trapped
	// instruction is stepped over first.
	TrapResume
)

// Errors callers may test for with errors.Is.
var (
	// ErrClosed: the Process was closed.
	ErrClosed = errors.New("inferior: process closed")
	// ErrExited: the process is gone.
	ErrExited = errors.New("inferior: process has exited")
	// ErrNoThread: no such thread, or it vanished.
	ErrNoThread = errors.New("inferior: no such thread")
	// ErrRunning: the operation needs the thread stopped.
	ErrRunning = errors.New("inferior: thread is running")
	// ErrUnsupported: the hardware cannot do this (e.g. read watchpoints
	// on x86); gdb should be answered with an empty reply.
	ErrUnsupported = errors.New("inferior: not supported")
	// ErrWaitCancelled: CancelWait ended the Wait before it found an
	// event.
	ErrWaitCancelled = errors.New("inferior: wait cancelled")
	// ErrNoDebugRegister: every debug register is in use.
	ErrNoDebugRegister = errors.New("inferior: no free debug register")
	// ErrNoDebugHardware: the CPU has no debug registers of the kind
	// asked for (an arm64 CPU or emulator reporting no breakpoint or
	// watchpoint slots); gdb should be answered with an empty reply.
	ErrNoDebugHardware = errors.New("inferior: the CPU has no hardware breakpoints or watchpoints of this kind")
)
