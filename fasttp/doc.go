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
//     no floating point) and use no trace state variable (their values live
//     in the stub's engine, which trap tracepoints update; keeping them in
//     the inferior for both kinds is future work);
//   - PlanSite can cover at least 5 bytes from the address with instructions
//     it decodes with checked lengths (DecodeInsn cross-checks x86asm with
//     our own length decoder) and RelocateInsn can move them.
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
// instruction. Pads without puns share arenas near their code; punned pads
// get their own pages at the computed address. Pads and their memory are
// never unmapped: a thread may still be inside one after its tracepoint goes.
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
// collected, as with gdbserver). Removal takes the puns' traps out, then the
// patch. Non-stop mode (inserting while other threads run) is not
// supported by the stub at all.
//
// # Hit path (jit.BuildJumpPadAMD64, see jit's package doc)
//
// The pad steps below the 128-byte red zone, saves flags and the 16 GPRs,
// clears DF, checks the control block's active flag, runs the compiled
// condition, counts the hit with lock xadd, reserves a record in the ring
// with lock cmpxchg (no lock, so threads never serialise on a spinlock like
// gdbserver's in-process agent), writes the register block and runs the
// compiled collection code into the record, commits it by storing its size
// last, restores everything and jumps to the relocated instructions, which
// jump back. xmm/ymm/x87 state is never touched. Memory the expressions read
// goes through process_vm_readv on the process's own pid, so a bad pointer
// reads as zero (Options.ZeroUnreadable, the engine's semantics) instead of
// faulting.
//
// # Draining (Installer.Sync, ring.go)
//
// The ring is a 1 MiB buffer in the inferior. The engine calls Sync before
// it answers any trace packet; a pad that finds the ring full executes an
// int3 whose hook drains it and retries; the hit that reaches the passcount
// executes another int3 so the run stops at once. Draining reads committed
// records from the stub's tail (ParseRing reads each header before its
// body), hands them to tracing.Engine.FastHit (frames, hit counts, passcount,
// buffer full) or FastHitError (terror), zeroes the consumed bytes and
// publishes the new tail.
//
// # Known gaps
//
//   - A thread that gdb finds stopped inside a pad (all-stop stopped it
//     there) shows the pad's address; gdbserver moves such threads out
//     first ("stabilizing"), we do not yet.
//   - A gdb breakpoint on a covered instruction other than the first is not
//     hit while the jump is in place (the relocated copy runs instead).
//   - The ring is also drained when a thread exits (an exit hook with
//     PTRACE_O_TRACEEXIT, turned on with the first pad), so hits just before
//     the process ends are kept; a process killed with SIGKILL may end
//     without that stop, and then its last undrained hits are lost.
package fasttp
