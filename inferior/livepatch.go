package inferior

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"gotpstub/prio"
)

// Patching code while threads run (gdb's non-stop mode), the way the
// kernel's text_poke_bp does:
//
//  1. an int3 over the first byte of each patch;
//  2. every CPU running the process serialised (membarrier's
//     private-expedited SYNC_CORE command, run by one thread of the
//     process: a system call injected into it), so none executes a
//     stale copy of the old bytes; threads whose pc lies inside the
//     covered bytes are then moved, one at a time, by the functions
//     given to RelocatePCsLive;
//  3. the patches' other bytes, and the CPUs serialised again;
//  4. the first bytes.
//
// A thread that meets one of those int3s meanwhile goes where the patch
// (or, taking one out, the code it replaces) jumps: a thread trapping at
// the int3 of a jump being put in continues at the jump's target, as if
// it had executed it. Where neither the old nor the new bytes start with
// a jump, the thread waits, stopped, until the bytes are complete. An
// int3 met after it was taken out (a CPU that still saw it) sends the
// thread back to run what is there now.
//
// The patches of one Exclusive call go through the steps together, so a
// tstart placing a thousand jumps synchronises twice. No thread is
// stopped for longer than one injected system call (the thread that runs
// membarrier), one pc check (the threads checked for the covered bytes)
// or the stub's turn at an int3 it met; LiveStats says how long the
// longest such stop took. To keep those short on busy CPUs, the ptrace
// thread runs real-time (prio.Realtime) during a flush and a look at the
// running threads' pcs and waits for stops with short sleeps of its own
// (napForStatus), not behind Go's scheduler; a thread sent a SIGSTOP is
// real-time until it has stopped (raiseToStop).

// membarrier commands (linux/membarrier.h).
const (
	membarrierCmdQuery                            = 0
	membarrierCmdPrivateExpeditedSyncCore         = 1 << 5
	membarrierCmdRegisterPrivateExpeditedSyncCore = 1 << 6
)

// liveState is the bookkeeping of code changed while threads run, owned
// by the ptrace goroutine.
type liveState struct {
	queue  []livePatch                               // patches waiting for flushLive
	relocs []func(tid int, pc uint64) (uint64, bool) // RelocatePCsLive's, for the next flush
	// traps are the int3s of a flush in progress: where a thread meeting
	// one goes (0: it waits for the flush's end, parked).
	traps  map[uint64]uint64
	stale  map[uint64]bool // addresses whose int3 a flush took out again
	parked []*thread
	// stash holds the statuses of other threads collected during a flush:
	// they are handled afterwards (a trap hook run then could need locks
	// the caller of the flush holds).
	stash []stashedStatus
	// ready holds the statuses pollLiveAny collected that are not stops
	// at the flush's int3s: each waits there for a wait of pollLiveAny's
	// that wants it, or for handleStashed.
	ready    []stashedStatus
	flushing bool
	// lastPoll is when pollLive last found no status: a thread whose
	// stop it finds later stopped after then (its stop's upper bound).
	lastPoll time.Time
	// flushStart is when the flush in progress began.
	flushStart time.Time
	// registered: the process registered for SYNC_CORE membarriers;
	// gadget is the address of a syscall instruction (0: not found yet).
	registered bool
	gadget     uint64
	enabled    bool // SetLivePatching
	// exactHolds: SetExactHolds (a schedstat read per thread sent on).
	exactHolds bool
	// held are the int3s asked for at the start of a patch while
	// threads run, which go in when it comes out (insertSoftware);
	// arming those whose patch is coming out: in memory once the flush
	// writes the first bytes.
	held   map[*swBreakpoint]bool
	arming []*swBreakpoint
	execs  int // execs seen (forgetLive)

	stats LiveStats
}

// livePatch is one code change made while threads run.
type livePatch struct {
	addr     uint64
	old, new []byte
}

// stashedStatus is a wait status kept for later.
type stashedStatus struct {
	tid int
	ws  unix.WaitStatus
}

// LiveStats counts what patching with threads running did.
type LiveStats struct {
	Flushes    int // flushes made with threads running
	Patches    int // patches written by them
	Redirected int // threads sent on from one of the flushes' int3s
	Parked     int // threads held until a flush ended
	Checked    int // threads stopped to check their pc
	Moved      int // threads moved (RelocatePCs, RelocatePCsLive)
	// Rewound counts threads held at one of a flush's int3s (to run a
	// system call) that were sent back to it afterwards, the flush no
	// longer sending them on (letGo).
	Rewound int
	// LongestHold is the longest stop of a thread for patching live: a
	// thread stopped to run a system call or have its pc checked, from
	// its stop to its resumption; a thread sent on from an int3, from
	// the last poll that did not find it stopped (an upper bound); a
	// parked one, from the flush's start.
	LongestHold time.Duration
	// LongestPause is the longest such stop less the time the thread
	// spent runnable, waiting for a CPU (/proc/PID/task/TID/schedstat):
	// a thread stopped to run a system call is runnable while it waits
	// to be scheduled for it, as it would be unstopped. For a thread
	// sent on from an int3 again it is exact with SetExactHolds: the time
	// from its stop to the stub sending it on, its running and waiting
	// for a CPU since it was sent on before taken off (int3Hold).
	LongestPause time.Duration
	// LongestWhy says what LongestHold's thread was stopped for.
	LongestWhy string
}

var (
	syncCoreOnce sync.Once
	syncCoreOK   bool
)

// kernelSyncCore reports whether the kernel offers private-expedited
// SYNC_CORE membarriers (Linux 4.16 and later on x86-64).
func kernelSyncCore() bool {
	syncCoreOnce.Do(func() {
		r, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdQuery, 0, 0)
		want := uintptr(membarrierCmdPrivateExpeditedSyncCore | membarrierCmdRegisterPrivateExpeditedSyncCore)
		syncCoreOK = errno == 0 && r&want == want
	})
	return syncCoreOK
}

// CanPatchLive reports whether code patches (InsertPatch, RemovePatch)
// are made while threads run, without stopping the others: live
// patching is on (SetLivePatching), the kernel has SYNC_CORE
// membarriers and the process has a syscall instruction to run them
// with. Otherwise the caller must stop every thread (Pause) around such
// changes.
func (p *Process) CanPatchLive() bool {
	ok := false
	_ = p.do(func() error {
		ok = p.liveCapable()
		return nil
	})
	return ok
}

// SetLivePatching switches the live protocol on or off (off by
// default): off, code patched while threads run is written tail first,
// first byte last, and the caller is to stop every thread (Pause).
// Switched on while no thread runs, it has the process register for
// SYNC_CORE membarriers then (registerSyncCore says why).
func (p *Process) SetLivePatching(on bool) {
	_ = p.do(func() error {
		p.live.enabled = on
		if on && !p.anyRunning() && p.liveCapable() {
			// Failures only leave it to the first syncCores.
			if t, err := p.anyStoppedThread(); err == nil {
				_ = p.registerSyncCore(t)
			}
		}
		return nil
	})
}

// registerSyncCore registers the process for SYNC_CORE membarriers, with
// stopped thread t making the call, when it has not registered yet. For
// a process with more than one thread the kernel waits for an RCU grace
// period there (synchronize_rcu): 15-23 ms on this project's VM, which a
// first live patch made with every thread running spent holding one of
// them (the first tstart of e2e TestNonStopTraceWhileRunning, all
// running: its longest thread stop). SetLivePatching registers at once
// when nothing runs: the server calls it while the process is stopped
// after its launch (one thread: no grace period) or its attach.
func (p *Process) registerSyncCore(t *thread) error {
	if p.live.registered {
		return nil
	}
	if err := p.membarrier(t, membarrierCmdRegisterPrivateExpeditedSyncCore); err != nil {
		return fmt.Errorf("registering for SYNC_CORE membarriers: %w", err)
	}
	p.live.registered = true
	return nil
}

func (p *Process) liveCapable() bool {
	if !p.live.enabled || !kernelSyncCore() || p.exitEvent != nil {
		return false
	}
	if p.live.gadget == 0 {
		p.live.gadget = findSyscallGadget(p.pid, p.readNow)
	}
	return p.live.gadget != 0
}

// LiveStats returns the counts of code patched while threads ran.
func (p *Process) LiveStats() LiveStats {
	var s LiveStats
	_ = p.do(func() error {
		s = p.live.stats
		return nil
	})
	return s
}

// SetExactHolds makes LiveStats' LongestPause exact for threads sent on
// from a flush's int3 (int3Hold) at the cost of a read of the thread's
// schedstat (5 µs here) each time one is sent on, which every thread
// behind it in the batch waits for too; off, their stops are bounded
// from above only.
func (p *Process) SetExactHolds(on bool) {
	_ = p.do(func() error { p.live.exactHolds = on; return nil })
}

// ResetLongestHold starts LiveStats.LongestHold and LongestPause again
// from zero.
func (p *Process) ResetLongestHold() {
	_ = p.do(func() error {
		p.live.stats.LongestHold, p.live.stats.LongestPause, p.live.stats.LongestWhy = 0, 0, ""
		return nil
	})
}

// findSyscallGadget returns the address of a system call instruction
// (syscallInsn) in the vDSO, or failing that in another executable
// mapping: an injected
// system call runs there while other threads run, instead of at the
// thread's pc, where they could meet it. 0 when there is none.
func findSyscallGadget(pid int, read func(uint64, []byte) (int, error)) uint64 {
	maps, err := readMaps(pid)
	if err != nil {
		return 0
	}
	var vdso, other []mapping
	for _, m := range maps {
		switch {
		case !m.exec || m.name == "[vsyscall]":
		case m.name == "[vdso]":
			vdso = append(vdso, m)
		default:
			other = append(other, m)
		}
	}
	for _, m := range append(vdso, other...) {
		buf := make([]byte, min(m.end-m.start, 1<<20))
		n, _ := read(m.start, buf)
		if i := indexInsn(buf[:n], syscallInsn); i >= 0 {
			return m.start + uint64(i)
		}
	}
	return 0
}

// indexInsn returns the offset of the first instruction-aligned
// occurrence of insn in code, or -1.
func indexInsn(code, insn []byte) int {
	for off := 0; off < len(code); {
		i := bytes.Index(code[off:], insn)
		if i < 0 {
			return -1
		}
		if (off+i)%insnAlign == 0 {
			return off + i
		}
		off += i + 1
	}
	return -1
}

// patchingLive reports whether a code patch made now goes through the
// live protocol: some thread runs and the protocol is available.
func (p *Process) patchingLive() bool {
	return !p.live.flushing && p.anyRunning() && p.liveCapable()
}

// queueLive queues a patch of addr from old to new bytes for flushLive.
// A patch of the same bytes queued earlier (put in and taken out again
// before the flush) is merged with it.
func (p *Process) queueLive(addr uint64, old, new []byte) {
	for i, lp := range p.live.queue {
		if lp.addr != addr || len(lp.new) != len(new) {
			continue
		}
		p.live.queue = append(p.live.queue[:i], p.live.queue[i+1:]...)
		if !bytes.Equal(lp.old, new) {
			p.queueLive(addr, lp.old, new)
		}
		return
	}
	p.live.queue = append(p.live.queue, livePatch{addr, append([]byte(nil), old...), append([]byte(nil), new...)})
}

// overlayLive applies the queued patches to buf, read from addr.
func (p *Process) overlayLive(addr uint64, buf []byte) {
	for _, lp := range p.live.queue {
		applyWrite(addr, buf, memWrite{lp.addr, lp.new})
	}
}

// RelocatePCsLive is RelocatePCs for a caller whose patches are queued
// while threads run: the stopped threads are offered to f now, the
// running ones during the next flush of live patches, once no thread can
// enter the patched bytes any more (each stopped a moment for that).
func (p *Process) RelocatePCsLive(f func(tid int, pc uint64) (uint64, bool)) error {
	return p.do(func() error {
		if p.exitEvent != nil {
			return ErrExited
		}
		if err := p.relocateStopped(f); err != nil {
			return err
		}
		if !p.anyRunning() {
			return nil
		}
		if !p.liveCapable() {
			return fmt.Errorf("relocating pcs: %w", ErrRunning)
		}
		p.live.relocs = append(p.live.relocs, f)
		if p.writeBatch == 0 && len(p.live.queue) > 0 {
			return p.flushLive()
		}
		return nil
	})
}

// ThreadsRunning reports whether some thread of the process may be
// executing.
func (p *Process) ThreadsRunning() bool {
	running := false
	_ = p.do(func() error {
		running = p.anyRunning()
		return nil
	})
	return running
}

// StoppedPCs returns the pcs of the threads that are stopped.
func (p *Process) StoppedPCs() []uint64 {
	var pcs []uint64
	_ = p.do(func() error {
		for _, tid := range p.sortedTids() {
			if t := p.threads[tid]; t.stopped && !t.zombie {
				if pc, err := getPC(tid); err == nil {
					pcs = append(pcs, pc)
				}
			}
		}
		return nil
	})
	return pcs
}

// AllThreadPointers returns the thread pointers (fs base, tpidr_el0;
// 0s left out) of the stopped threads and, patching live, of the running
// ones too, stopped together and each resumed as soon as its pointer is
// read (as AllPCs). Without live patching the running threads are left
// out.
func (p *Process) AllThreadPointers() ([]uint64, error) {
	var tps []uint64
	err := p.readThreads("", func(tid int, _ uint64) {
		if tp, err := threadPointer(tid); err == nil && tp != 0 {
			tps = append(tps, tp)
		}
	})
	return tps, err
}

// AllPCs returns every thread's pc, the running ones stopped together
// and each resumed as soon as its pc is read (patching live only).
func (p *Process) AllPCs() ([]uint64, error) {
	var pcs []uint64
	err := p.readThreads("reading pcs", func(_ int, pc uint64) {
		pcs = append(pcs, pc)
	})
	return pcs, err
}

// readThreads is AllThreadPointers's and AllPCs's walk of the threads,
// on the ptrace goroutine: it offers read the id and pc of each thread,
// moving none. While some thread runs and live patching is available,
// every thread is offered (relocateAll: the running ones stopped
// together, each resumed as soon as read returns); otherwise only the
// stopped ones (relocateStopped) — unless what names the reading, for
// which a running thread is then an error (ErrRunning; nothing read).
// ErrExited once the process has exited.
func (p *Process) readThreads(what string, read func(tid int, pc uint64)) error {
	return p.do(func() error {
		if p.exitEvent != nil {
			return ErrExited
		}
		f := func(tid int, pc uint64) (uint64, bool) {
			read(tid, pc)
			return 0, false
		}
		switch running := p.anyRunning(); {
		case running && p.liveCapable():
			return p.relocateAll(f)
		case running && what != "":
			return fmt.Errorf("%s: %w", what, ErrRunning)
		}
		return p.relocateStopped(f)
	})
}

// relocateStopped moves the stopped threads f maps.
func (p *Process) relocateStopped(f func(tid int, pc uint64) (uint64, bool)) error {
	for _, tid := range p.sortedTids() {
		t := p.threads[tid]
		if t.zombie || !t.stopped {
			continue
		}
		if err := p.relocateThread(t, f); err != nil {
			return err
		}
	}
	return nil
}

// relocateThread offers stopped thread t's pc to f and moves it.
func (p *Process) relocateThread(t *thread, f func(tid int, pc uint64) (uint64, bool)) error {
	pc, err := getPC(t.tid)
	if err != nil {
		return fmt.Errorf("relocating pcs: thread %d: %w", t.tid, err)
	}
	newPC, ok := f(t.tid, pc)
	if !ok || newPC == pc {
		return nil
	}
	if err := setPC(t.tid, newPC); err != nil {
		return fmt.Errorf("relocating pcs: thread %d to %#x: %w", t.tid, newPC, err)
	}
	t.stopPC, t.hookedAt, t.hookDoneAt = 0, 0, 0
	p.live.stats.Moved++
	return nil
}

// flushLive writes the queued patches with the protocol above.
func (p *Process) flushLive() error {
	if p.live.flushing || len(p.live.queue) == 0 {
		return nil
	}
	q, relocs := p.live.queue, p.live.relocs
	p.live.queue, p.live.relocs = nil, nil
	if !p.anyRunning() {
		// Every thread stopped meanwhile: plain writes.
		var first error
		for _, lp := range q {
			first = firstErr(first, p.writeNow(lp.addr, lp.new))
		}
		for _, bp := range p.live.arming {
			bp.inserted = true
		}
		p.live.arming = nil
		for _, f := range relocs {
			first = firstErr(first, p.relocateStopped(f))
		}
		return first
	}
	p.live.flushing = true
	defer func() { p.live.flushing = false }()
	defer prio.Realtime(p.tracerTid)()
	p.live.flushStart, p.live.lastPoll = time.Now(), time.Now()
	p.live.stats.Flushes++
	p.live.stats.Patches += len(q)
	p.live.makeMaps()
	first := error(nil)
	// An exec during the flush (by a thread stepped for membarrier)
	// replaced the memory: nothing more may be written there.
	gen := p.live.execs
	write := func(addr uint64, b []byte) error {
		if p.live.execs != gen {
			return ErrExited
		}
		return p.writeNow(addr, b)
	}
	for _, lp := range q {
		if bytes.HasPrefix(lp.old, breakpointInsn[:]) {
			continue // an int3 of gdb's or ours is there already
		}
		p.live.traps[lp.addr] = liveTarget(lp)
		first = firstErr(first, write(lp.addr, breakpointInsn[:]))
	}
	first = firstErr(first, p.syncCores())
	for _, f := range relocs {
		first = firstErr(first, p.relocateAll(f))
	}
	for _, lp := range q {
		if len(lp.new) > 1 && !bytes.Equal(lp.old[1:], lp.new[1:]) {
			first = firstErr(first, write(lp.addr+1, lp.new[1:]))
		}
	}
	first = firstErr(first, p.syncCores())
	removing := false
	for _, lp := range q {
		first = firstErr(first, write(lp.addr, lp.new[:1]))
		if _, ok := p.live.traps[lp.addr]; ok {
			delete(p.live.traps, lp.addr)
			p.markStale(lp.addr)
		}
		_, wasJump := jumpTarget(lp.addr, lp.old)
		removing = removing || wasJump
	}
	for _, bp := range p.live.arming {
		bp.inserted = true
	}
	p.live.arming = nil
	if removing {
		// No CPU may run a jump taken out any more: the caller is to
		// reuse its target once no thread is inside (AllPCs).
		first = firstErr(first, p.syncCores())
	}
	p.pollLive(0)
	p.releaseParked()
	return first
}

// firstErr keeps the first error.
func firstErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// liveTarget is where a thread meeting lp's temporary int3 goes: the
// target of the jump lp puts in, else of the jump it takes out, else 0.
func liveTarget(lp livePatch) uint64 {
	if to, ok := jumpTarget(lp.addr, lp.new); ok {
		return to
	}
	if to, ok := jumpTarget(lp.addr, lp.old); ok {
		return to
	}
	return 0
}

// jumpTarget decodes a jmp rel32 or rel8 at addr (after segment-override
// prefixes, which patches use as padding) and returns its target.
func jumpTarget(addr uint64, code []byte) (uint64, bool) {
	i := 0
	for i < len(code) && i < 4 && isSegmentPrefix(code[i]) {
		i++
	}
	switch {
	case i+5 <= len(code) && code[i] == 0xe9:
		rel := int32(uint32(code[i+1]) | uint32(code[i+2])<<8 | uint32(code[i+3])<<16 | uint32(code[i+4])<<24)
		return addr + uint64(i+5) + uint64(int64(rel)), true
	case i+2 <= len(code) && code[i] == 0xeb:
		return addr + uint64(i+2) + uint64(int64(int8(code[i+1]))), true
	}
	return 0, false
}

func isSegmentPrefix(b byte) bool {
	switch b {
	case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65:
		return true
	}
	return false
}

// liveTrap handles t, stopped by an int3 at pc-1 that a flush put there
// (or took out): it sends the thread on and reports true, or false when
// the int3 is not one of those.
func (p *Process) liveTrap(t *thread, pc uint64) bool {
	at := pc - breakpointPCAdjust
	target, during := p.live.traps[at]
	if !during && !p.live.stale[at] {
		return false
	}
	if bp := p.swbps[at]; bp != nil && bp.inserted {
		return false
	}
	// A flush's int3 is in memory until the flush takes it out
	// (traps); one taken out may be back as another int3 since.
	b := breakpointInsn
	if !during {
		if _, err := p.readNow(at, b[:]); err != nil {
			return false
		}
	}
	to := at // a stale copy of the code: run what is there now
	switch {
	case b != breakpointInsn:
	case during && target != 0 && !t.step:
		to = target
	case during:
		// Wait for the bytes to be complete, back on the patch.
		if err := setPC(t.tid, at); err != nil {
			return false
		}
		p.live.parked = append(p.live.parked, t)
		p.live.stats.Parked++
		return true
	default:
		return false // an int3 that is really there
	}
	if err := setPC(t.tid, to); err != nil {
		return false
	}
	p.live.stats.Redirected++
	t.sentOnClock = -1
	if p.live.exactHolds {
		t.sentOnClock = p.schedClock(t.tid) // read stopped: it stands still
	}
	_ = p.rawResume(t, t.step, queuedSignal{})
	t.sentOn = time.Now()
	return true
}

// markStale notes that an int3 at addr was taken out: a thread whose
// stop there is collected later (it hit the int3 just before, or its CPU
// still saw it) runs the instruction now there instead of reporting a
// SIGTRAP nobody planted (liveTrap).
func (p *Process) markStale(addr uint64) {
	p.live.makeMaps()
	p.live.stale[addr] = true
}

// makeMaps makes the maps of traps and stale addresses, once.
func (l *liveState) makeMaps() {
	if l.traps == nil {
		l.traps, l.stale = map[uint64]uint64{}, map[uint64]bool{}
	}
}

// releaseParked lets the threads parked during a flush run on.
func (p *Process) releaseParked() {
	parked := p.live.parked
	p.live.parked = nil
	for _, t := range parked {
		p.noteHold("parked until a flush's end", time.Since(p.live.flushStart))
		if p.threads[t.tid] == t && t.stopped && !t.zombie && !p.hasPending(t.tid) {
			_ = p.rawResume(t, t.step, queuedSignal{})
		}
	}
}

// pollLive collects the statuses available during a flush: a thread
// stopped by one of the flush's int3s is sent on, the others are
// stashed; the status of thread want, if it comes, is returned.
func (p *Process) pollLive(want int) (unix.WaitStatus, bool) {
	_, ws, ok := p.pollLiveAny(map[int]bool{want: true})
	return ws, ok
}

// livePollPasses bounds the passes of one pollLiveAny call that find
// threads at the flush's int3s and none of the statuses it waits for.
const livePollPasses = 4

// pollLiveAny is pollLive for any of the threads in want. Each pass
// collects every status there is before it sends any thread on: wait4(-1)
// reports stopped tracees in the same order every time, so serving one
// at a time let the first few threads of a hot loop through a patched
// site, back at its int3 microseconds after being sent on, be collected
// again and again ahead of the last one (held 2 ms while the others went
// round). The other statuses collected wait in ready (collectLive).
func (p *Process) pollLiveAny(want map[int]bool) (int, unix.WaitStatus, bool) {
	if tid, ws, ok := p.takeReady(want); ok {
		return tid, ws, true
	}
	for range livePollPasses {
		traps := p.collectLive(want)
		p.serveLive(traps)
		if tid, ws, ok := p.takeReady(want); ok {
			return tid, ws, true
		}
		if len(traps) == 0 {
			if p.live.flushing {
				p.live.lastPoll = time.Now()
			}
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// liveTrapHit is a thread's stop at one of the flush's int3s, collected.
type liveTrapHit struct {
	tid int
	ws  unix.WaitStatus
	pc  uint64
}

// collectLive collects every status there is: stops at the flush's int3s
// of threads not in want are returned, the others go to ready, where
// this wait or one around it (relocateAll's, around a single-step's)
// finds those it waits for; handleStashed takes the rest once the flush
// is over.
func (p *Process) collectLive(want map[int]bool) []liveTrapHit {
	var traps []liveTrapHit
	for {
		wpid, ws, err := wait4(-1, unix.WNOHANG)
		if err != nil || wpid <= 0 {
			return traps
		}
		if _, wanted := want[wpid]; !wanted {
			if p.lateOwnStop(wpid, ws) {
				p.handleStatus(wpid, ws) // swallowed, the thread resumed
				continue
			}
			if pc, ok := p.liveTrapStop(wpid, ws); ok {
				traps = append(traps, liveTrapHit{wpid, ws, pc})
				continue
			}
		}
		p.live.ready = append(p.live.ready, stashedStatus{wpid, ws})
	}
}

// lateOwnStop reports whether ws is tid's stop at a SIGSTOP of the
// stub's own that no wait in progress wants (collectLive's callers name
// the threads they wait for): a thread sent a SIGSTOP to be held or have
// its pc read met one of the flush's int3s first and was sent on from
// there, its SIGSTOP still pending, so it stopped again at once. Kept in
// ready, that stop lasted until the flush or the fast tracepoints' Batch
// ended: 2-8 ms in the kernel's scheduler trace (e2e's
// TestNonStopTraceWhileRunning). handleStatus swallows it at once and
// resumes the thread, as it would after the flush. A stop that is also
// an interrupt's or a stop request's, or a new thread's first, is left
// for later.
func (p *Process) lateOwnStop(tid int, ws unix.WaitStatus) bool {
	t := p.threads[tid]
	if t == nil || !ws.Stopped() || ws.StopSignal() != unix.SIGSTOP {
		return false
	}
	return t.sigstopExpected && !t.stopRequested && !t.fresh && !p.interruptPending(t)
}

// serveLive sends on the threads collectLive found at the flush's int3s.
func (p *Process) serveLive(traps []liveTrapHit) {
	for _, h := range traps {
		wall, pause := p.int3Hold(h.tid)
		p.handleLiveTrapStop(p.threads[h.tid], h.ws, h.pc)
		if p.live.flushing {
			p.live.stats.noteHold("sent on from an int3", wall, pause)
		}
	}
}

// takeReady takes a status of one of the threads in want out of ready.
func (p *Process) takeReady(want map[int]bool) (int, unix.WaitStatus, bool) {
	i := slices.IndexFunc(p.live.ready, func(s stashedStatus) bool {
		_, ok := want[s.tid] // a key, whatever its value (relocateAll's says whose stop)
		return ok
	})
	if i < 0 {
		return 0, 0, false
	}
	s := p.live.ready[i]
	p.live.ready = slices.Delete(p.live.ready, i, i+1)
	return s.tid, s.ws, true
}

// int3Hold bounds how long thread tid, whose stop at one of the flush's
// int3s is being collected, has been stopped: it stopped after the last
// look that found no stop and after it was last sent on (wall). When it
// was sent on since that look, pause takes off the time it ran and
// waited for a CPU since (its schedstat clocks stand still while it is
// stopped), which is then exact: with threads in a hot loop through a
// patched site every look finds one at an int3, and wall counted the
// thread's whole way round the loop.
func (p *Process) int3Hold(tid int) (wall, pause time.Duration) {
	since := p.live.lastPoll
	t := p.threads[tid]
	if t == nil || !t.sentOn.After(since) {
		wall = time.Since(since)
		return wall, wall
	}
	wall = time.Since(t.sentOn)
	pause = wall
	if t.sentOnClock < 0 {
		return wall, wall
	}
	if now := p.schedClock(tid); now >= t.sentOnClock {
		pause = max(0, wall-(now-t.sentOnClock))
	}
	return wall, pause
}

// isLiveTrapStatus reports whether ws is tid's stop at one of the
// flush's int3s.
func (p *Process) isLiveTrapStatus(tid int, ws unix.WaitStatus) bool {
	_, ok := p.liveTrapStop(tid, ws)
	return ok
}

// liveTrapStop is isLiveTrapStatus, also returning the thread's pc.
func (p *Process) liveTrapStop(tid int, ws unix.WaitStatus) (uint64, bool) {
	if p.threads[tid] == nil || !stoppedAtTrap(ws) {
		return 0, false
	}
	pc, err := getPC(tid)
	if err != nil {
		return 0, false
	}
	at := pc - breakpointPCAdjust
	if bp := p.swbps[at]; bp != nil && bp.inserted {
		return 0, false
	}
	_, during := p.live.traps[at]
	return pc, during || p.live.stale[at]
}

// handleLiveTrapStop handles t's stop ws at pc, one of the flush's int3s
// (liveTrapStop), as handleStatus would, with the system calls a hot
// loop through a patched site makes the stub repeat for every pass cut
// down: the pc already read, an int3 the flush wrote not read back. A
// stepping thread, or a SIGTRAP that is no int3's, goes the general way.
func (p *Process) handleLiveTrapStop(t *thread, ws unix.WaitStatus, pc uint64) {
	t.stopped = true
	p.noteStopKind(t, false)
	if !t.step {
		if si, err := getSiginfo(t.tid); err == nil && si.softwareBreakpoint() && p.liveTrap(t, pc) {
			return
		}
	}
	p.handleStop(t, ws)
}

// handleStashed handles the statuses a flush kept for later.
func (p *Process) handleStashed() {
	if !p.live.flushing && len(p.live.ready) > 0 {
		// Collected during a flush, or by a wait that wanted others.
		p.live.stash = append(p.live.stash, p.live.ready...)
		p.live.ready = nil
	}
	for len(p.live.stash) > 0 && !p.live.flushing {
		s := p.live.stash[0]
		p.live.stash = p.live.stash[1:]
		p.handleStatus(s.tid, s.ws)
	}
}

// stashed reports whether a status of tid waits in the stash.
func (p *Process) stashed(tid int) bool {
	_, ok := p.stashedStatus(tid)
	return ok
}

// stashedStatus returns the status of tid waiting in the stash (or in
// ready, collected for a wait in progress).
func (p *Process) stashedStatus(tid int) (unix.WaitStatus, bool) {
	q, i := p.findStashed(tid)
	if q == nil {
		return 0, false
	}
	return (*q)[i].ws, true
}

// takeStashedStatus takes pid's status out of the stash or ready, if
// one waits there: a wait4 for pid alone (a fork child's first stop)
// would otherwise wait for a status already collected.
func (p *Process) takeStashedStatus(pid int) (unix.WaitStatus, bool) {
	q, i := p.findStashed(pid)
	if q == nil {
		return 0, false
	}
	ws := (*q)[i].ws
	*q = slices.Delete(*q, i, i+1)
	return ws, true
}

// findStashed finds tid's first status in the stash, else in ready (the
// stash's are the older: handleStashed appends ready to it); nil if none.
func (p *Process) findStashed(tid int) (*[]stashedStatus, int) {
	for _, q := range []*[]stashedStatus{&p.live.stash, &p.live.ready} {
		if i := slices.IndexFunc(*q, func(s stashedStatus) bool { return s.tid == tid }); i >= 0 {
			return q, i
		}
	}
	return nil, 0
}

// stoppedAtTrap reports whether ws is a SIGTRAP stop that is no
// PTRACE_EVENT or syscall stop: an int3 or a single-step, after which
// the pc is not where the thread is to go on.
func stoppedAtTrap(ws unix.WaitStatus) bool {
	return ws.Stopped() && ws.StopSignal() == unix.SIGTRAP && ws.TrapCause() == 0
}

// liveWaitLimit bounds the wait for a thread to stop for a flush.
const liveWaitLimit = 2 * time.Second

// waitLive waits for the next status of t while serving the flush's
// int3s (pollLive).
func (p *Process) waitLive(t *thread) (unix.WaitStatus, error) {
	// Sleep (napForStatus) rather than yield: with the program's
	// threads busy on every CPU, a yield can cost the stub a whole time
	// slice.
	deadline := time.Now().Add(liveWaitLimit)
	for i := 0; ; i++ {
		if ws, ok := p.pollLive(t.tid); ok {
			return ws, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("thread %d did not stop", t.tid)
		}
		if i%20 == 19 {
			if st := threadState(p.pid, t.tid); st == 'Z' || st == 'X' {
				return 0, fmt.Errorf("thread %d: %w", t.tid, ErrNoThread)
			}
		}
		napForStatus()
	}
}

// liveNap is how long napForStatus sleeps.
const liveNap = 50 * time.Microsecond

// napForStatus sleeps a moment on the calling thread (the ptrace
// goroutine's, raised) before the next look for a status: a thread
// stopped for patching live waits for that look. Waking on SIGCHLD
// instead takes Go's signal goroutine and a timer or scheduler hop, each
// on one of the stub's threads at its normal weight, which nine busy
// threads of the program on two CPUs kept off a CPU for milliseconds; a
// nanosleep wakes this thread itself. RawSyscall keeps the goroutine's P
// for the moment (sysmon would not retake it sooner anyway).
func napForStatus() {
	ts := unix.NsecToTimespec(liveNap.Nanoseconds())
	_, _, _ = unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// holdThread stops running thread t for the flush's own use. It returns
// true when the thread stopped for it (release it with letGo) — atTrap
// when it stopped at one of the flush's int3s first, which letGo then
// sends it on from — and false when it stopped for an event of its own,
// stashed (it stays stopped until that is handled).
func (p *Process) holdThread(t *thread) (held, atTrap bool, err error) {
	if t.sigstopExpected {
		return false, false, fmt.Errorf("thread %d: a stop is on its way already", t.tid)
	}
	if err := unix.Tgkill(p.pid, t.tid, unix.SIGSTOP); err != nil {
		return false, false, fmt.Errorf("stopping thread %d: %w", t.tid, err)
	}
	t.sigstopExpected = true
	t.raiseToStop()
	ws, err := p.waitLive(t)
	t.lowerStopped()
	if err != nil {
		return false, false, err
	}
	if ws.Stopped() && ws.StopSignal() == unix.SIGSTOP && !p.interruptPending(t) {
		t.stopped, t.sigstopExpected = true, false
		return true, false, nil
	}
	// Something else came first; our SIGSTOP is swallowed when it
	// arrives (sigstopExpected).
	if p.isLiveTrapStatus(t.tid, ws) {
		// Stopped all the same (threads running through the patched
		// code all meet the int3 before their SIGSTOP).
		t.stopped = true
		p.noteStopKind(t, false)
		return true, true, nil
	}
	p.live.stash = append(p.live.stash, stashedStatus{t.tid, ws})
	if !ws.Stopped() {
		return false, false, fmt.Errorf("thread %d: %w", t.tid, ErrNoThread)
	}
	return false, false, nil
}

// raiseToStop makes running thread t real-time (prio.Realtime) until
// the stop the flush has just sent it is collected (lowerStopped): a
// thread of the program waiting for a CPU among its busy siblings takes
// the signal as soon as it can, instead of after their time slices
// (milliseconds: the flush waits for it, and every thread that meets a
// flush's int3 meanwhile). The signal is queued before the raise: the
// thread goes to its stop the next time it runs, or at once if it is on
// a CPU.
func (t *thread) raiseToStop() {
	if t.stopRaise == nil {
		t.stopRaise = prio.Realtime(t.tid)
	}
}

// lowerStopped undoes raiseToStop.
func (t *thread) lowerStopped() {
	if t.stopRaise != nil {
		t.stopRaise()
		t.stopRaise = nil
	}
}

// interruptPending reports whether Interrupt's SIGSTOP went to t.
func (p *Process) interruptPending(t *thread) bool {
	p.intrMu.Lock()
	defer p.intrMu.Unlock()
	return p.intrTid == t.tid
}

// holdClock is when a thread's stop for the flush began, with its
// run-queue wait so far (schedstat's second field; -1 if unreadable).
type holdClock struct {
	at   time.Time
	runq time.Duration
}

func (p *Process) startHold(t *thread) holdClock {
	return holdClock{time.Now(), p.runQueueWait(t.tid)}
}

// schedClock is thread tid's schedstat run + wait time (-1 if unknown).
func (p *Process) schedClock(tid int) time.Duration {
	run, wait, ok := p.schedstat(tid)
	if !ok {
		return -1
	}
	return run + wait
}

// runQueueWait returns how long thread tid has waited for a CPU while
// runnable, in all (-1 if unknown).
func (p *Process) runQueueWait(tid int) time.Duration {
	_, wait, ok := p.schedstat(tid)
	if !ok {
		return -1
	}
	return wait
}

// letGo resumes a thread holdThread stopped (atTrap: at one of the
// flush's int3s, from which it is sent on), noting how long it was held.
func (p *Process) letGo(t *thread, hc holdClock, atTrap bool, why string) {
	wall := time.Since(hc.at)
	pause := wall
	if after := p.runQueueWait(t.tid); hc.runq >= 0 && after >= hc.runq {
		pause -= after - hc.runq
	}
	p.live.stats.noteHold(why, wall, pause)
	if atTrap {
		pc, err := getPC(t.tid)
		if err == nil && p.liveTrap(t, pc) {
			return
		}
		if err == nil {
			// The int3 it met is no longer the flush's (a breakpoint
			// now, say): it never ran the instruction there, so it
			// goes back to meet what is there now. Resumed past the
			// int3 it would run the middle of an instruction.
			if setPC(t.tid, pc-breakpointPCAdjust) == nil {
				p.live.stats.Rewound++
			}
		}
	}
	_ = p.rawResume(t, t.step, queuedSignal{})
}

// noteHold records a thread's stop of d for patching live (for why),
// one it was not runnable during.
func (p *Process) noteHold(why string, d time.Duration) {
	p.live.stats.noteHold(why, d, d)
}

// noteHold records a thread's stop of wall for patching live (for why),
// pause of it not runnable.
func (s *LiveStats) noteHold(why string, wall, pause time.Duration) {
	if wall > s.LongestHold {
		s.LongestHold, s.LongestWhy = wall, why
	}
	s.LongestPause = max(s.LongestPause, pause)
}

// runningForLive lists the threads a flush may stop: running, with no
// stop on its way and no stashed status.
func (p *Process) runningForLive() []*thread {
	var out []*thread
	for _, tid := range p.sortedTids() {
		t := p.threads[tid]
		if !t.stopped && !t.zombie && !t.sigstopExpected && !p.stashed(tid) {
			out = append(out, t)
		}
	}
	return out
}

// relocateAll offers every thread's pc to f. The running ones are sent
// a SIGSTOP all at once and each is resumed as soon as its pc is
// checked (so that the whole check takes the slowest thread's time to
// stop, not the sum); a thread that stops for an event of its own
// meanwhile is offered as it is.
func (p *Process) relocateAll(f func(tid int, pc uint64) (uint64, bool)) error {
	defer prio.Realtime(p.tracerTid)()
	var first error
	waiting := map[int]bool{} // tid → the SIGSTOP on its way is ours
	for _, tid := range p.sortedTids() {
		t := p.threads[tid]
		switch ws, stashed := p.stashedStatus(tid); {
		case t.zombie:
		case t.stopped:
			first = firstErr(first, p.relocateThread(t, f))
		case stashed:
			// A thread stopped by an int3 has its pc past it: what
			// handles the stop (a hook) moves it.
			if !stoppedAtTrap(ws) {
				first = firstErr(first, p.relocateThread(t, f))
			}
		case t.sigstopExpected:
			waiting[tid] = false // a stop is on its way: take that one
		default:
			if err := unix.Tgkill(p.pid, tid, unix.SIGSTOP); err != nil {
				continue // gone
			}
			t.sigstopExpected = true
			t.raiseToStop()
			waiting[tid] = true
		}
	}
	defer func() {
		for tid := range waiting { // not stopped in time, or gone
			if t := p.threads[tid]; t != nil {
				t.lowerStopped()
			}
		}
	}()
	deadline := time.Now().Add(liveWaitLimit)
	for naps := 0; len(waiting) > 0; {
		tid, ws, ok := p.pollLiveAny(waiting)
		if !ok {
			if time.Now().After(deadline) {
				return firstErr(first, fmt.Errorf("%d threads did not stop", len(waiting)))
			}
			if naps++; naps%20 == 0 {
				p.dropGoneThreads(waiting)
			}
			napForStatus()
			continue
		}
		ours := waiting[tid]
		delete(waiting, tid)
		if t := p.threads[tid]; t != nil {
			t.lowerStopped()
		}
		first = firstErr(first, p.checkStopped(p.threads[tid], ws, ours, f))
	}
	return first
}

// checkStopped handles the status ws of t, which relocateAll stopped
// (ours) or was waiting for: t's pc is offered to f and, if the stop is
// ours, t resumed at once.
func (p *Process) checkStopped(t *thread, ws unix.WaitStatus, ours bool, f func(tid int, pc uint64) (uint64, bool)) error {
	if ours && ws.Stopped() && ws.StopSignal() == unix.SIGSTOP && !p.interruptPending(t) {
		hc := p.startHold(t)
		t.stopped, t.sigstopExpected = true, false
		p.live.stats.Checked++
		err := p.relocateThread(t, f)
		p.letGo(t, hc, false, "having its pc read")
		return err
	}
	if pc, ok := p.liveTrapStop(t.tid, ws); ok {
		p.handleLiveTrapStop(t, ws, pc) // sent on, past the patched bytes
		return nil
	}
	p.live.stash = append(p.live.stash, stashedStatus{t.tid, ws})
	if ws.Stopped() && !stoppedAtTrap(ws) {
		return p.relocateThread(t, f)
	}
	return nil
}

// dropGoneThreads forgets, in waiting, the threads that exited.
func (p *Process) dropGoneThreads(waiting map[int]bool) {
	for tid := range waiting {
		if st := threadState(p.pid, tid); st == 'Z' || st == 'X' {
			delete(waiting, tid)
		}
	}
}

// withSyscallThread runs f with a stopped thread to inject system calls
// into: a stopped one, else a running one stopped for the moment.
func (p *Process) withSyscallThread(f func(t *thread) error) error {
	t, err := p.anyStoppedThread()
	if err == nil {
		return f(t)
	}
	if p.exitEvent != nil || !p.liveCapable() {
		return err
	}
	for _, c := range p.runningForLive() {
		held, atTrap, herr := p.holdThread(c)
		if herr != nil || !held {
			continue
		}
		hc := p.startHold(c)
		err := f(c)
		p.letGo(c, hc, atTrap, "making an injected system call")
		return err
	}
	return err
}

// syncCores has every CPU running a thread of the process execute a
// serialising instruction (membarrier SYNC_CORE, injected), so that
// none runs code older than the writes made before.
func (p *Process) syncCores() error {
	return p.withSyscallThread(func(t *thread) error {
		// Every thread stopped meanwhile waits for this one: raised
		// (real-time where the stub may, else its nice value) while it
		// makes the injected call; its own code always runs at its own
		// priority.
		defer prio.Raise(t.tid)()
		defer prio.Realtime(t.tid)()
		if err := p.registerSyncCore(t); err != nil {
			return err
		}
		if err := p.membarrier(t, membarrierCmdPrivateExpeditedSyncCore); err != nil {
			return fmt.Errorf("membarrier SYNC_CORE: %w", err)
		}
		return nil
	})
}

// membarrier makes stopped thread t call membarrier(cmd, 0, 0).
func (p *Process) membarrier(t *thread, cmd uint64) error {
	res, err := p.injectSyscall(t, unix.SYS_MEMBARRIER, cmd, 0, 0)
	if err == nil && int64(res) < 0 {
		err = unix.Errno(-int64(res))
	}
	return err
}

// forgetLive drops the live-patching state an exec made stale.
func (p *Process) forgetLive() {
	p.live = liveState{stash: p.live.stash, ready: p.live.ready, enabled: p.live.enabled, flushing: p.live.flushing, execs: p.live.execs + 1}
}

// othersRunning reports whether a thread other than t may be executing.
func (p *Process) othersRunning(t *thread) bool {
	for _, o := range p.threads {
		if o != t && !o.stopped && !o.zombie {
			return true
		}
	}
	return false
}
