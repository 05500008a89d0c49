// Package a64 executes one AArch64 instruction out of line: the arm64 half
// of a fast tracepoint's relocation (issue 12, part 3).
//
// An arm64 fast tracepoint replaces the one 4-byte instruction at its site
// by `b pad` (±128 MB). The pad collects, then runs the sequence Relocate
// returns for the displaced instruction, which ends by branching back to
// the site + 4, or wherever the instruction itself branches. PlanSite
// computes the patch and the tail for a site, its pad and tail addresses.
// The package is pure Go, has no state and builds for every GOARCH.
//
// # Decode
//
// Decode(word, pc) classifies a word by the A64 top-level encoding groups
// and, within them, the pc-relative classes:
//
//   - adr, adrp (Target: the value they write);
//   - ldr Wt/Xt and ldrsw literal, ldr St/Dt/Qt literal, prfm literal
//     (Target: the literal's address);
//   - b, bl, b.cond and bc.cond, cbz/cbnz (32/64), tbz/tbnz (Target: the
//     destination);
//   - blr Xn, which is not pc-relative but links its own address + 4;
//   - everything else is KindPlain: position-independent, copied as is
//     (data processing, other loads and stores, SIMD/FP, SVE, SME, system
//     instructions, br, ret, braa/brab/braaz/brabz, retaa/retab).
//
// Refused, with an error wrapping ErrRefused that says why:
//
//   - load/store exclusive register and pair (ldxr, ldaxr, stxr, stlxr,
//     ldxp, ldaxp, stxp, stlxp, all sizes): a store-exclusive fails
//     whenever the monitor was cleared since its load-exclusive, and the
//     jump to the pad and the pad's own stores may clear it, so an
//     ldxr...stxr loop could retry for ever. (Ordered loads and stores,
//     ldar/stlr, and the LSE atomics, cas/casp/ldadd..., are copied: they
//     need no monitor.) Note that this refuses the exclusives themselves
//     only; a site between an ldxr and its stxr is just as bad, and seeing
//     that needs the surrounding code: AtomicSequence (exclusive.go)
//     marks the words from a load-exclusive to its store-exclusive within
//     ExclusiveSpan words, and the installer refuses any tracepoint there
//     (a trap's exception clears the monitor too).
//   - memory copy and set (FEAT_MOPS cpyp/cpym/cpye, setp/setm/sete and
//     their variants): the three instructions of a sequence must run one
//     after the other, and after a MOPS exception (a thread moved to a CPU
//     whose implementation differs) the kernel resumes at the sequence's
//     first instruction, found at pc-4 or pc-8.
//   - svc: a thread may block in the system call inside the pad (which
//     then cannot be freed), and an interrupted system call's restart,
//     ptrace syscall stops and seccomp would see the pad's pc.
//   - brk, hlt: they must trap at their own address (gdb's breakpoints).
//   - hvc, smc, dcps1-3, tcancel, eret, eretaa/ab, drps: they trap at EL0 or
//     are privileged; the fault must carry the site's address.
//   - blraa, blrab, blraaz, blrabz: relocating them needs x30 set to the
//     site + 4 and an authenticated branch without link, whose BTYPE
//     (branch from a register other than x16/x17) a `bti c` or paciasp
//     landing pad of a BTI-guarded callee rejects.
//   - blr x30: the target and the link register are the same register.
//   - udf and the reserved and unallocated top-level groups, unallocated
//     encodings of the branch, exception and system group (including
//     ARMv9.6's compare-and-branch cb<cc>, which is pc-relative and which
//     this package does not relocate), and ldr literal with V=1, opc=11.
//
// Unallocated encodings inside the data-processing, load/store, SIMD/FP,
// SVE and SME groups are not looked for: they are copied and raise SIGILL
// in the pad instead of at the site (the stub has to report a fault in a
// pad at its site, as for any fault in relocated code). arm64asm cannot
// serve as the judge of what is allocated: it does not know SVE, SME, MTE,
// MOPS and some LSE forms (1,348 words of Debian 12's libc .text fail
// it, most of them SVE and MTE, besides zero padding), so refusing what it
// cannot decode would refuse valid code. The tests check that Decode
// agrees with arm64asm on every word arm64asm decodes.
//
// Insn.Landing marks bti and paciasp/pacibsp. They relocate exactly, but in
// a BTI-guarded page (PROT_BTI, a binary built with
// -mbranch-protection=bti) the `b pad` that replaces one is no landing
// pad, so an indirect call to the site would fault: the caller must not
// patch such a site there.
//
// # Relocate
//
// Relocate(in, to, resume) returns the words to place at address to.
// Guarantees: the sequence has the effect of in executed at in.PC on
// x0-x30, sp, nzcv, v0-v31 and memory (above sp), then continues at
// resume, or at in's own destination when in branches. It writes no
// register the original does not write and never changes the flags (only
// adr, adrp, add immediate, movz, movk, loads, the spill's str and
// branches are emitted).
// Sequences (ranges measured from the emitted instruction):
//
//   - plain: the word, then `b resume`.
//   - adr, adrp Xd (Xd not xzr, which needs nothing): the value built in Xd
//     itself: `adr` (±1 MB), else `adrp` (±4 GB) and, when the low 12
//     bits are not zero, `add Xd, Xd, #lo12`, else movz and up to three
//     movk. Then `b resume`.
//   - ldr/ldrsw literal into a GPR: the same literal instruction when the
//     literal is within ±1 MB of to; else the literal's address built in
//     Xt as above (adrp's low 12 bits folded into the load's offset when
//     they are a multiple of the size) and `ldr Wt/Xt, ldrsw Xt, [Xt, #off]`.
//     A fault on the literal (not mapped) then leaves Xt holding the
//     address, where the original leaves Xt unchanged.
//   - ldr literal into St/Dt/Qt, or into the zero register (the load
//     still accesses memory): the same literal instruction when in reach;
//     else x16 is spilled: `str x16, [sp, #-16]!`, the address into x16,
//     the load, `ldr x16, [sp], #16`. arm64 Linux has no red zone, so the
//     16 bytes below sp are free, and sp stays 16-byte aligned (sp
//     alignment checking is on); a signal arriving in between lands below
//     the slot. This needs sp to be a valid 16-byte-aligned stack pointer
//     at the site, which compiled code always keeps.
//   - prfm literal: the same instruction when in reach, else nothing (a
//     prefetch has no architectural effect and never faults).
//   - b: `b target`. bl: x30 = in.PC+4 built as above, then `b target`.
//   - b.cond (bc.cond), cbz/cbnz, tbz/tbnz: the same instruction when the
//     target is in its reach (±1 MB; tbz ±32 KB), else the inverted
//     instruction skipping over `b target`; then `b resume`. b.al and b.nv
//     (both always taken) become `b target`.
//   - blr Xn: x30 = in.PC+4, then `ret Xn`. ret rather than br because a
//     br from a register other than x16/x17 has a BTYPE that a BTI-guarded
//     callee's `bti c` rejects, while ret is not checked.
//
// Scratch registers: none, but for the SIMD/FP literal spill above (x16
// restored) and Options.Veneer (RelocateWith): a b or bl whose target is
// beyond ±128 MB of to may then branch through x16 (movz/movk x16, br
// x16; x30 for bl built first), clobbering x16 as the linker's veneer for
// that call would; AAPCS64 makes x16/x17 (IP0/IP1) free at calls and tail
// calls between functions, but code may keep values in them across a
// branch inside a function, so it is an option. Without it, and always for
// conditional branches and the branch back, a destination beyond ±128 MB
// is an error wrapping ErrOutOfRange. A pad is within ±128 MB of its site
// (the site's `b pad` needs it), so resume is in reach of code in the pad
// unless the pad lies within a few words of that limit.
//
// Limitation: the relocated bl and blr do not push onto a guarded control
// stack (FEAT_GCS), and blr's `ret Xn` would be checked against it, so
// processes with GCS enabled cannot have their calls relocated (none on
// Debian 12).
//
// # Site plan
//
// PlanSite(site, word, pad, tail) (PlanSiteWith for Options and a
// BTI-guarded page) computes everything an installer writes for one
// arm64 fast tracepoint, without touching memory: Patch, the `b pad`
// that replaces word at site (one 4-byte store: a thread is never
// between two halves), and Tail, the words for the pad's TailAddr: the
// instruction relocated there (Relocate with resume site+4), which ends
// with `b site+4` when it may fall through (SitePlan.Resumes). b, bl,
// blr and b.al/b.nv end with their own branch, and br, ret and their
// pointer-authenticating forms (Kind plain) are copied alone, with no
// unreachable branch back (and no range constraint on site+4). The
// order of writes is pad, tail, cache maintenance, then Patch.
//
// Errors: ErrSite for the addresses (not 4-byte aligned, not below
// MaxUserAddr = 2^52, the pad at the site itself or outside PadWindow,
// a tail that would overwrite the site); ErrRefused for what Decode
// refuses (exclusives, brk, udf, svc...; see above), and, with
// SiteOptions.Guarded, for bti/paciasp/pacibsp; ErrOutOfRange when the
// relocated instruction cannot reach its target or site+4 from the
// tail. Every message names the site and says why.
//
// PadWindow(site) is [site-128 MB, site+128 MB) clipped to
// [0, MaxUserAddr): the pad addresses the site's b reaches, for the
// installer's arenas (an arena serving several sites lies in the
// intersection of their windows). The tail must moreover be within
// ±128 MB of the pad (the pad's own b, checked by jit's JumpPad.Place)
// and of site+4, and relocated branches reach ±128 MB (conditional
// ones ±1 MB for their short form) from it: tails next to their pads,
// and pads close to their sites, keep every form short.
//
// What PlanSite cannot see, the installer must: a site between an ldxr
// and its stxr (AtomicSequence, given the words around it), a landing pad in a guarded page when it does not pass
// Guarded, and threads whose pc is inside a pad or tail when the
// tracepoint is removed. (A thread stopped at the site needs nothing:
// the word is replaced by one store, and it then takes the pad.)
//
// # Tests
//
//   - decode_test.go: a table of every kind and of every refused class
//     (the error must say why); reloc_test.go: the sequence of every kind
//     and form, disassembled by arm64asm with absolute targets, the exact
//     reach of every short form, and FuzzDecodeRelocate (any word is
//     refused or relocates into at most MaxWords accepted words).
//   - property_test.go: Decode against arm64asm (kinds, targets, refused
//     operations, and no refusal of anything else arm64asm decodes) over
//     2,000,000 random words (200,000 under emulation) biased towards
//     the branch and load/store classes, and over real code: the distinct
//     .text words of Debian 12 arm64's libc, libm, ls and sort
//     (testdata/debian12-arm64-words.gz, taken from the VM image), the
//     test binary itself when it is arm64, the system's arm64 libc when
//     there is one, and the ELF files named in A64_ELF (colon-separated).
//   - exec_arm64_test.go (arm64 only): a harness generated as machine code
//     loads x0-x30 (but x28, Go's g), sp, nzcv and v0-v31 from a state
//     block, branches to the code under test on a private stack and,
//     wherever that code lands (an exit stub at every reachable address),
//     stores them back. Every kind runs 100 times (10 with -short) with
//     random operands and registers in place and relocated: 32 KB and
//     256 KB from the site, and 40 MB and 8 GB away (above or below, where
//     the address space has room), and the landing stub, x0-x30, sp, nzcv,
//     v0-v31 and the stack must be the same; at 8 GB b and bl run with
//     Options.Veneer (x16 excepted) and the conditional branches must be
//     refused with ErrOutOfRange.
//   - site_test.go: PlanSite's table (every kind of site, every refusal
//     and address error, the window's edges) and FuzzPlanSite (no panic;
//     an accepted plan's patch decodes to a b landing at the pad and its
//     tail decodes and ends with b site+4 exactly when it resumes).
//   - site_exec_arm64_test.go (arm64 only): a small function (add, adrp,
//     ldr literal, cmp, b.cond, cbz, bl, b, and a callee's add, eor,
//     ret) runs through the harness plain, stopped at a site, and with a
//     fast tracepoint installed at every one of its 15 instructions from
//     PlanSite and a jit.BuildJumpPadA64 pad (CollectRegs, a control
//     block and lanes mirroring jit's tests) 4 KB, 1 MB and 40 MB from
//     the site, for three register files (b.hi and cbz taken and not):
//     the exit stub, x0-x30, sp, nzcv, v0-v31 and the stack above sp
//     must match the plain run, and a site on the path must have
//     committed exactly one record with x0-x30, sp, pc, cpsr and q0-q31
//     as at the site (none otherwise). With tracing off (CtlActive 0,
//     the pad's fast exit) the runs match and nothing is recorded. A
//     plan whose branch back is broken (site+8) must fail the
//     comparison.
//   - bti_arm64_test.go (arm64 only): blr relocated to `ret xN` into a
//     BTI-guarded page (PROT_BTI) whose target is `bti c` or paciasp; a
//     child process first checks that a br x5 there dies with SIGILL
//     (skipped where BTI is not enforced). qemu-aarch64 (its default cpu)
//     and the VM enforce it.
//
// Commands:
//
//	go test ./fasttp/a64/                     # host: everything but the _arm64 tests
//	GOARCH=arm64 go test -exec qemu-aarch64 ./fasttp/a64/ -run 'PlanSite|PadWindow'
//	GOARCH=arm64 go test -c -o /tmp/a64.test ./fasttp/a64/ && (cd fasttp/a64 && qemu-aarch64 /tmp/a64.test)
//	ARM64_VM_E2E_FLAGS="-test.v" E2E_PACKAGES="./fasttp/a64/" scripts/arm64-vm.sh e2e
package a64
