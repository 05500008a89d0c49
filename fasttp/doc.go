// Package fasttp places gdb's fast tracepoints (ftrace) as jumps to jump
// pads that run inside the inferior, so a hit costs tens of nanoseconds and
// no ptrace stop; whatever cannot be placed that way falls back to an int3
// trap (package trapfallback), visibly in the --debug log.
//
// # Placement (Installer.Install)
//
// A fast tracepoint gets a jump pad when:
//   - it has no while-stepping (that needs single-steps: traps only);
//   - its condition and every action compile with package jit (no printf,
//     no floating point) and use trace state variables 0 to 255 only, not
//     $trace_timestamp (the stub's clock) — except an action that only
//     collects $trace_timestamp, which the stub makes from the record's
//     time (tracing.FastRecord.TraceTime);
//   - PlanSite can cover at least 5 bytes from the address with instructions
//     it decodes with checked lengths (DecodeInsn cross-checks x86asm with
//     our own length decoder) and RelocateInsn can move them (on arm64: the
//     one instruction at the address can run relocated, "arm64 placement").
//
// # The jump and instruction punning
//
// The 5-byte `jmp rel32` replaces the first covered instructions. When they
// are shorter than 5 bytes, the heads of the later covered instructions lie
// inside the jump's displacement; those bytes are forced to int3 (0xcc) by
// choosing the pad's address (FindPadAddr searches the free ranges within
// ±2 GB for a displacement with those byte values, exactly, not by scanning),
// and each such head gets an internal trap. A thread that jumps to one from
// elsewhere traps; the hook moves it to the relocated copy of that
// instruction. Pads share arenas near their code. A jump whose displacement
// has forced bytes (puns, kept successor bytes, eviction) goes to a 5-byte
// `jmp rel32` at an address with those bytes, which leads to the pad
// (forcedPlaceLocked): sites a few bytes apart have forced addresses as
// close, and 1,000 function entries 17 bytes apart all get a jump
// (e2e TestFastTraceDenseEntries), where pads of a kilobyte at those
// addresses left 985 of 1,000 traps. Only when no arena space is within
// reach of that jump does the whole pad go to the forced address.
//
// SiteCandidates (plan.go) lists the shapes to try, cheapest first: a plain
// jump when the first instruction has 5 bytes or more; otherwise first
// the successor-preserving pun (KeepSite, E9Patch's tactic), which
// replaces only the first instruction and leaves the next instructions'
// bytes as they are — they are the displacement's last bytes, so the pad
// goes where they point (its address's low bytes chosen with the first
// instruction's spare bytes) and nothing traps: a thread arriving at a
// following instruction runs it unchanged, and the relocated first
// instruction returns to it. Any write into those kept bytes would move
// the jump, so a gdb breakpoint or trap tracepoint there makes the
// tracepoint a trap (Site.Footprint is what nobody else may touch). When
// that address is taken (or, from a non-PIE executable's low image, below
// 0: a kept top byte of 0x80 or more), its prefix-padded variants
// (PaddedKeepSites): one to three redundant ds prefixes before the
// opcode, within the first instruction's bytes, keep one more successor
// byte each and take the displacement's top byte from further on. Then
// the short jump (ShortSites, E9Patch's
// neighbour tactic with padding as the neighbour): the first
// instruction, of 2 bytes or more, becomes a `jmp rel8` to a slot of 5
// dead bytes in the alignment padding after a ret or jmp within 129
// bytes ahead or 128 behind, which holds the `jmp rel32` to the pad;
// nothing traps and no other instruction changes; padding after a label
// or behind the site counts only where a CodeOracle vouches for the ret
// or jmp before it, and a slot is used by one tracepoint at a time.
// Without padding in reach, the slot may lie inside a neighbour of
// HostMinLen bytes or more (Site.Host, E9Patch's neighbour eviction):
// the neighbour gets a plain jump to a trampoline in an arena, and its
// bytes after that jump hold the slot. A first instruction of 1 byte
// gets a short jump too when the one slot its kept successor byte allows
// (the next instruction's first byte as the rel8, left as it is:
// keptShortSlot, Site.Keep 1) is such padding or neighbour: a thread
// arriving at the next instruction runs it unchanged, and the short
// jump's Footprint covers that byte. Then the successor eviction
// (EvictSite, E9Patch's tactic too): when the next instruction takes a
// plain jump of its own (or else a successor-preserving one), it gets
// one, to a trampoline (TrampolineSize bytes at a forced address, on a page other than its pad's)
// that runs it relocated and jumps back after it, and the first
// instruction's jump is written over the first bytes of that second
// jump — its displacement ends with 0xe9 and the second jump's low
// bytes, so FindEvictAddrs chooses the pad and trampoline addresses
// together. Nothing traps either: a thread arriving at the second
// instruction takes its jump. After a ret or jmp the next bytes are
// written only when a CodeOracle vouches for them: the installer's
// (codemap.go) decodes the function symbol holding the address in the
// ELF file mapped there (a stripped file vouches for nothing; the
// engine's Prepare, at each fast tracepoint gdb defines, has that file
// read and that function decoded in the background before QTStart). Then the
// int3 pun above, then its padded variants. Last, at a function symbol's
// entry that starts with `push %reg` and whose next instruction no
// direct branch of the function targets (codeMap.pushEntry), the same
// shapes one instruction later (LeadSites, Site.Lead): the push runs in
// place and the pad records rsp 8 higher (jit.PadSpec.SPBias) and the
// entry as rip, so a frame holds the entry's registers; only the 8 bytes
// below the entry's rsp differ (the pushed register). A thread stopped
// after the push when the jump goes in is moved to the relocated copy
// (it ran the push before the tracepoint was there); one stopped there
// when the tracepoint becomes a trap at the push (a gdb breakpoint in
// the jump's bytes, say) is sent on to the pad, as if it had run the
// jump, before the jump comes out (sendOnAfterLead), so that it keeps
// its hit. This places the
// entries of a non-PIE executable where every pun at the entry points
// below address 0 (python3.11's `push %rbx; mov %rdi,%rbx; call`).
//
// Two more shapes (plan.go): after a ret or jmp, the jump may end in the
// alignment padding that follows (nops or int3s up to an 8- or 16-byte
// boundary: Site.Dead), which nothing executes; and a punned jump that
// finds no pad address (a non-PIE executable's low image: a forced top
// byte of 0xcc means -0.85 GB) is retried with one to three redundant ds
// prefixes before the opcode (PaddedSites, Site.Prefix), which move the
// forced bytes to lower rel32 bytes. A covered head never falls on a
// prefix or the opcode (a thread arriving there would enter the jump).
// Pads and their memory are never unmapped: a thread may still be inside
// one after its tracepoint goes. Memory mapped at forced addresses that
// nothing uses (Installer.spare, byte ranges: the rest of each page
// mapped for an entry jump or trampoline, and those of removed jumps) is
// given to the next site whose forced bytes allow it, when no thread's
// pc lies in it: entry jumps share pages (one injected mmap saved each;
// within a Batch such a mapping is the 64 KiB window around the address,
// as far as the unmapped gap reaches, so a thousand entry jumps a few
// bytes apart take one mmap: padMappingLocked),
// and a successor-preserving jump that keeps four bytes, which has
// exactly one address, gets it again at the next tstart (every later
// tstart made it a trap before: e2e TestFastTraceStressEightThreads,
// 1,000 tstart/tstop cycles). The arena memory of a removed pad and its
// tail (jumpSite.chunk) goes to the next pads placed within reach
// (reuseChunkLocked), likewise once no thread's pc lies in it (with
// threads running, after a look finds none there: releaseQuarantine), so
// tstart/tstop cycles do not grow the program's memory. A jump held back
// by a gdb breakpoint keeps its memory for when it goes back in.
//
// Installing in a Batch (tstart): the memory map (/proc/PID/maps) and the
// threads' pcs are read once (the map then kept in address order as
// pages are mapped), the code a page at a time (codecache.go: neighbouring
// tracepoints share pages; the installer's own writes drop what they
// touch), threads stopped inside new jumps' covered bytes are moved to
// the relocated copies once at its end, and with no thread running a
// patch is written in one write. Only the cheap shapes are listed first
// (KeptCandidates), the others (ShortSites and EvictSite search the code
// around) only when none of those is free and places: the same choice.
// The Batch runs in inferior.Process.Exclusive, which makes all its
// memory writes (pads, trampolines, entry jumps, the jumps themselves) a
// page at a time at its end; a pad fills its whole room with int3s
// after its tail, so pads side by side cover their pages without gaps,
// which are then written without being read first. The
// drainer is woken only when collection switches on, and only tries the
// installer's lock (drainDue): waiting for it put the lock in starvation
// mode, which cost the installing goroutine a yield at every unlock.
//
// --ftrace-shapes (SetShapes, Site.Shape) restricts the shapes used.
//
// Tracepoints near each other: installJump prefers the shapes whose
// bytes hold no other tracepoint's address (Engine.Tracepoints) and
// touch nothing already placed (a breakpoint, a trap, another jump or
// slot), then those that touch nothing placed. When every shape meets a
// placed jump, that jump becomes a trap and the newcomer takes the
// first shape then free (a trap cannot go inside a jump's bytes).
//
// # Patch protocol
//
// gdb talks to the stub only while every thread is stopped (all-stop), so
// installation happens with the world stopped: the pad and its relocated
// tail are written first, threads whose pc lies inside the covered bytes
// (not at their start) are moved to the relocated copies
// (inferior.Process.RelocatePCs), then the jump goes in with its first byte
// written last (inferior.Process.InsertPatch). Patches are hidden from gdb's
// memory reads and layered under breakpoints, so a gdb breakpoint at the
// tracepoint address works and stepping over it enters the pad (the hit is
// collected, as with gdbserver). A thread gdb sees stopped is never inside
// a pad (Stabilize single-steps it out first); one that ran the copy of a
// covered instruction and reaches the copy of the next one, which has an
// int3 pun at its own address, stops at that address instead, so that a
// stepi at a jump over several instructions executes one of them. Removal takes the puns' traps out, then the
// patch. A removal the drainer makes (a pad ended the run: a full buffer)
// waits, the program perhaps running, until the next stop (Flush) or the
// next Install, whichever comes first; only the drainer's own calls wait
// (Installer.asyncTid names its thread): gdb's tstop at that moment
// unpatches at once.
//
// A gdb breakpoint (software or hardware) on a covered instruction other
// than the first would not be hit while the jump is in (threads run the
// relocated copy), so the server tells the installer of each one
// (BreakpointInserted, BreakpointRemoved, breakpoints.go): the jump
// becomes a trap tracepoint while such a breakpoint is there (tstatus'
// notes say so) and is placed again, in the same table slot, at the first
// stop after the last one went where no thread is stopped inside the
// covered bytes (gdb stepping over the breakpoint takes it out for one
// step). In gdb's non-stop mode, with live patching off (--live-patch=off, and
// on arm64) the server pauses every running thread
// (inferior.Process.Pause) while the installer changes code and moves
// paused threads out of pads first (Stabilize). With live patching
// (x86-64's default) it does not: the jumps go in and out with the threads running
// (inferior's text_poke_bp-style protocol), threads inside a new jump's
// covered bytes are moved by the same function as in a pause, given to
// RelocatePCsLive (only jumps over more than one instruction need it),
// Install outside a Batch makes one, and the memory of a jump taken out
// with threads running is quarantined: it becomes spare only when every
// thread, each stopped a moment (inferior.Process.AllPCs), is outside
// it (releaseQuarantine, at the next Batch). A jump that becomes a trap
// gets its trap first: inferior holds that int3 back until the jump
// comes out and writes it as the removal's last byte (a hit in between
// would be lost; e2e TestNonStopBreakpointInTracedJump).
//
// # Hit path (jit.BuildJumpPadAMD64, see jit's package doc)
//
// The pad steps below the 128-byte red zone, saves flags and the 16 GPRs,
// clears DF, leaves at once when collection is off (CtlActive) or no
// stub is alive (CtlStubAlive), reads the time-stamp counter, runs the
// compiled condition, finds the thread's lane (by its thread pointer,
// from rdfsbase or, where the machine does not allow it, %fs:0 when
// every thread's TCB points to itself: a thread claims a lane of its own
// on its first hit), reserves a record there with cmpxchg (lock cmpxchg
// in the shared lane) and writes it: for a tracepoint that collects
// nothing, in a lane the thread owns, one 8-byte word (tracepoint and
// time stamp; the thread is the lane's owner), stored at once; otherwise
// a 32-byte header (tracepoint, time, thread), the register block only
// when the tracepoint collects registers, and the compiled collection,
// committed by storing the record's size last. Then it restores
// everything and jumps to the relocated instructions, which jump back.
// xmm/ymm/x87 state is never touched. Memory the expressions read goes
// through plain loads whose faults the stub redirects to recovery code
// (jit.Options.FaultLoads), so a bad pointer reads as zero.
//
// A pad never traps. A full lane drops the hit (counted per lane); a
// failing condition or collection writes an error record and clears
// CtlActive; the hit that reaches a passcount (counted with lock xadd only
// for tracepoints that have one) clears CtlActive too. The control block
// says why (CtlStop) and the drainer tells the engine.
//
// # Shared lanes and the drainer (lanes.go, drain.go, ring.go)
//
// The control block and the lanes are memory shared by the inferior and
// the stub (inferior.Process.MapShared: a memfd created in the inferior,
// mapped by both; the inferior keeps no file descriptor). A goroutine of
// the stub (drainLoop) reads the committed records in place while the
// program runs — no ptrace stop, no system call per record, no copy —
// merges the lanes by time stamp (each lane's order kept: a thread's hits
// stay in order), hands them to tracing.Engine.FastHits in one batch (one
// lock of the trace buffer; a record that collected nothing becomes a
// frame without a builder), then zeroes the consumed bytes and publishes
// the lanes' tails. It looks at the lanes every 50 to 500 µs while the
// pads write, backing off to 20 ms while they do not (a run's start and a
// new thread's wake it at once: an eventfd), and sleeps in the kernel
// with a 100 µs slice (sched_setattr), so that it gets a CPU at once when
// the program's threads keep every one busy; it drains
// only when a pass is due (drainDue): a lane a quarter full, more than a
// linear trace buffer can still take, a pad's stop, or records 100 ms
// old; until then it stays off the program's CPUs (a program that keeps
// every core busy would share them with it). A linear trace buffer is
// not left to fill by draining: the pads add up the frame bytes their
// records will make (jit.LaneSpent), and as soon as that exceeds the
// room the buffer had when the run started, the pad that made it so
// switches every pad off (jit.LaneBudget: each lane's budget is that
// room, so a lone writer stops at once; with several, the drainer's
// look at all lanes together does it), drains, and the run stops with tfull — gdbserver's
// in-process agent likewise stops when its buffer is full, and the
// program pays for no hit that could not be kept. The engine calls Sync before
// every trace packet, at disconnection and when the process ends (the
// shared memory outlives the process, so nothing collected is lost). New
// drop counts go to the engine (tstatus' notes) and the --debug log.
//
// The stub's death: the control block's CtlStubAlive word holds the id of
// the stub's ptrace thread and is registered in that thread's robust futex
// list (inferior.Process.MarkTracerAlive). When the thread ends — the stub
// exits, crashes or is SIGKILLed — the kernel clears the id, and from the
// next hit on the pads skip everything (no fault-recovering load runs
// without the stub that would catch its fault). The program runs on.

// At QTStart (StartRun) the lanes are emptied, counters and the stop word
// cleared and tracepoint slots reused, so a new experiment never sees an
// earlier one's records or errors; with threads running (live patching)
// it first waits until none is inside a pad (leavePads), for one would
// commit a record of the last run into the emptied lanes: it looks at
// every thread's pc (AllPCs), up to 20 times 200 µs apart, until none
// is, its first look being, when there is one, the look that freed
// quarantined memory at the start of QTStart's Batch (collection off
// since: a thread that entered a pad after it writes nothing), so that
// a tstart stops the running threads once for their pcs, not twice. Then
// (prefault.go) the stub claims a lane for each stopped thread in the
// owner table (running threads' pads claim theirs at their first hit) and
// wakes the drainer to allocate those lanes' first megabyte and have the
// process map it (as below; 128 MiB at most), while the jumps are placed
// and gdb's next packets travel: a page first touched in a pad would
// cost the program a page fault (1-3.5 µs on the VMs measured). An
// injected madvise MADV_POPULATE_WRITE did that inside QTStart before,
// 1.4 ms of a 100-tracepoint QTStart's 3 ms, holding a running thread
// that long in non-stop mode.
// A thread created while the run collects is held at its start
// (threadstart.go, inferior's thread start hook) while the stub claims its
// lane and allocates and maps the lane's first 4 MiB (no more than the
// linear buffer's room): its first hits take no page fault even when the
// program's threads keep every CPU busy, at the price of about 4 ms of
// that thread's start, once per lane. Beyond that, at each look the drainer
// allocates the pages ahead of each lane's head — four times what the
// lane's pads wrote since the last look, 256 KiB to 8 MiB, 256 KiB at a
// time — and has the process map each step at once (a process_vm_readv of
// a byte of every page: a read fault maps its page writable, and its
// neighbours in the kernel's 64 KiB fault-around window too). A new
// thread's 400,000 no-action hits took ~3,100 page
// faults, now ~200. That costs the stub about 4 µs a page, more than the
// program's own fault: worth it while a CPU is free for the stub, a loss
// when the program's threads keep every CPU busy. So when as many lanes
// were written since the last look as the stub has CPUs, the drainer
// allocates nothing and the pads fault their pages in (lanes.populate).
// On a PVM guest (shadow page tables) the first access to each page costs
// the process about 5.4 µs however the page was prepared; only the
// process's own threads can pay that (bench/firsttouch.c).
//
// # Static tracepoints
//
// gdb's static tracepoints (strace -m) are placed at their SDT marker's
// nop like fast tracepoints (semaphore.go raises the marker's semaphore,
// when it has one, while the tracepoint is installed). One that collects
// $_sdata keeps its jump: the pad records the register block and, after
// the tracepoint's own collections, the memory of the marker's memory
// arguments (tracing.StaticReads; jit.PadSpec.Uncounted keeps those bytes
// out of LaneSpent, which counts the smallest 'S' block instead), and the
// engine formats "provider:name(args)" from the record when it makes the
// frame, dropping those memory blocks: the frame is the trap's.
//
// # Trace state variables
//
// Variables 0 to 255 live in an int64 array in the control block
// (jit.CtlTSVs), where pads read and write them in place; the installer
// is the engine's tracing.TSVStore, so qTV (info tvariables), trap
// tracepoints and QTDV use the same values, live while the program runs.
// `teval $n = $n + K` compiles to one LOCK XADD (jit's atomicAdd): threads
// counting at once lose nothing. Other updates (`$max = ...`) are a load
// and a store, as in gdbserver's agent: concurrent hits may overwrite
// each other, and so may a trap tracepoint's update (made by the stub)
// and a pad's. When the lanes are remapped the array moves with them; when
// the process ends the engine takes the values back.
//
// # Time
//
// Each record holds the time-stamp counter the pad read (on arm64 the
// virtual counter, cntvct_el0). The stub reads the counter and its clock
// together when the installer is made and before every drain (clock.go)
// and converts records linearly from the first reading, with the rate
// measured between the first and the latest reading on x86-64 and
// cntfrq_el0's on arm64 (architecturally the counter's frequency), to
// nanoseconds since the Unix epoch: the frames' time
// (frames.FrameBuilder.SetTime), and $trace_timestamp in microseconds
// like the stub's own.
//
// # arm64 records
//
// The data path (lanes, records, merging, the drainer) is the same for
// the arm64 pads (jit.BuildJumpPadA64) as for the x86-64 ones; what
// differs is a small description chosen by build tag (isa_amd64.go,
// isa_arm64.go): the register block's size (ringRegBytes: the 800-byte
// arm64 block, jit.PadRegBlockARM64), the record size (padRecordSize),
// the clock's rate (counterPeriod; tsc_arm64.s reads cntvct_el0 and
// cntfrq_el0), how the pads find a thread's pointer (padThreadPointer:
// always tpidr_el0, so threads may always own lanes) and how a record's
// registers reach the engine (fastRegs): x0-x30, sp, pc, cpsr are GDB's
// aarch64 numbers 0-33 in tracing.FastRecord.Regs, v0-v31, fpsr and fpcr
// go as tracing.FastRecord.FPSIMD. The stub claims lanes with the
// thread pointer inferior gives (Process.ThreadPointer: fs_base,
// tpidr_el0). The tests (pad_arm64_test.go, under qemu-aarch64) run
// arm64 pads in the test process and drain their records, into the
// engine too.
//
// # arm64 placement
//
// The placement differs too, chosen by the same build tag: placeSite is
// placeX86 (the shapes above) on x86-64 and placeA64 (place_arm64.go) on
// arm64, where every instruction is 4 bytes and the jump is one `b pad`
// over the one instruction at the site (a fasttp/a64 SitePlan: a
// WordSite, nothing to pun, evict or move threads out of). The pad and
// its tail (the instruction relocated by fasttp/a64, then `b site+4`)
// go to an arena within the b's ±128 MB (padReach; arenas serve 64 MB
// windows of code, arenaWindowShift, and a site out of its window
// arena's reach gets a new one); instructions fasttp/a64 refuses (and
// BTI landing pads in guarded pages, read from smaps' VmFlags "bt") are
// traps. No tracepoint at all goes inside an atomic sequence, from a
// load-exclusive to its store-exclusive (refuseSite,
// a64.AtomicSequence): a jump's b and pad or a trap's exception clear
// the exclusive monitor, so the store would fail every time; Install
// says why and tstart fails. Pad, tail and b are written through /proc/PID/mem with every
// thread stopped, the b last, one aligned 4-byte store: the kernel's
// write (copy_to_user_page) does the data and instruction cache
// maintenance instruction fetch needs, so no thread can see half a
// patch or a stale copy. With threads running (non-stop with live
// patching, whose protocol is x86-64's) an arm64 fast tracepoint is a
// trap. The pads' shared-state updates, their conditions and actions
// (the arm64 JIT; `teval $n = $n + K` an exclusive load/store loop) and
// their records are as on x86-64.
//
// # Known gaps
//
//   - Punned instruction heads are int3s: a thread that jumps straight to
//     one pays a ptrace stop, and dies of SIGTRAP if the stub is gone (the
//     int3 is a byte of the jump's displacement: the watchdog of package
//     guard leaves it).
//   - A thread killed inside a pad leaves an uncommitted record that blocks
//     its lane (later hits there are dropped, counted) until the next
//     tstart.
//   - The drainer turns records into frames at about 10 million per second
//     without collection, 3 million with registers (go test -bench Drain);
//     a program hitting faster than that for longer than a lane holds
//     loses hits (counted, shown in tstatus).
package fasttp
