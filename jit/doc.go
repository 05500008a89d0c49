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
//	                    n >= ntsvs fails (ErrCollect). On amd64,
//	                    `getv n; const K; add; [ext 64;] setv n` (gdb's
//	                    `teval $n = $n + K`) is one LOCK XADD: the array
//	                    may be shared by threads running the code at once
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
// # Unreadable memory as zero (Options.ZeroUnreadable)
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
// occur. Both backends build it on the byte count of the safe read:
// process_vm_readv returns the bytes before the first page it cannot
// read (a short count) or -EFAULT when there are none, and a readmem hook
// must answer the same way (one that fails a partly readable read makes
// the range unreadable from its start). The ref helper masks the value
// read to the count's low bytes (0 for a count <= 0); trace reads each
// chunk straight into the frame, records the count's bytes and stops
// after a short count; a chunk that does not fit is probed 8 bytes at a
// time for its readable prefix, which is recorded if it fits; tracenz's
// byte reads end the string at a failed read. Tests (zeroread_test.go,
// both architectures) compare it with agentexpr.Eval over a Memory that
// reads unreadable bytes as zero and a Collector that records readable
// prefixes, which is what the trace engine's own hit path does, on
// hand-written cases (values and ranges straddling the data pages' end or
// starting in a guard page, tracenz stopping at an unreadable byte, frame
// full on a prefix) and random expressions.
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
// PadSpec.Addr (the rel32s of its jumps to TailAddr, and the absolute
// addresses of Skip and Faults), so JumpPad.Place moves a built pad
// without building it again; it embeds the control block's absolute
// address. Its tracepoint's address and table index sit in fixed-size
// immediates it lists, so JumpPad.Clone and Retarget make the pad of
// another tracepoint with the same spec otherwise (PadSpec.Key) without
// building it; SPBias makes the register block's rsp that of the
// instruction before the jump (a push left in place). A pad never traps: a full lane drops the hit, and a
// reached passcount or a failure clears CtlActive for the stub to notice.
// Shared state is the control block (one per process, Ctl* offsets,
// 8-byte little-endian fields) and the lanes it describes:
//
//	+0    active      nonzero: collect; 0: the pad goes straight to Skip
//	+8    stubalive   u32: the stub's tracer thread id; the stub registers it in
//	                  that thread's robust futex list, so the kernel clears
//	                  the id bits (StubTIDMask) when the stub ends
//	+16   tsvs        int64 array indexed by trace state variable number
//	+24   ntsvs       its length
//	+32   pid         the inferior's pid (ctx pid of the expression code)
//	+64   stop        why the first pad that cleared active did: StopPassCount
//	                  or StopError (low 32 bits) and its tracepoint index
//	                  (high 32); set with lock cmpxchg from 0, cleared by
//	                  the stub
//	+80   stubgone    hits skipped because no stub was alive (lock add)
//	+128  owners      MaxLanes (64) thread pointers (fs base), 0 = free:
//	                  entry i owns lane i
//	+768  lanes       lane i's header at CtlLanes + 256*i, i = 0..MaxLanes;
//	                  lane PadSpec.Lanes is the shared lane
//	CtlTPs            tracepoint table (768 + 65*256): entry i at
//	                  CtlTPs + 32*i: +0 hits (TPHits), +8 passcount
//	                  (TPPassCount, 0: none), +16 errors (TPErrors)
//
// A lane header (LaneHdrSize = 256 bytes) holds +0 head (reservation
// cursor in bytes, monotonic; pads advance it with cmpxchg), +8
// dropped (hits dropped because the lane was full; lock add), +16 base
// (address of the lane's data), +24 size (bytes, a power of two), +32
// spent (the gdb frame bytes of the lane's committed records,
// PadSpec.FrameBase + used each, added after the commit: add in a
// thread's own lane, lock add in the shared one), +40 budget (when not
// 0, the pad whose record takes spent past it clears CtlActive), and, on
// a cache line of its own, +128 tail (the consumer's cursor, written by
// the stub only). PadSpec.Lanes (a power of two, at most MaxLanes) is the
// number of lanes threads may own; lane Lanes is shared by the others.
//
// What the pad does: lea rsp,[rsp-128] (below the red zone, flags
// untouched), the fast exit below, pushfq, push the 15 other GPRs, build
// the PadRegs register
// block on the stack (rsp = the thread's rsp at the tracepoint, rip =
// TPAddr, eflags as at the tracepoint, segment selectors) — only when the
// record collects registers or an expression reads one (Code.RegsRead);
// otherwise its space is reserved but left unfilled — cld, align rsp
// to 16 with a ctx block and 32 bytes of locals above it. The Cond and
// Collect code is copied after the pad body (16-byte aligned, int3
// padding that is never executed) and reached with call rel32; every
// call gets a fresh zeroed ctx: tsvs, ntsvs and pid from the control
// block, jumplimit PadJumpLimit (a looping expression ends the hit with
// ErrSteps), and for a collection frame = the record's block area,
// framecap = CollectCap, frameused carried from one Collect to the next.
// x87/SSE/AVX state is never changed (with PadSpec.XSaveSize, XSAVE
// stores it into the record). Then:
//
//   - active == 0: the pad leaves at once, before the full save (after a
//     stop the jumps may stay until the program stops again): push rcx,
//     load active into it, jrcxz to pop rcx, lea rsp,[rsp+128], jmp
//     TailAddr — the flags are never touched. The check is repeated
//     after the save.
//   - stubalive & StubTIDMask == 0: lock add stubgone, Skip (the stub is
//     gone: nothing more runs, no fault-recovering load without the stub
//     that catches its faults). Otherwise rdtsc gives the record's time.
//   - the condition returns 0: Skip; it fails: the condition-error path.
//   - passcount P != 0: the hit gets its number n, one more than what
//     lock xadd hits, 1 returns; n > P (other threads got there first):
//     Skip. Without a passcount hits is not touched.
//   - find the thread's lane. With PadSpec.Compact in a lane the thread
//     owns, reserve RecCompactSize bytes and store the compact record
//     (below); otherwise reserve R = PadRecordSize(CollectRegs,
//     CollectCap) bytes; when the lane is full, lock add dropped
//     and go on to the passcount check. Otherwise write the header
//     (tracepoint index, used 0, flags RecRegs or 0, time, thread), the
//     register block when CollectRegs (rep movsq), then run the Collect
//     code in order. A collection failure turns the record into a
//     RecError one of the same size (flags RecError alone, used = the
//     Err* code), errors++ (lock add), commits it and stops tracing with
//     StopError (the passcount check is skipped). Otherwise used = the final frameused, and the size field
//     is written last with a plain store: that is the commit (x86 stores
//     are not reordered with each other).
//   - n == P (recorded or dropped): stop = StopPassCount and the
//     tracepoint index (if still 0), active = 0. Exactly P hits pass, so with any
//     number of threads at most P records are written.
//   - Skip: restore the GPRs and flags exactly, lea rsp,[rsp+8+128], jmp
//     TailAddr (the relocated copy of the overwritten instructions). The
//     flags come back without popfq (microcoded, ~20 cycles): with rax =
//     saved flags << 8 | OF, add al,0x7f sets OF and sahf sets SF ZF AF
//     PF CF; DF is set again (std) if it was set (the pad cleared it). No
//     other flag can change inside a pad.
//
// The condition-error path: errors++ (lock add), find the lane, reserve a
// header-only record (RecHeaderSize bytes; a full lane counts it in
// dropped) with flags RecError and used = the Err* code, commit it, then
// stop = StopError and the index (if still 0), active = 0, Skip. Stopping
// sets stop before it clears active.
//
// Lane selection. With PadSpec.FSBase (only where the kernel enables
// rdfsbase, HWCAP2_FSGSBASE; elsewhere it is #UD), rdfsbase gives the
// thread pointer f; with PadSpec.TPLoad instead, `mov %fs:0, %rsi` reads
// it from the thread control block, which glibc and musl start with its
// own address (a thread without one faults there: the load is in Faults,
// its recovery sets f = 0); with neither every hit goes to the shared
// lane and RecThread is 0. f is recorded in RecThread; f == 0 uses the
// shared lane.
// Otherwise the pad probes the owner table linearly (modulo Lanes, at
// most Lanes entries) from slot ((f>>12) * 0x9e3779b97f4a7c15) >> (64 -
// log2 Lanes) (0 for one lane): an entry equal to f is the thread's lane;
// a free entry is claimed with lock cmpxchg 0 -> f (if another thread
// wins it the probe goes on); with no entry left the thread uses the
// shared lane. Pads never release an entry; the stub may fill the table
// itself while no thread is in a pad (LaneSlot gives the first slot of
// the search). A thread that owns a lane is its only writer, so its
// records are in its hit order there, and it reserves with a cmpxchg
// without lock: one instruction is atomic for the thread (a signal
// handler that hits a tracepoint runs between two of them) and no other
// CPU writes the head. The shared lane's head needs lock cmpxchg.
//
// Records start at base + cursor % size, 8-byte aligned, and never wrap
// around the lane's end. A compact record (PadSpec.Compact: the
// tracepoint collects nothing; only in a lane the thread owns) is one
// u64 stored at once, which is its commit: RecCompactBit (bit 63), the
// tracepoint index in bits 48-62 and the low RecCompactTimeBits (48)
// bits of rdtsc; its thread is the lane's owner, and the consumer
// restores the time's high bits from its own clock. A full record is a
// multiple of 16 bytes with a header (RecHeaderSize = 32 bytes): +0 u32
// size (whole record, written last; 0 = not committed), +4 u32
// tracepoint index (below 2^31, so bit 63 of the first u64 is clear),
// +8 u32 used (bytes of blocks; RecError: the Err* code), +12 u32 flags
// (RecError, RecRegs, RecXSave), +16 u64 time (rdtsc at the hit), +24
// u64 thread (fs base, 0 when unknown). With RecRegs the PadRegs*8-byte
// register block follows, then used bytes of 'M'/'V' blocks.
// Reservation of R bytes: h = head, off = h & (size-1); need = R, or
// (size-off)+R when the record does not fit before the end; if
// h+need-tail > size (a signed compare: with a stale h, read before
// other threads and the stub moved on, it is negative, and the cmpxchg
// fails and retries) the lane is full and the hit is dropped; else
// (lock) cmpxchg head h -> h+need, retrying with the head it returns on
// failure. When need > R the pad stores the filler word (RecCompactBit
// and index RecCompactSkip, time bits 0: the rest of the lane is unused)
// at off and puts the record at the lane's start; 8 bytes are enough,
// so compact and full records share a lane.
//
// The consumer (package fasttp) reads each lane's committed records from
// tail in order and stops at the first uncommitted one. Before
// publishing a new tail it must zero every consumed byte (not only the
// headers: record sizes differ between tracepoints, so a later record can
// start where an old one had payload), so that nothing stale ever looks
// committed; lanes start zeroed. Records of different lanes are merged by
// time stamp.
//
// Stack use in the thread (JumpPad.StackBytes): 128 (red zone) + 8 + 120
// + PadRegs*8 + up to 15 (alignment) + CtxSize + 32 + 8 + the deepest
// expression's Code.StackBytes. A signal delivered in the pad lands below
// that.
//
// Tests run pads in the test process over a patched site (add rcx, imm32;
// ret) called on a private stack with every GPR and rflags set, from
// threads locked with runtime.LockOSThread: the thread must come out
// exactly as from the original instruction, its red zone untouched. They
// decode every pad (the body holds no int3, branches land on its own
// instructions, plain stores to shared memory only at active and the
// stop words), check records, fillers, full lanes, a dead stub, passcounts
// and errors, lane selection with prepared owner tables, and four threads
// at once with a consumer draining the lanes (per-lane order, no torn
// record, records + dropped = hits). BenchmarkPadHit measures a hit.
//
// # Jump pads (arm64)
//
// BuildJumpPadA64(PadSpec) generates the AArch64 pad a fast tracepoint's
// B leads to (pad_a64.go; it generates bytes on any host). It shares the
// control block, the lanes, the owner table and its hash (LaneSlot), the
// record header, compact and filler words, the reservation protocol,
// LaneSpent/LaneBudget, passcounts and stop reasons with the amd64 pads
// above; only what follows differs.
//
// Entry and state. The site's B arrives with every register live (x16
// and x17 too: the site is an arbitrary instruction, not a call). The
// pad subtracts 128 + PadRegBlockARM64 bytes from sp (SUB does not touch
// the flags; Linux has no red zone on arm64, the pad leaves 128 bytes
// alone anyway, and sp stays 16-aligned, as the thread's must be), stores
// x16 in its slot and loads CtlActive through x16: 0 restores x16 and sp
// and branches to TailAddr, nothing else touched. Otherwise it stores
// x0-x30 (stp) and nzcv (mrs) into the register block at the new sp,
// which is both the save area and the block the expressions read: slot i
// = GDB's aarch64 regnum i, x0..x30 (0-30), sp (31: the thread's sp at
// the tracepoint + SPBias), pc (32: TPAddr), cpsr (33: nzcv as mrs gives
// it, bits 28-31 as in the kernel's pstate, the rest 0), written only
// when the record collects registers or an expression reads one (sp and
// pc; the GPRs and nzcv are always saved). With CollectRegs it also
// stores q0-q31 (16 bytes each, from PadQRegsARM64) and fpsr, fpcr
// (PadFPSRARM64, PadFPCRARM64): PadRegBlockARM64 = 34*8 + 32*16 + 16 =
// 800 bytes. Below the block, 128 bytes hold the ctx and the locals;
// expression code runs below them. Skip reloads nzcv (msr) and x0-x30
// from the block, adds the frame back to sp and branches to TailAddr:
// every register and the flags come back exactly. Neither the pad nor
// the arm64 backend's code executes a SIMD/FP instruction other than the
// save's stores, so q0-q31, fpsr and fpcr are never reloaded (a load of
// a q register would zero the bits above 128 of its SVE z register) and
// without CollectRegs not saved at all. (SVE state beyond the V
// registers is not saved; the kernel discards it at a system call, which
// expression code makes when it reads memory: process_vm_readv. A
// program keeping SVE values live across a fast tracepoint whose
// actions read memory would see them zeroed.)
//
// The pad then repeats the active check, checks stubalive & StubTIDMask
// (0: an exclusive-loop add to stubgone, Skip), and reads the time with
// mrs cntvct_el0: on arm64 RecTime and the compact records' time bits
// are the virtual counter, not a TSC (the stub converts with
// cntfrq_el0). The thread pointer is tpidr_el0 (always readable from
// EL0, no fault path): it goes to RecThread and picks the lane with the
// amd64 hash and probing, 0 meaning the shared lane. PadSpec.FSBase and
// TPLoad are ignored; XSaveSize must be 0; JumpPad.Faults is empty (the
// arm64 backend ignores FaultLoads).
//
// Atomics are exclusive loops (ldxr/stxr for counters: stubgone, hits,
// errors, dropped, LaneSpent; ldaxr/stlxr for the owner claim, the head
// and the stop word), so no LSE is needed. A signal handler that runs
// between the two clears the monitor and the loop retries, so a thread's
// own lane needs nothing weaker or stronger than the shared one; every
// lane's LaneSpent is added with the loop. Reservation reads tail with
// ldar before a plain load of head, computes as on amd64 (h >= tail, so
// the signed fullness test holds), then ldaxr head, compares it with h
// (a change: clrex and start over) and stlxr h+need, with no other
// memory access between the exclusives. The commit is a store-release:
// stlr of the 32-bit RecSize for a full record, of the whole word for a
// compact one, so the header, register block and blocks are visible
// before it (arm64 reorders plain stores). stopTracing sets CtlStop
// (ldaxr/stlxr from 0) and then clears CtlActive with stlr xzr. The
// budget check compares LaneBudget with the value the pad's own add
// produced; past it a plain str clears CtlActive.
//
// Cond and Collect code (Compile(e, "arm64", opts), contract below;
// fast tracepoints compile it with Options.ZeroUnreadable, which the
// arm64 backend implements, and FaultLoads, which it ignores) is
// copied after the pad body, 16-byte aligned (nop padding) and called
// with bl; x0 = the register block, x1 = a fresh zeroed ctx at sp (tsvs,
// ntsvs, pid from the control block, jumplimit PadJumpLimit; for a
// collection frame = the record's block area, framecap = CollectCap,
// frameused carried). The pad keeps its state in x19-x25 (control
// block, record, size/frameused, lane, tracepoint entry, register block,
// shared-lane flag), which the code preserves. Condition false, passcount,
// compact records, full lanes, fillers, RecError records, errors++ and
// StopError are exactly as on amd64. A record is
// PadRecordSizeARM64(CollectRegs, CollectCap) bytes (RecordSizeARM64);
// with RecRegs its register block is the 800-byte arm64 one, which a
// reader must know from the architecture (fasttp's ParseLane takes the
// size of the architecture it is built for).
//
// Position: the pad depends on its address only through its two B
// instructions to TailAddr (±128 MB from each; BuildJumpPadA64 and Place
// fail otherwise) and Skip, so JumpPad.Place moves it; it embeds the
// control block's and TPAddr's absolute values (movz/movk). Clone works;
// Retarget returns an error for arm64 pads (no fixup table yet).
//
// Stack use (JumpPad.StackBytes): 128 + PadRegBlockARM64 + CtxSize + 32
// + the deepest expression's Code.StackBytes.
//
// Tests (pad_arm64_test.go, under qemu-aarch64): a generated driver,
// called from Go with callJIT, loads x0-x27, x29, x30, nzcv, q0-q31,
// fpsr, fpcr and tpidr_el0 with distinct values (x28 keeps Go's g, which
// the runtime's signal handler reads; sp is a private stack whose bytes
// are all checked afterwards: nothing within 128 bytes below sp or
// below StackBytes is written) and branches to the pad, whose TailAddr is
// the driver's second half, which captures every register. They check
// exact preservation for pads of every shape and seven flag
// combinations, a record's header, each register block slot, the q
// registers, fpsr/fpcr and 'V' blocks, skips (active 0, no stub, false
// condition), passcounts, a full lane and the filler, condition and
// collection errors, compact records, owner-table probing, the budget,
// Place, and that every word of a pad decodes with branches inside it.
// TestPadA64Threads runs one pad from four threads at once (two owned
// lanes and the shared one, or all in the shared lane; lanes that fill
// up or not): hits counted exactly, records + dropped = hits, per-thread
// order in each lane, no torn record.
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
// svc #0) or the ctx hook, always: FaultLoads is ignored (no Faults), and
// Options.ZeroUnreadable is implemented on their counts as on amd64. Division needs only the zero check: sdiv does
// not trap on INT64_MIN / -1. The encoder (a64enc.go) is checked against
// golang.org/x/arch/arm64/arm64asm. The tests run under qemu-aarch64
// (GOARCH=arm64 go test -exec qemu-aarch64 ./jit/); qemu-user does not
// implement process_vm_readv, so there the tests install a generated
// reader hook (which copies from the test's data pages and, like the
// system call, returns a short count for a range that runs past their
// end) and the syscall path itself is untested on arm64.
//
// Other architectures: ForArch returns an error.
package jit
