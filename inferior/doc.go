// Package inferior controls a debugged Linux process with ptrace: launch
// or attach, threads, registers, memory, software and hardware
// breakpoints, watchpoints, all-stop resumption and stop reporting, and
// the stub's own "internal traps" used by tracepoints.
//
// # Threading model
//
// The kernel ties a tracee to the tracer *thread*, so one goroutine,
// locked to its OS thread for its whole life, makes every ptrace call and
// forks launched programs. Public methods marshal closures onto it and
// wait for the answer; a method called from that goroutine itself (from a
// trap hook, or inside Exclusive) runs directly. ReadMemory and
// WriteMemory make no ptrace call: they run on the caller's thread,
// holding the mutex the ptrace goroutine holds while it works on the
// process (a hand-off to a locked thread costs 50-100 µs on a VM).
// Interrupt and Kill signal the process directly and are safe from any
// goroutine at any time.
//
// The ptrace goroutine learns about tracee state changes from SIGCHLD
// (os/signal) and collects them with wait4(-1, __WALL|__WNOTHREAD|WNOHANG):
// __WNOTHREAD limits the wait to children of that thread, which are
// exactly our tracees, so the stub's other children (started with os/exec)
// are never reaped by mistake. In non-stop mode a thread of its own,
// raised (statusWaiter), blocks in waitid(P_ALL, WNOWAIT) and wakes the
// ptrace goroutine as soon as a tracee has a status: through SIGCHLD the
// wake went via os/signal's goroutine on a thread at the stub's normal
// priority, which the program's busy threads kept off the CPUs for
// milliseconds while the stopped thread waited. drainAll collects every
// status there is before it handles any, so that threads back at a trap
// within microseconds cannot be collected again ahead of the others.
//
// # All-stop
//
// Resume applies vCont-style actions; Wait blocks until one thread has a
// reportable event, then stops every other thread (SIGSTOP, swallowed when
// it arrives) before returning. Once an event is reportable the event loop
// collects no more statuses before that stop (drain): threads hitting trap
// tracepoints would otherwise keep it busy for ever, and gdb's interrupt
// went unanswered. An interrupt's SIGSTOP that arrives merged with one of
// the stub's own (a pending SIGSTOP is delivered once) is reported, not
// swallowed. Events that turn up while stopping the
// others stay queued and are reported by later Waits, one per call, as
// gdbserver does, but only once gdb resumes their thread: while an event
// of a thread it resumes is queued, Resume resumes nothing and the next
// Wait reports it at once; a thread it keeps stopped keeps its event.
//
// # Non-stop
//
// SetNonStop(true) switches to gdb's non-stop mode (nonstop.go): Wait
// reports one thread's event and stops no other thread, picking at random
// among the reportable events after collecting every status available
// (a thread that keeps stopping cannot starve the others); Resume changes
// only the threads its actions name, and a Stop action stops a running
// thread, reported with signal 0. A step over one of our int3s runs out
// of line when the DisplacedStepper (SetDisplacedStepper, displaced.go:
// package trapfallback's) takes it, the other threads running on; a step
// in place over an int3 or an internal trap and Pause stop the running
// threads for their duration and resume exactly those gdb has running
// afterwards.
// ResumedThreads tells which threads gdb has running; CancelWait lets a
// caller take an event a Wait may have found before resuming threads.
// The wait loop never blocks in wait4 in this mode: requests must be
// served while threads run.
//
// # Patching code while threads run (livepatch.go)
//
// With SetLivePatching(true) (gotpstub's default on x86-64,
// LivePatchByDefault; --live-patch=off pauses instead), code patches made while threads run go through a text_poke_bp-style
// protocol: an int3 over each patch's first byte, every CPU running the
// process
// serialised (membarrier MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE,
// injected into a stopped thread — or a running one stopped for that
// moment — at a syscall instruction found in the vDSO, never written
// where other threads run; the process registered for it when live
// patching is switched on with no thread running, since registering a
// multi-threaded process waits for an RCU grace period), the threads
// whose pc lies inside covered
// bytes moved (RelocatePCsLive), the tails, a second
// synchronisation, then the first bytes (and a third synchronisation
// when jumps were taken out). A thread that meets one of the int3s
// meanwhile continues at the target of the jump being put in (or taken
// out). A thread that reports an int3 already taken out (a trap
// tracepoint's, a breakpoint's, the protocol's; in either mode) runs the
// instruction now there instead of reporting a SIGTRAP; a thread held at
// one of the int3s to make the injected call goes on the same way, or
// back to the int3 (LiveStats.Rewound) — never on past it, into the
// middle of an instruction. The
// running threads checked for covered bytes (and those AllPCs and
// AllThreadPointers read: one walk, readThreads) are sent a SIGSTOP
// together and each resumed as soon as it is read. Other
// threads' statuses collected during a flush are handled after it (a
// thread stopped by an int3 is never moved meanwhile: its pc is past
// the int3), except a stop at a SIGSTOP of the stub's own that no wait
// wants any more (a thread sent on from an int3 it met before its
// SIGSTOP, which then stopped it again): swallowed at once and the
// thread resumed (lateOwnStop), not held to the flush's end. A trap
// tracepoint's hit collected during a flush still waits for its end.
// LiveStats counts what it did and the longest stop of a thread for it.
// The ptrace thread always runs at nice -10 when the stub may (package
// prio; a launched program gets the stub's own priority back), in the
// real-time class in non-stop mode (tracerRealtime), and the
// program's thread that makes the injected
// membarrier call does while it makes it: every stopped thread waits for
// them. An internal trap asked for at the start of a patch
// while threads run (a tracepoint whose jump becomes a trap) is held
// back and goes in as the last byte of that patch's removal, so no
// thread passes between the two. Off, or without SYNC_CORE membarriers
// (CanPatchLive), the caller pauses every thread (Pause).
//
// # Signals gdb passes silently
//
// A signal set with SetPassSignals (gdb's QPassSignals: handle nostop
// noprint pass) is never reported: the thread it stopped is resumed with it
// at once, alone, from its own signal-delivery-stop, so the kernel keeps
// the siginfo the sender gave it and no other thread stops. A thread that
// must stay stopped for now, or that gets the signal during an internal
// single-step, keeps it with its siginfo and gets it at its next real
// resumption (PTRACE_SETSIGINFO first). gdb's single-stepped threads,
// SIGTRAP, SIGSTOP and synchronous faults are always reported. Signals
// that are reported keep their siginfo too, for when gdb passes them
// back. The rules are in signals.go.
//
// # Syscall stops
//
// SetCatchSyscalls (gdb's QCatchSyscalls) makes the threads the package
// continues run under PTRACE_SYSCALL; the entry and return of a caught
// syscall are reported (StopEvent.Syscall, SyscallNr), the others run on.
// Single-steps stay PTRACE_SINGLESTEP (syscalls.go).
//
// A step leaves the kernel's single-step state armed until the thread's
// next non-step resumption, and a dead tracer's detach does not clear
// it: SettleSteps (stepsettle.go), which the server calls before it waits
// for gdb, clears it for every thread stopped for gdb (its stop reported,
// other threads running or not), so that the program outlives a stub
// killed while it is stopped.
//
// # Breakpoints
//
// Software breakpoints are breakpoint instructions (int3 on x86-64, the
// 4-byte brk #0 on arm64, at 4-byte aligned addresses only) whose
// original bytes are shadowed: ReadMemory shows the original bytes and
// WriteMemory updates the shadow (elsewhere in this documentation "int3"
// stands for either). A thread stopped at an int3 of ours has
// its pc rewound to the breakpoint (brk leaves it there), and resuming a thread whose breakpoint stop was reported
// (and which has not moved) first steps it over alone (remove,
// single-step, reinsert). A thread that merely sits on a breakpoint
// address (stopped there by SIGSTOP, moved there by gdb, or whose hit was
// dropped because gdb removed the breakpoint before seeing it) executes
// the int3 and reports the hit. Hardware breakpoints and
// watchpoints use DR0-DR3/DR7 on x86-64, written into every thread, and
// DR6 tells which one fired. On arm64 they use the breakpoint and
// watchpoint register pairs (NT_ARM_HW_BREAK, NT_ARM_HW_WATCH; as many as
// the CPU reports, ErrNoDebugHardware when it reports none; read
// watchpoints too), a watchpoint per aligned doubleword, and si_addr
// tells which one fired; the instruction has not run, and gdb steps over
// it with the point removed, as with gdbserver. A hardware breakpoint or
// watchpoint inserted again while it is in is inserted once (gdb repeats
// Z packets), and one removal takes it out.
//
// # Internal traps
//
// InsertInternalTrap plants an int3 owned by the stub (tracepoints). When a
// thread hits one, only that thread stops: the hook set with SetTrapHook
// runs on the ptrace goroutine with a *Stopped handle, and the thread
// continues silently unless the hook asks for a report or gdb has a
// breakpoint at the same address. A hook that moves the pc past the
// trapped instruction (emulation, displaced stepping) costs one stop of
// one thread; a hook that leaves the pc on the trap (a breakpoint whose
// condition is false) makes the package step the instruction out of line
// with the DisplacedStepper, or, when it declines, in place, which stops
// every thread meanwhile so that no other thread runs through the trap
// while its int3 is out of memory.
//
// Several hooks can share internal traps: AddTrapHook's are tried in
// order, each claiming a trap or passing it on, before SetTrapHook's.
//
// # Code patches
//
// InsertPatch writes code over the program's (a fast tracepoint's jump to
// its pad) and shadows it like a breakpoint: ReadMemory shows the
// original bytes, WriteMemory updates them and leaves the patch in place.
// InsertPatchOver does the same with the original bytes given by a caller
// that has just read them, sparing a read.
// Breakpoints layer on top: an int3 inside a patch saves the patch's byte,
// so stepping over it executes the patch; removing a patch under an int3
// gives the int3 the original byte to save. RelocatePCs moves stopped
// threads (out of a patched range, out of a pad).
//
// # Writes inside Exclusive
//
// While every thread is stopped inside Exclusive, memory writes are kept
// and made when it ends, a page at a time (the writes applied in order,
// the changed span written once; the page read first only where the
// writes leave gaps in that span); reads see them, and
// any resumption, detach or injected system call makes them first
// (writebatch.go). A tstart placing a thousand jumps 17 bytes apart then
// writes a few pages instead of a thousand times.
//
// # Fault fixups
//
// SetFaultHook sees every SIGSEGV and SIGBUS a fault raises before
// anything else: code the stub placed in the process can have a bad load
// turned into a jump to its error path, silently, instead of a crash.
//
// # Exit hook
//
// SetExitHook asks for PTRACE_O_TRACEEXIT: each exiting thread stops at
// PTRACE_EVENT_EXIT while the process memory still exists, the hook runs
// with a *Stopped for it (to drain data the stub keeps inside the
// process), and the thread is let go to finish exiting. Every wait loop
// (event handling, single-steps, stopping all threads, Kill) lets such a
// stop go at once; without a hook the option is never set.
//
// # Thread start hook
//
// SetThreadStartHook runs a hook for each thread the program creates, at
// its first stop (its clone event and its initial SIGSTOP both seen),
// before it runs an instruction of its own: package fasttp prepares the
// thread's lane there. Only that thread waits for the hook.
//
// # Forks and exec
//
// By default forked children are not debugged (gdb's follow-fork-mode
// parent without fork events): the child is traced just long enough to
// take our int3s and code patches out of its memory, then detached. A
// vfork child shares its parent's memory and is detached as it is.
//
// With SetReportForks (gdb's fork-events and vfork-events) a fork stops the
// forking thread with StopEvent.ForkChild set and the child is held stopped
// by this same tracer thread (ptrace ties a tracee to its tracer thread, so
// no other Process could take it over): ForkChildren lists it once Wait
// has returned its fork event (before that gdb does not know it), its
// registers and memory can be read and written (gdb fixes up a child
// that forked during a displaced step), and DetachForkChild, KillForkChild or
// FollowForkChild decide its fate. FollowForkChild detaches the parent and
// turns this Process into the child's (follow-fork-mode child).
// TakeForkChild hands a held child over to a Process of its own, so that
// it runs while its parent is debugged (forktake.go, forktake_park.go): since ptrace ties it
// to this tracer thread, it is detached and attached again by the new
// Process's thread, waiting in between in pause (ppoll on arm64) at a syscall instruction
// of its vDSO with every signal blocked (rt_sigprocmask run in it before
// the detach, the old mask put back by the new tracer; nothing of its
// code written, of its stack two words below its red zone, put back),
// its registers restored once attached. The parent of a vfork reports VForkDone once the
// child has exec'd or exited. An exec is reported as a SIGTRAP stop
// with Exec set; breakpoints, internal traps, code patches and debug
// registers are forgotten, since the new program image has none of them.
//
// # Memory shared with the stub
//
// MapShared creates memory both the process and the stub map (a memfd
// created in the process by injected system calls, mapped by the stub
// through /proc/PID/fd); Unmap takes it away. MarkTracerAlive ties a
// word of it to the ptrace thread's robust futex list: the kernel clears
// the thread's id there when the stub dies, however it dies.
//
// # Machine checks and errors
//
// ProbeDebugRegisters tells whether hardware breakpoints trap on this
// machine (some virtual machines' debug registers never do). Attach says
// plainly why it failed: ESRCH for no such process, AlreadyTracedError
// when another tracer holds it. A Guard (guard.go) hears of every int3
// the stub keeps in the process, for the watchdog that takes them out if
// the stub dies.
//
// # Architecture
//
// The shared code asks the instruction set for its facts (isa_*.go: the
// breakpoint instruction and its length, how far past it the pc is at
// the trap, instruction alignment, the system call instruction, the red
// zone, the top of user space); register transfer (regs_*.go: the
// x86-64 general registers and XSAVE area; arm64's NT_PRSTATUS and
// NT_FPREGSET sets), debug registers (debugregs_*.go) and the registers
// of system-call injection (syscall_*.go: syscall with the number in
// rax, svc #0 with the number in x8) live in *_amd64.go and *_arm64.go
// files. The code-patch and live-patch machinery (patch.go,
// livepatch.go) is x86-64's: nothing patches code on arm64 yet (the
// server refuses tracepoints there).
package inferior
