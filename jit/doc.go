// Package jit compiles GDB agent expressions (package agentexpr) to native
// machine code meant to run inside the inferior, called from a tracepoint's
// jump pad. This comment is the contract between the generated code and
// whoever places and calls it.
//
// # API
//
//	b, err := jit.ForArch("amd64")            // a Backend ("arm64" too)
//	code, err := b.Compile(expr, jit.Options{}) // or jit.Compile(expr, "amd64", opts)
//
// A non-nil error means the expression is invalid (stack underflow, depths
// that disagree between paths, a jump into the middle of an instruction,
// running off the end, ext 0...). Code.Fallback != "" means it is valid but
// must be run by agentexpr.Eval; the reason is visible there ("printf
// needs the interpreter", floating-point opcodes, a register outside the
// pad, a stack deeper than Options.MaxStack). Otherwise Code.Text is the
// machine code. Code.RegsRead lists the pad slots the code reads, so a pad
// can save only those; Code.StackBytes bounds its stack use.
//
// # Calling contract (amd64, System V)
//
//	uint64_t fn(const uint64_t *regs, struct ctx *ctx);
//
// The code is position independent (rel32 branches and calls only, no
// absolute addresses, Code.Relocs is empty): copy it anywhere executable.
// It preserves rbx, rbp, r12-r15 and rsp, needs rsp ≡ 8 (mod 16) on entry
// (a normal CALL), and uses at most Code.StackBytes of stack (about
// 150 bytes + 8 per stack entry; Options.MaxStack, default 256 entries, keeps
// it to a few KB). The direction flag must be clear (the ABI's rule).
//
// regs, the pad layout: 8-byte little-endian slots in GDB's amd64 register
// numbering, slot i = GDB regnum i: rax rbx rcx rdx rsi rdi rbp rsp r8 ...
// r15 (0-15), rip (16), eflags (17), cs ss ds es fs gs (18-23) — PadRegs
// slots; 32-bit registers are zero-extended into their slot. "reg n" is a
// single load from regs+8n.
//
// ctx, 96 bytes of 8-byte fields (offsets are the Ctx* constants):
//
//	+0  err        out: ErrNone or an Err* code (set to 0 on entry)
//	+8  result     out: the result, also returned in rax (0 on error)
//	+16 tsvs       in:  int64 array of trace state variables, by number
//	+24 ntsvs      in:  its length; getv n >= ntsvs fails (ErrTSV), setv
//	                    n >= ntsvs does nothing (as in gdbserver), tracev
//	                    n >= ntsvs fails (ErrCollect)
//	+32 frame      in:  collection buffer
//	+40 framecap   in:  its size
//	+48 frameused  in/out: bytes used; collection appends after them
//	+56 pid        in:  the inferior's own pid, for process_vm_readv
//	+64 directlo   in:  [directlo, directhi): memory known to be mapped
//	+72 directhi        (used only with Options.DirectLoads; lo == hi: none)
//	+80 readmem    in:  0, or int64_t readmem(ctx, void *dst, uint64_t src,
//	                    uint64_t len) returning bytes read or -errno, called
//	                    instead of the syscall (SysV, rsp 16-aligned)
//	+88 jumplimit  in:  backward jumps allowed (0: DefaultJumpLimit);
//	                    exceeding it fails with ErrSteps, so a looping
//	                    expression cannot hang the inferior
//
// Error codes: ErrMemory (a ref read failed, or tracenz met an unreadable
// byte), ErrDivZero, ErrFrameFull, ErrTSV, ErrCollect (trace* could not
// read the memory to record, or tracev of an unknown variable), ErrSteps.
// They correspond to agentexpr's ErrUnreadable, ErrDivideByZero,
// ErrCollect (frame full and collect failures), ErrUnknownTSV,
// ErrStepLimit. On error the frame may hold complete blocks appended
// before the failing instruction; the trace engine discards the frame.
//
// # Collection blocks
//
// Collection opcodes append to frame[frameused:] (little-endian):
//
//	'M' addr:u64 len:u16 bytes[len]   trace, trace_quick, trace16, tracenz
//	'V' num:u32 value:i64             tracev
//
// which is gdbserver's traceframe block layout; lengths over 65535 are split
// into several 'M' blocks. tracenz records up to and including the first
// NUL, at most its limit, reading byte by byte like gdbserver; a block that
// would not fit fails with ErrFrameFull and is not written.
//
// # Safe memory reads
//
// Code in the inferior must not fault on a bad pointer. Every ref8/16/32/64
// and every collection reads through an internal helper that issues
// process_vm_readv(pid, local, 1, remote, 1, 0) (syscall 310) on the
// process's own pid, straight from the generated code: the kernel returns
// -EFAULT (or a short count) instead of delivering SIGSEGV. The cost is one
// system call per read — microseconds rather than the nanosecond of a load
// (BenchmarkRef and BENCHMARKS.md). With Options.DirectLoads, a ref whose
// bytes lie in [directlo, directhi) is a plain load; the caller must only
// put there memory that cannot be unmapped while tracing (e.g. the
// executable's data and bss). A readmem hook (ctx+80) replaces the
// syscall, e.g. with an in-process agent's own safe reader. With
// Options.FaultLoads reads are plain loads whose faults the tracer
// redirects to recovery code (next section).
//
// # Fault-recovering loads (Options.FaultLoads, amd64)
//
// When a tracer catches the inferior's faults (the stub, through
// inferior.Process.SetFaultHook), reads can be plain loads and pay the
// safe path only when they fault. With Options.FaultLoads:
//
//   - ref8/16/32/64 is one inline load (movzx/mov rax, [rax]);
//   - every collection (trace, trace_quick, trace16, tracenz, and the
//     readability probe trace does when a block does not fit) reads through
//     the readmem helper (rax = source, rdx = destination, rcx = length,
//     as for the safe path), whose fast path keeps the length in r8,
//     copies with rsi/rdi/rcx (a byte loop through r9b up to 16 bytes, REP
//     MOVSB beyond) and returns r8 in rax.
//
// Code.Faults lists every instruction that may fault, as offsets in Text
// ({Off, Recover}, sorted by Off): each inline ref load, the byte load of
// the helper's loop and its REP MOVSB (the loop's store and the other
// instructions are not listed: they cannot fault on the read address).
// Nothing else may fault (the other memory accesses are to the
// ctx, the register pad, the TSV array, the frame and the code's own
// stack, all owned by the caller; the REP MOVSB writes to the frame or a
// stack slot). A fault at Off must resume at Recover with all registers as
// at the fault (the faulting instruction did not complete; in the copy,
// rsi, rdi, rcx and r9 may show partial progress and part of the
// destination may be written). The recovery code redoes that whole read through the
// safe path (process_vm_readv, or the ctx readmem hook), so the outcome is
// exactly the safe path's, Options.ZeroUnreadable's partial reads and
// trace's readable-prefix semantics included, and continues after the fast
// path:
//
//   - a ref's recovery stub (after the error stubs) calls the ref helper,
//     which reads with the safe path only, and jumps back after the load:
//     rax still holds the address because the load did not complete;
//   - the copy's two sites share one recovery: it restores rcx from r8
//     (the copy never changes rax, rdx or r8) and falls into the safe
//     path, which rereads from the block's start and overwrites any
//     partial copy.
//
// The recovery code itself never faults (its reads are the safe path's),
// so a fault is redirected at most once per read.
// Options.DirectLoads is irrelevant to ref* under FaultLoads. When no
// tracer redirects faults (an in-process agent without a SIGSEGV handler,
// or the stub not registering the table), a bad pointer kills the
// process: use FaultLoads only where faults are caught. The arm64 backend
// ignores FaultLoads and reports no Faults (its reads are always safe).
//
// Whoever places the code relocates the table: BuildJumpPadAMD64 returns
// JumpPad.Faults, the Cond and Collect codes' entries as absolute
// addresses ({PC, Recover}, sorted by PC). The stub's fault hook, on
// SIGSEGV/SIGBUS at a PC of that table, returns its Recover (the signal
// is suppressed, registers untouched); at any other pc it lets the signal
// through.
//
// Tests: real faults cannot be taken in-process (the Go runtime would
// crash), so the differential tests run FaultLoads code over always-mapped
// memory (nothing faults; results equal the safe path's and the
// interpreter's), and with a test-only option that replaces every
// faulting instruction by a jump to its Recover (a REP MOVSB as if it had
// faulted half-way), so that every read goes through the recovery code,
// over guard pages and wild pointers too. Each table entry is checked to
// decode to a memory read and Recover to be an instruction boundary.
//
// # Unreadable memory as zero (Options.ZeroUnreadable, amd64)
//
// The trace engine treats memory an expression cannot read as zero rather
// than failing (gdbserver ignores those read errors too), and the jump
// pads' code must agree with it. With Options.ZeroUnreadable:
//
//   - ref8/16/32/64 never fail: the bytes process_vm_readv (or the hook)
//     could read keep their value, the rest read 0 (a value straddling the
//     end of a mapping keeps its readable low-address bytes);
//   - trace, trace_quick and trace16 record only the readable prefix of
//     the range ('M' blocks of at most 65535 bytes, as usual) and nothing
//     if it is unreadable from the start; a prefix block that does not fit
//     fails with ErrFrameFull, an unreadable one never fails;
//   - tracenz reads byte by byte as usual and treats the first unreadable
//     byte as the terminator, not recorded.
//
// ErrMemory and the "memory unreadable" case of ErrCollect then never
// occur. The arm64 backend does not implement it and falls back. Tests
// compare it with agentexpr.Eval over a Memory that reads unreadable
// bytes as zero and a Collector that records readable prefixes, which is
// what the trace engine's own hit path does.
//
// # Code generation (amd64)
//
// One snippet per opcode, goto/if_goto patched after emission. The top of
// the expression stack lives in rax, the rest on the machine stack (push /
// pop); the static depth of every instruction is known (Validate guarantees
// that all paths agree), so no stack pointer bookkeeping is emitted.
// equal/less_signed/less_unsigned/log_not followed by an if_goto that is
// not itself a jump target become cmp/test + jcc. Division checks for zero
// and for -1 (INT64_MIN / -1 = INT64_MIN, x % -1 = 0, as agentexpr
// defines, where idiv would trap). Shifts by >= 64 give 0 (or the sign for
// rsh_signed), via cmov. Register use: rax top, r12 regs, r13 ctx, rbp
// frame pointer (scratch iovecs below it), rbx/r15 collection state, r14
// saved rsp while the read helper realigns the stack to 16 bytes around the
// syscall or hook call. The encoder is hand-written (x86enc.go) and every
// instruction form is checked against golang.org/x/arch/x86/x86asm.
//
// # Jump pads (amd64)
//
// BuildJumpPadAMD64(PadSpec) generates the per-tracepoint jump pad a fast
// tracepoint's jmp rel32 leads to. It depends on its position only through
// PadSpec.Addr (the rel32 to TailAddr) and embeds the control block's
// absolute address. Shared state is the control block (one per process,
// Ctl* offsets, 8-byte fields):
//
//	+0  active     nonzero: collect; 0: the pad goes straight to Skip
//	+8  ringbase   address of the ring data
//	+16 ringsize   bytes, a multiple of 16
//	+24 head       reservation cursor (bytes, monotonic; pads: lock cmpxchg)
//	+32 tail       consumer cursor (bytes, monotonic; written by the stub only)
//	+40 tsvs       int64 array indexed by trace state variable number
//	+48 ntsvs      its length
//	+56 pid        the inferior's pid (ctx pid of the expression code)
//	+64 tracepoint table: entry i at 64 + 32*i: +0 hits (lock xadd when the
//	    condition holds), +8 passcount (0: none), +16 errors, +24 reserved
//
// What the pad does: lea rsp,[rsp-128] (below the red zone, flags
// untouched), pushfq, push the 15 other GPRs, build the PadRegs register
// block on the stack (rsp = the thread's rsp at the tracepoint, rip =
// TPAddr, eflags as at the tracepoint, segment selectors), cld, align rsp
// to 16 and put a fresh zeroed ctx below it for every expression call
// (tsvs, ntsvs, pid from the control block; collection: frame = the
// record's block area, framecap = CollectCap, frameused carried from one
// Collect to the next). The Cond and Collect code is copied after the pad
// body and reached with call rel32. x87/SSE/AVX state is never touched
// (the expression code does not touch it either). Then:
//
//   - active == 0, or the condition returns 0: Skip.
//   - the condition fails: reserve a header-only record (size 16, flags
//     RecError, used = the Err* code), errors++, Skip.
//   - otherwise hits++ (lock xadd), reserve PadRecordSize(CollectCap)
//     bytes, write the header (tp index, used 0, flags 0) and the register
//     block, run the Collect code in order. A failure turns the record into
//     a RecError one of the same size (used = the Err* code), errors++;
//     otherwise used = the final frameused. The size field is written last
//     with a plain store: that is the commit (x86 stores are not reordered
//     with each other).
//   - if passcount != 0 and the new hit count equals it, the pad executes
//     the int3 at PassTrap; the stub stops tracing and resumes the thread at
//     PassTrap+1, which is Skip.
//   - Skip: restore the GPRs and flags exactly, lea rsp,[rsp+128], jmp
//     TailAddr (the relocated copy of the overwritten instructions).
//
// Ring records start at ringbase + cursor%ringsize, 16-byte aligned, and
// never wrap around the end. Header (u32 fields): +0 size (whole record,
// written last; 0 = not committed), +4 tracepoint index, +8 used (bytes of
// blocks; RecError: the Err* code), +12 flags (RecSkip, RecError). A normal
// record continues with the PadRegs*8-byte register block and used bytes of
// 'M'/'V' blocks. Reservation: h = head, t = tail, off = h % ringsize;
// need = R, or (ringsize-off)+R when the record does not fit before the
// end; if h+need-t > ringsize the ring is full and the pad executes the
// int3 at FullTrap (the stub drains the ring and sets rip to Retry, or to
// Skip when tracing stopped); else lock cmpxchg head h -> h+need, retrying
// on failure. A skip writes a committed RecSkip filler (size ringsize-off)
// at off and puts the record at the ring start.
//
// The consumer (package fasttp) reads committed records from tail in
// order and stops at the first uncommitted one. Before publishing a new
// tail it must zero every consumed byte (not only the headers: record
// sizes differ between tracepoints, so a later record can start where an
// old one had payload), so that nothing stale ever looks committed; the
// ring must start zeroed.
//
// Stack use in the thread (JumpPad.StackBytes): 128 (red zone) + 8 + 120
// + PadRegs*8 + up to 15 (alignment) + CtxSize + 8 + the expressions'
// Code.StackBytes. A signal delivered in the pad lands below that. The
// int3s (FullTrap, PassTrap) cannot be executed in-process (SIGTRAP would
// kill the test): the tests check that those addresses hold int3 and that
// PassTrap+1 is Skip, replace them by what the stub would do (jump to
// Skip, or drain and jump to Retry; a nop at PassTrap), and exercise
// everything else with a patched site in the test process, from four
// threads at once.
//
// # arm64
//
// ForArch("arm64") compiles for AArch64 with the same ctx, error codes,
// blocks and semantics. Calling contract (AAPCS64): x0 = regs, x1 = ctx,
// result in x0; x19-x24, x29, x30 are saved and restored; sp stays 16-byte
// aligned. The pad has PadRegsARM64 slots in GDB's aarch64 numbering
// (x0..x30, sp, pc, cpsr). The whole expression stack lives in fixed
// sp-relative slots (the static depth gives each entry its own slot), top
// cached in x0; x19 regs, x20 ctx, x21/x22 collection state, x23/x24 the
// helpers' return addresses. Safe reads use process_vm_readv (syscall 270,
// svc #0) or the ctx hook. Division needs only the zero check: sdiv does
// not trap on INT64_MIN / -1. The encoder (a64enc.go) is checked against
// golang.org/x/arch/arm64/arm64asm. The tests run under qemu-aarch64
// (GOARCH=arm64 go test -exec qemu-aarch64 ./jit/); qemu-user does not
// implement process_vm_readv, so there the tests install a generated
// reader hook and the syscall path itself is untested on arm64.
//
// Other architectures: ForArch returns an error.
package jit
