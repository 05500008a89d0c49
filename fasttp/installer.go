package fasttp

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"gotpstub/agentexpr"
	"gotpstub/frames"
	"gotpstub/inferior"
	"gotpstub/jit"
	"gotpstub/tdesc"
	"gotpstub/tracing"
)

// Sizes of the memory the installer maps in the inferior.
const (
	// maxSlots is the number of tracepoint table entries of the control
	// block; slots are not reused within a control block's life.
	maxSlots = 1024
	// DefaultRingSize is the size of each lane the pads write records
	// to (a thread that hits fast tracepoints gets a lane of its own, up
	// to 16 threads; the others share one more). A goroutine of the stub
	// drains the lanes into the trace buffer while the program runs, so a
	// lane only has to hold the hits between two passes; a pad that finds
	// its lane full drops the hit and counts it. Pages are touched only as
	// used.
	DefaultRingSize = 8 << 20
	// MinRingSize is the smallest lane SetRingSize accepts.
	MinRingSize = 64 << 10
	// arenaSize is one area of pad code, allocated per 1 GiB window of
	// code addresses so that rel32 jumps reach. Its pages cost nothing
	// until a pad is written there; each area is an mmap injected into
	// the process (a quarter of a millisecond), about a thousand pads.
	arenaSize = 1 << 20
	// maxCollectCap bounds the collection space reserved per hit.
	maxCollectCap = 16 << 10
	// unknownCollect is reserved for a collection whose size is not
	// known statically (a trace of a computed length).
	unknownCollect = 4 << 10
)

// Installer places tracepoints in one process: gdb's fast tracepoints as
// jump pads where it can, everything else (and every fast tracepoint it
// cannot place) through the trap Installer it wraps. It implements
// tracing.Installer and tracing.Syncer.
type Installer struct {
	proc   *inferior.Process
	engine *tracing.Engine
	traps  TrapInstaller
	logf   func(format string, args ...any)

	mu       sync.Mutex
	ctl      uint64 // control block in the inferior; 0 until the first pad
	lanes    *lanes // the stub's view of the shared memory (nil until the first pad)
	ringSize uint64 // bytes per lane (SetRingSize), or the least when not set
	ringSet  bool   // SetRingSize was called: the lanes are exactly ringSize
	draining bool   // the drainer goroutine runs
	// lanesPreparing says a prepareLanes goroutine is under way.
	lanesPreparing bool
	fsBase         bool // pads read the thread pointer from a register: rdfsbase, tpidr_el0 (per-thread lanes)
	// threadAhead is how much of a new thread's lane threadStarted
	// prepares (SetThreadLaneAhead).
	threadAhead uint64
	tpLoad      bool // without rdfsbase, pads read the thread pointer at %fs:0 (tcbSelfPointers)
	nextSlot    uint32
	sites       map[*tracing.Tracepoint]*jumpSite
	// sitePages indexes sites by the granules (siteIndexPage) of the
	// bytes they write: addSiteLocked and dropSiteLocked keep both.
	sitePages map[uint64][]*jumpSite
	bySlot    []*jumpSite        // by tracepoint table slot (maxSlots)
	padTraps  map[uint64]padTrap // int3 address inside a pad → its role
	arenas    map[uint64]*arena  // window of code (arenaWindowShift) → current pad area
	areas     []Range            // every range of pad memory, in order, merged (Stabilize)
	// tails are the ranges of pad memory holding relocated instructions
	// (writePad), in order, merged: a thread there has no record under
	// way (leavePads).
	tails []Range
	// spare holds the memory mapped at forced addresses that no pad or
	// trampoline uses: the rest of each page mapped for one, and those
	// of jumps since removed (jumpSite.own). The same site placed again
	// (the next tstart) finds its address there, where a
	// successor-preserving jump that keeps four bytes has no other, and
	// other sites whose forced bytes allow it share the pages instead of
	// mapping their own (an injected mmap each).
	spare []Range
	// mapped is the memory map (ParseMaps) during a Batch, read once and
	// kept up to date with the pages mapped here: nothing else maps
	// memory while the program is stopped. Nil outside a Batch.
	mapped []Range
	// pcs are the threads' pcs during a Batch (idleSpareLocked), read
	// once: a thread is only ever moved out of spare memory, never into
	// it, so a pc read earlier in the Batch errs on the safe side. Nil
	// outside a Batch.
	pcs []uint64
	// idleBuf is idleSpareLocked's result, reused: a thousand
	// tracepoints placed at once leave as many ranges in spare.
	// freeBuf is punnedPadAddr's free ranges, valid within a Batch while
	// freeOK (freeRangesLocked); gapBuf the unmapped ranges it is built
	// from. Both reused too.
	idleBuf, freeBuf, gapBuf []Range
	freeOK                   bool

	viaTrap  map[*tracing.Tracepoint]string    // trap tracepoints: why a fast one is a trap ("" for gdb's trace)
	pending  []*jumpSite                       // unpatching requested while the process could not be patched
	slots    map[*tracing.Tracepoint]uint32    // each placed tracepoint's table slot, kept when it becomes a trap for a while
	breaks   map[uint64]int                    // gdb's breakpoints (software and hardware) by address, counted
	heldBack map[*tracing.Tracepoint]*jumpSite // fast tracepoints that are traps because of a breakpoint in their bytes, with the jump taken out (nil: never placed)
	hookMem  memory                            // the stopped thread's memory while a hook runs
	code     *codeMap                          // which bytes are instructions (codeOracle)
	shapes   map[Shape]bool                    // the jump shapes allowed (SetShapes; nil: all)
	guards   []guardRange                      // code mappings and their BTI guard (arm64; read when a site lies in none)
	// asyncTid is, while the drainer goroutine feeds the engine (the
	// program may be running), the OS thread that goroutine is locked
	// to: a Remove made there (the run ended by a pad) leaves the jump
	// until Flush; 0 otherwise. A Remove on another goroutine at that
	// moment (gdb's tstop, the program stopped) unpatches at once: a
	// flag shared by all callers let such a tstop leave its jumps in,
	// and the next tstart found its own old patch in the way.
	asyncTid int
	// batches counts the Batch calls under way. Inside one, threads
	// found inside a new jump's covered bytes are moved when the
	// outermost ends (unmoved holds those jumps): nothing runs before
	// then, and one pass over the threads serves every jump.
	batches int
	unmoved []*jumpSite
	// quarantine holds the memory of jumps taken out while threads ran
	// (jumpSite.own): spare once no thread is found inside; padQuarantine
	// their pads' (jumpSite.chunk): in chunks then.
	quarantine    []Range
	padQuarantine []removedPad
	// chunks is the arena memory of removed pads, free for new ones
	// (arenaSpaceLocked), in order, merged.
	chunks []Range
	// look is the pcs releaseQuarantine read at the start of the Batch
	// under way, with collection off when the look began (lookOK;
	// dropped at the Batch's end), for leavePads to use instead of a
	// look of its own unless collection was switched on since:
	// switchedOn counts the times (setActiveLocked), lookOn is what it
	// was then. See leavePads.
	look               []uint64
	lookOK             bool
	lookOn, switchedOn uint64
	// codePages is the code read during a Batch (codecache.go); nil
	// outside one. codeMu guards it.
	codeMu    sync.Mutex
	codePages codeCache
	// padTemplates are pads built, by the key of their spec
	// (buildPadLocked); mu.
	padTemplates map[jit.PadKey]*jit.JumpPad
	// padScratch is the memory buildPadLocked copies a template into:
	// the pad it returns is good until its next call.
	padScratch *jit.JumpPad
	// fillScratch holds writePad's fill and tail bytes.
	fillScratch []byte

	// drainMu serialises drains (the drainer goroutine and Sync), so
	// records reach the engine once and in order, and every look at the
	// lanes that allocates ahead (lanes.populate: backlog, drain).
	drainMu sync.Mutex
	// lookMoved says whether the drainer's last look found a lane
	// written since the look before (drainDue; paces the drainer).
	lookMoved atomic.Bool
	// wakeFD is the drainer's eventfd (drainerWake; 0: not made yet).
	wakeFD  wakeFD
	drained []*RingRecord        // drain's buffer, reused
	hits    []tracing.FastRecord // resolve's buffer, reused
	stats   dropStats
	// runRoom is the frame bytes a linear trace buffer takes in this run
	// (0: circular, unbounded). Once the lanes' records make more
	// (LaneSpent), the pads are switched off at once and fullPending
	// set: the run ends with tfull after the last drain.
	runRoom     uint64
	runFull     bool // the pads were switched off for it
	fullPending bool

	// faults maps each pad instruction that may fault (a plain load of
	// jit.Options.FaultLoads) to its recovery code. Its own lock: the
	// fault hook runs on the ptrace goroutine and must never wait for
	// in.mu, which is held across calls into the inferior.
	faultsMu sync.Mutex
	faults   map[uint64]uint64

	// clock converts the records' time-stamp counter values.
	clock *tscClock
	// shared is lanes for LoadTSV/StoreTSV, which the engine calls with
	// its lock held: they must not take mu.
	shared atomic.Pointer[lanes]
}

// LoadTSV implements tracing.TSVStore: variables 0 to padTSVs-1 live in
// the memory shared with the pads.
func (in *Installer) LoadTSV(num int) (int64, bool) {
	l := in.shared.Load()
	if l == nil || num < 0 || num >= padTSVs {
		return 0, false
	}
	return l.loadTSV(num), true
}

// StoreTSV implements tracing.TSVStore.
func (in *Installer) StoreTSV(num int, v int64) bool {
	l := in.shared.Load()
	if l == nil || num < 0 || num >= padTSVs {
		return false
	}
	l.storeTSV(num, v)
	return true
}

// setLanesLocked makes l the lanes (nil: none yet), moving the trace state
// variables from the old ones, and has the engine keep its variables
// there.
func (in *Installer) setLanesLocked(l *lanes) {
	old := in.lanes
	in.lanes = l
	if l != nil {
		in.ctl = l.mem.Addr
	}
	if old != nil && l != nil {
		for num := range padTSVs {
			l.storeTSV(num, old.loadTSV(num))
		}
	}
	in.shared.Store(l)
	if l != nil {
		l.setBudget(in.runRoom)
	}
	if old == nil && l != nil {
		in.engine.SetTSVStore(in)
	}
}

// TrapInstaller is the fallback installer (trapfallback.Installer).
type TrapInstaller interface {
	tracing.Installer
	Flush()
	FlushDue() bool
}

// memory is how the installer reaches inferior memory: the Process from
// the packet goroutine, the Stopped thread from a trap hook (the ptrace
// goroutine must not wait for itself).
type memory interface {
	ReadMemory(addr uint64, buf []byte) (int, error)
	WriteMemory(addr uint64, data []byte) error
}

// jumpSite is one placed jump pad.
type jumpSite struct {
	tp      *tracing.Tracepoint
	slot    uint32
	site    Site
	padAddr uint64 // where the pad's code is
	padLen  int    // its code's length
	// padFaults are its code's faulting loads (jit.JumpPad.Faults).
	padFaults []jit.PadFault
	// entry is where the site's jump goes: padAddr, or for a site whose
	// displacement has forced bytes a jump there to the pad (forcedPlaceLocked).
	entry   uint64
	heads   map[uint64]uint64 // covered instruction → its relocated copy
	puns    []uint64          // int3s at covered instruction heads
	patched bool
	// traceTime: the tracepoint collects $trace_timestamp, which the
	// stub adds to each frame from the record's time.
	traceTime bool
	compact   bool // jit.PadSpec.Compact: 8-byte records in owned lanes
	// own is the memory at forced addresses this jump uses (its entry
	// jump or pad, a trampoline: punnedPadAddr), spare once it is
	// removed, unless keepOwn: a jump held back by a breakpoint keeps it
	// for placeAgain.
	own     []Range
	keepOwn bool
	// chunk is the arena memory its pad and tail took
	// (arenaSpaceLocked), reused for other pads once the jump is out
	// and no thread is inside (freePadLocked), unless keepOwn.
	chunk Range
}

// removedPad is the arena memory of a removed jump's pad
// (jumpSite.chunk) and its plain loads' entries in in.faults: both go
// once no thread is inside (freePadLocked).
type removedPad struct {
	chunk  Range
	faults []jit.PadFault
}

// padTrap is the role of an int3 inside a pad.
type padTrap struct {
	site *jumpSite
	kind trapKind
}

type trapKind int

const (
	trapPun trapKind = iota // a covered instruction head was jumped to
)

// arena is an area of pad code in the inferior.
type arena struct {
	base, used uint64
}

// New returns an installer for p reporting to e, falling back to traps.
// logf (may be nil) receives one line per placement decision.
func New(p *inferior.Process, e *tracing.Engine, traps TrapInstaller, logf func(format string, args ...any)) *Installer {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	in := &Installer{
		proc: p, engine: e, traps: traps, logf: logf,
		sites:     map[*tracing.Tracepoint]*jumpSite{},
		sitePages: map[uint64][]*jumpSite{},
		bySlot:    make([]*jumpSite, maxSlots),
		padTraps:  map[uint64]padTrap{},
		arenas:    map[uint64]*arena{},
		viaTrap:   map[*tracing.Tracepoint]string{},
		clock:     newTSCClock(),
		slots:     map[*tracing.Tracepoint]uint32{},
		breaks:    map[uint64]int{},
		heldBack:  map[*tracing.Tracepoint]*jumpSite{},
		faults:    map[uint64]uint64{},
		ringSize:  DefaultRingSize,

		threadAhead: DefaultThreadAhead,
	}
	p.AddTrapHook(in.trapHook)
	p.SetFaultHook(in.faultHook)
	p.SetThreadStartHook(in.threadStarted)
	return in
}

// Batch runs f, whose Install and Remove calls then reach the process
// without a hand-off to its ptrace goroutine each (tracing.Batcher):
// QTStart with a thousand fast tracepoints makes four thousand process
// operations.
func (in *Installer) Batch(f func()) {
	run := func() {
		in.mu.Lock()
		in.batches++
		in.mu.Unlock()
		in.codeMu.Lock()
		if in.codePages == nil {
			in.codePages = codeCache{}
		}
		in.codeMu.Unlock()
		defer in.endBatch()
		defer lazierGC()()
		in.releaseQuarantine()
		f()
	}
	if in.proc == nil || in.proc.Exclusive(run) != nil {
		f() // a closed process: f's operations fail one by one
	}
}

// batchGCPercent is the garbage collector's GOGC while a Batch runs.
// Placing a thousand tracepoints allocates about 7 MB of short-lived
// data (decoded instructions, pad images, kept writes); at Go's default
// of 100 that started a collection or two per tstart, whose marking and
// the fresh pages the heap then faulted in were a fifth of the stub's
// CPU time at function entries (scripts/bench-insert.sh, SITES=entry).
// The heap can grow only by what the batch allocates, and the setting
// is put back when it ends.
const batchGCPercent = 400

// lazierGC raises GOGC to batchGCPercent unless the collector is off or
// lazier already, and returns the function that puts it back.
func lazierGC() (restore func()) {
	old := debug.SetGCPercent(batchGCPercent)
	if old < 0 || old > batchGCPercent {
		debug.SetGCPercent(old)
	}
	return func() { debug.SetGCPercent(old) }
}

// releaseQuarantine makes the quarantined memory no thread is inside
// spare: each running thread is stopped a moment for its pc. Taken with
// collection off, those pcs are kept for the Batch's StartRun (in.look;
// leavePads says why they can serve it).
func (in *Installer) releaseQuarantine() {
	in.mu.Lock()
	q := len(in.quarantine) + len(in.padQuarantine)
	// Read before the look (leavePads).
	off, on := in.lanes == nil || !in.lanes.active(), in.switchedOn
	in.mu.Unlock()
	if q == 0 {
		return
	}
	pcs, err := in.proc.AllPCs()
	if err != nil {
		in.logf("fast tracepoints: memory of removed jumps kept: %v", err)
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if off {
		in.look, in.lookOK, in.lookOn = pcs, true, on
	}
	inside := func(r Range) bool {
		return slices.ContainsFunc(pcs, func(pc uint64) bool { return r.Start <= pc && pc < r.End })
	}
	kept := in.quarantine[:0]
	for _, r := range in.quarantine {
		if inside(r) {
			kept = append(kept, r)
			continue
		}
		in.addSpareLocked(r)
	}
	in.quarantine = kept
	keptPads := in.padQuarantine[:0]
	for _, rp := range in.padQuarantine {
		if inside(rp.chunk) {
			keptPads = append(keptPads, rp)
			continue
		}
		in.freePadLocked(rp)
	}
	in.padQuarantine = keptPads
}

// freePadLocked makes a removed pad's memory free for new pads and
// drops its loads' fault entries: no thread is inside it.
func (in *Installer) freePadLocked(rp removedPad) {
	in.faultsMu.Lock()
	for _, f := range rp.faults {
		delete(in.faults, f.PC)
	}
	in.faultsMu.Unlock()
	in.chunks = unionInsert(in.chunks, rp.chunk)
}

// inBatch reports whether a Batch is under way.
func (in *Installer) inBatch() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.batches > 0
}

// endBatch ends a Batch; the outermost moves the threads found inside
// the covered bytes of the jumps it placed. Should that fail, those
// jumps become traps: none may stay with a thread inside its bytes.
func (in *Installer) endBatch() {
	in.mu.Lock()
	in.batches--
	var sites []*jumpSite
	if in.batches == 0 {
		sites, in.unmoved = in.unmoved, nil
		in.mapped, in.pcs, in.freeOK = nil, nil, false
		in.look, in.lookOK = nil, false
		in.codeMu.Lock()
		in.codePages = nil
		in.codeMu.Unlock()
	}
	in.mu.Unlock()
	// Jumps taken out again within the Batch (another tracepoint shares
	// their bytes) have their instructions back: nothing to move.
	sites = slices.DeleteFunc(sites, func(s *jumpSite) bool { return !s.patched })
	if len(sites) == 0 {
		return
	}
	err := in.moveThreadsOut(sites)
	if err == nil {
		return
	}
	in.logf("fast tracepoints: %v", err)
	for _, s := range sites {
		if err := in.convertToTrapFor(s, err.Error()); err != nil {
			in.logf("fast tracepoints: %v", err)
		}
	}
}

// moveThreadsOut sends the threads stopped inside the covered bytes of
// sites' jumps (not at their start; at it too after a push left in
// place, Site.Lead: such a thread ran the push before the jump was
// there) to the relocated copies of the instructions they were at.
//
// With threads running (non-stop) the running ones are checked while
// the jumps go in (inferior.Process.RelocatePCsLive): only jumps over
// more than one instruction can have a thread inside their bytes.
func (in *Installer) moveThreadsOut(sites []*jumpSite) error {
	sites = slices.DeleteFunc(slices.Clone(sites), func(s *jumpSite) bool { return !s.coversSeveral() })
	if len(sites) == 0 {
		return nil
	}
	err := in.proc.RelocatePCsLive(func(_ int, pc uint64) (uint64, bool) {
		for _, s := range sites {
			if pc > s.site.Start() && pc < s.site.Resume() {
				to, ok := s.heads[pc]
				return to, ok
			}
		}
		return 0, false
	})
	if err != nil {
		return fmt.Errorf("moving threads out of the patched bytes: %w", err)
	}
	return nil
}

// coversSeveral reports whether a thread can be inside s's jump: at a
// covered instruction after the first, or at the first after a lead.
func (s *jumpSite) coversSeveral() bool {
	for h := range s.heads {
		if h > s.site.Start() && h < s.site.Resume() {
			return true
		}
	}
	return false
}

// SetRingSize sets the size of each lane (a power of two between
// MinRingSize and 1 GiB). It applies to the lanes mapped with the first
// pad: call it before that.
func (in *Installer) SetRingSize(n uint64) error {
	if n < MinRingSize || n&(n-1) != 0 || n > 1<<30 {
		return fmt.Errorf("trace ring size %d: want a power of two between %d and %d", n, MinRingSize, 1<<30)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ctl != 0 {
		return errors.New("trace ring size: the lanes are already mapped")
	}
	in.ringSize, in.ringSet = n, true
	return nil
}

// maxAutoLane bounds the lane size chosen from the trace buffer's size.
const maxAutoLane = 32 << 20

// laneSize is the size of the lanes to map: SetRingSize's, or four times
// the trace buffer's (rounded up to a power of two, at least
// DefaultRingSize, at most maxAutoLane): a record is 8 bytes (a hit
// that collects nothing, in its thread's own lane) to 32 and more where
// its frame is 6 and more, so a lane that size absorbs a burst of most
// of what the buffer takes while the drainer catches up. Only the pages a
// lane's writer reaches (and the 2 MiB the drainer allocates ahead of it)
// take memory.
func (in *Installer) laneSize() uint64 {
	if in.ringSet {
		return in.ringSize
	}
	want := uint64(4 * in.engine.BufferSize())
	n := max(in.ringSize, DefaultRingSize)
	for n < want && n < maxAutoLane {
		n <<= 1
	}
	return n
}

// Install places tp: a jump pad when gdb asked for a fast tracepoint and
// the location and the actions allow one, a trap otherwise.
func (in *Installer) Install(tp *tracing.Tracepoint) error {
	if in.proc != nil && !in.inBatch() && in.proc.ThreadsRunning() {
		// With threads running, jumps go in with the live protocol,
		// threads inside their bytes moved meanwhile: a Batch's end.
		var err error
		in.Batch(func() { err = in.Install(tp) })
		return err
	}
	in.removePending()
	if err := in.install(tp); err != nil {
		return err
	}
	if tp.Static {
		in.semaphore(tp, +1)
	}
	return nil
}

func (in *Installer) install(tp *tracing.Tracepoint) error {
	if err := in.refuseSite(tp.Addr); err != nil { // isa_*.go; the engine names the tracepoint
		return err
	}
	// A jump and a trap cannot share code: a trap at a jump's first
	// byte would step the original instruction and bypass the pad, one
	// inside the covered bytes would never run. Tracepoints sharing or
	// overlapping a jump's bytes all become traps.
	for _, s := range in.jumpsCovering(tp.Addr, 1) {
		if err := in.convertToTrap(s); err != nil {
			return err
		}
	}
	why, heldBack := "", false
	if tp.Fast || tp.Static { // a static tracepoint (an SDT marker's nop) is placed like a fast one
		err := in.installJump(tp)
		if err == nil {
			in.logf("%v", placementLine{in, tp})
			return nil
		}
		why = err.Error()
		_, heldBack = errors.AsType[*heldBackError](err)
		in.logf("fast tracepoint %d at %#x: trap instead of a jump: %v", tp.Num, tp.Addr, err)
		in.engine.FastAsTrap(tp, why)
	}
	if err := in.traps.Install(tp); err != nil {
		return err
	}
	in.mu.Lock()
	in.viaTrap[tp] = why
	if heldBack {
		in.heldBack[tp] = nil
	}
	in.mu.Unlock()
	return nil
}

// faultHook redirects a fault at one of the pads' plain loads to its
// recovery code (inferior.Process.SetFaultHook); the program never sees
// the signal. Pads are never unmapped, so their entries stay valid.
func (in *Installer) faultHook(_ int, pc uint64, _ int, _ uint64) (uint64, bool) {
	in.faultsMu.Lock()
	defer in.faultsMu.Unlock()
	to, ok := in.faults[pc]
	return to, ok
}

// clearOfOthers returns the candidates whose bytes (after the first, and
// a short jump's slot) hold no other tracepoint's address, in order: a
// shape that would later have to become a trap when that tracepoint
// goes in is not chosen while another exists.
func (in *Installer) clearOfOthers(tp *tracing.Tracepoint, cands []Site) []Site {
	var out []Site
	for _, c := range cands {
		hit := false
		for _, r := range c.Ranges() {
			hit = hit || in.engine.TracepointIn(r.Start, r.End, tp.Addr)
		}
		if !hit {
			out = append(out, c)
		}
	}
	return out
}

// freeCandidates returns the candidates whose bytes hold no breakpoint,
// trap or other jump (conflictLocked), in order.
func (in *Installer) freeCandidates(cands []Site) []Site {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []Site
	for _, c := range cands {
		if !in.conflictLocked(c) {
			out = append(out, c)
		}
	}
	return out
}

// conflictLocked reports whether site's covered bytes hold a gdb
// breakpoint (after the first byte), a trap tracepoint or another jump.
func (in *Installer) conflictLocked(site Site) bool {
	start, n := site.Start(), uint64(site.Span())
	_, brk := in.breakInsideLocked(start, n)
	if site.Slot != 0 {
		// The slot (and the neighbour holding it): nothing else may be
		// there at all.
		at, n := secondPatch(site)
		_, inSlot := in.breakInsideLocked(at-1, n+1)
		brk = brk || inSlot || in.trapsWithinLocked(at, n) || len(in.jumpsCoveringLocked(at, n)) > 0
	}
	return brk || in.trapsWithinLocked(start, n) || len(in.jumpsCoveringLocked(start, n)) > 0
}

// jumpsCovering returns the placed jumps whose covered bytes overlap
// [addr, addr+n).
func (in *Installer) jumpsCovering(addr, n uint64) []*jumpSite {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.jumpsCoveringLocked(addr, n)
}

func (in *Installer) jumpsCoveringLocked(addr, n uint64) []*jumpSite {
	var out []*jumpSite
	for page := addr / siteIndexPage; page <= (addr+n-1)/siteIndexPage; page++ {
		for _, s := range in.sitePages[page] {
			if s.site.Overlaps(addr, n) && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// siteIndexPage is the granule of the placed jumps' index (sitePages):
// a site is listed under every granule its ranges touch, a few (a jump,
// a slot within a short jump's reach, a trampoline's host). Small, so
// that a lookup meets few sites where tracepoints are dense: with 4 KiB
// granules and 1,000 entries 17 bytes apart, each install's look at the
// jumps already placed scanned about 240 of them (7 µs a tracepoint).
const siteIndexPage = 64

// addSiteLocked records s as placed: in sites and in the index
// jumpsCoveringLocked searches.
func (in *Installer) addSiteLocked(s *jumpSite) {
	in.sites[s.tp] = s
	for _, page := range s.indexPages() {
		in.sitePages[page] = append(in.sitePages[page], s)
	}
}

// dropSiteLocked forgets tp's placed jump (addSiteLocked).
func (in *Installer) dropSiteLocked(tp *tracing.Tracepoint) {
	s := in.sites[tp]
	if s == nil {
		return
	}
	delete(in.sites, tp)
	for _, page := range s.indexPages() {
		l := slices.DeleteFunc(in.sitePages[page], func(o *jumpSite) bool { return o == s })
		if len(l) == 0 {
			delete(in.sitePages, page)
		} else {
			in.sitePages[page] = l
		}
	}
}

// indexPages lists the granules of the index the bytes s writes touch.
func (s *jumpSite) indexPages() []uint64 {
	var pages []uint64
	for _, r := range s.site.Ranges() {
		for page := r.Start / siteIndexPage; page <= (r.End-1)/siteIndexPage; page++ {
			if !slices.Contains(pages, page) {
				pages = append(pages, page)
			}
		}
	}
	return pages
}

// trapsWithin reports whether a tracepoint placed as a trap lies in
// [addr, addr+n).
func (in *Installer) trapsWithin(addr, n uint64) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.trapsWithinLocked(addr, n)
}

func (in *Installer) trapsWithinLocked(addr, n uint64) bool {
	for tp := range in.viaTrap {
		if tp.Addr >= addr && tp.Addr < addr+n {
			return true
		}
	}
	return false
}

// convertToTrap replaces a placed jump by a trap for the same tracepoint
// because another tracepoint shares its bytes.
func (in *Installer) convertToTrap(s *jumpSite) error {
	return in.convertToTrapFor(s, "another tracepoint shares its bytes")
}

// convertToTrapFor replaces a placed jump by a trap for the same
// tracepoint, for the reason why. Records its pad already wrote are still
// drained and counted.
func (in *Installer) convertToTrapFor(s *jumpSite, why string) error {
	in.mu.Lock()
	in.dropSiteLocked(s.tp)
	in.mu.Unlock()
	// The trap first: where the jump starts at the tracepoint and
	// threads run, its int3 goes in as the jump comes out, in one
	// change (inferior's insertSoftware), so no hit is lost between.
	if err := in.traps.Install(s.tp); err != nil {
		return fmt.Errorf("fast tracepoint %d at %#x: replacing the jump by a trap: %w", s.tp.Num, s.tp.Addr, err)
	}
	if err := in.sendOnAfterLead(s); err != nil {
		in.logf("fast tracepoints: %v", err)
	}
	if err := in.unpatch(s); err != nil {
		return err
	}
	in.mu.Lock()
	in.viaTrap[s.tp] = why
	in.mu.Unlock()
	in.logf("fast tracepoint %d at %#x: trap instead of a jump: %s", s.tp.Num, s.tp.Addr, why)
	in.engine.FastAsTrap(s.tp, why)
	return nil
}

// sendOnAfterLead, for a jump after a push left in place (Site.Lead)
// that is coming out while its tracepoint becomes a trap at the push,
// sends a thread that ran the push but not yet the jump (pc at the
// jump) on to the jump's target, as if it had run it: the trap is behind
// it, and without the jump its hit would be lost. Stopped threads are
// moved now; running ones (live patching) when the jump's removal is
// flushed, once none can reach the push unseen.
func (in *Installer) sendOnAfterLead(s *jumpSite) error {
	if s.site.Lead == 0 || !s.patched {
		return nil
	}
	at, to := s.site.Addr, s.entry
	err := in.proc.RelocatePCsLive(func(_ int, pc uint64) (uint64, bool) { return to, pc == at })
	if err != nil {
		return fmt.Errorf("fast tracepoint %d: threads between the push and the jump at %#x: %w", s.tp.Num, at, err)
	}
	return nil
}

// Remove takes tp out of the inferior. A pad stays mapped (a thread may
// still be inside it); only the jump goes.
func (in *Installer) Remove(tp *tracing.Tracepoint) error {
	if tp.Static {
		in.semaphore(tp, -1)
	}
	in.mu.Lock()
	if _, ok := in.viaTrap[tp]; ok {
		delete(in.viaTrap, tp)
		if held := in.heldBack[tp]; held != nil {
			in.addSpareLocked(held.own...)
		}
		delete(in.heldBack, tp)
		in.mu.Unlock()
		return in.traps.Remove(tp)
	}
	s := in.sites[tp]
	if s == nil {
		in.mu.Unlock()
		return nil
	}
	in.dropSiteLocked(tp)
	if len(in.sites) == 0 {
		in.setActiveLocked(false)
	}
	if in.hookMem != nil || (in.asyncTid != 0 && in.asyncTid == unix.Gettid()) {
		// The ptrace goroutine runs our hook, or the drainer found the
		// run over while the program runs: the jump stays (the pads
		// skip, collection is off) until Flush at the next stop.
		in.pending = append(in.pending, s)
		in.mu.Unlock()
		return nil
	}
	in.mu.Unlock()
	return in.unpatch(s)
}

// FlushDue reports whether Flush has code to change: removals requested
// while a trap hook ran, jumps held back by a breakpoint. In non-stop
// mode the server pauses the running threads for it.
func (in *Installer) FlushDue() bool {
	in.mu.Lock()
	due := len(in.pending) > 0 || len(in.heldBack) > 0
	in.mu.Unlock()
	return due || in.traps.FlushDue()
}

// Flush finishes removals requested while a trap hook ran. The server
// calls it whenever the process has stopped.
func (in *Installer) Flush() {
	in.traps.Flush()
	in.removePending()
	in.placeHeldBack()
}

// removePending takes out the jumps whose removal waited for a stop
// (Remove). Install calls it too: the drainer may end a run (a full
// buffer) after the stop's Flush, and the next tstart must not find
// the old jumps in its way.
func (in *Installer) removePending() {
	in.mu.Lock()
	pending := in.pending
	in.pending = nil
	in.mu.Unlock()
	for _, s := range pending {
		if err := in.unpatch(s); err != nil {
			in.logf("fast tracepoints: %v", err)
		}
	}
}

func (in *Installer) unpatch(s *jumpSite) error {
	if !s.patched {
		return nil
	}
	s.patched = false
	for _, head := range s.puns {
		in.mu.Lock()
		delete(in.padTraps, head)
		in.mu.Unlock()
		if err := in.proc.RemoveInternalTrap(head); err != nil {
			return fmt.Errorf("fast tracepoint %d: removing the trap at %#x: %w", s.tp.Num, head, err)
		}
	}
	s.puns = nil
	if err := in.proc.RemovePatch(s.site.Addr); err != nil {
		return fmt.Errorf("fast tracepoint %d at %#x: removing the jump: %w", s.tp.Num, s.tp.Addr, err)
	}
	if at, n := secondPatch(s.site); n > 0 {
		if err := in.proc.RemovePatch(at); err != nil {
			return fmt.Errorf("fast tracepoint %d at %#x: removing the jump to the pad at %#x: %w", s.tp.Num, s.tp.Addr, s.site.Slot, err)
		}
	}
	if !s.keepOwn {
		running := in.proc.ThreadsRunning()
		rp := removedPad{s.chunk, s.padFaults}
		in.mu.Lock()
		if running {
			// A running thread may be inside: reused only once every
			// thread is seen outside (releaseQuarantine).
			in.quarantine = append(in.quarantine, s.own...)
			in.padQuarantine = append(in.padQuarantine, rp)
		} else {
			in.addSpareLocked(s.own...)
			in.freePadLocked(rp)
		}
		in.mu.Unlock()
		s.own, s.chunk = nil, Range{}
	}
	return nil
}

// secondPatch is where a short-jump site's second patch goes: its slot,
// or the neighbour holding it (n is 0 for other sites).
func secondPatch(site Site) (at, n uint64) {
	switch {
	case site.Host != nil:
		return site.Host.Addr, uint64(site.Host.Footprint())
	case site.Slot != 0:
		return site.Slot, JumpLen
	}
	return 0, 0
}

// writeJump writes site's jump to the pad at pad: for a short-jump site
// the slot's jump first (in dead padding), then the short jump.
func (in *Installer) writeJump(site Site, pad uint64) error {
	slotAt, _ := secondPatch(site)
	if site.Slot != 0 {
		b, err := site.SlotBytes(pad)
		if site.Host != nil {
			b, err = site.HostBytes(pad)
		}
		if err != nil {
			return err
		}
		if err := in.insertPatch(slotAt, b); err != nil {
			return fmt.Errorf("writing the jump to the pad at %#x: %w", site.Slot, err)
		}
	}
	jmp, err := site.PatchBytes(pad)
	if err == nil {
		err = in.insertPatch(site.Addr, jmp)
	}
	if err != nil && site.Slot != 0 {
		_ = in.proc.RemovePatch(slotAt)
	}
	if err != nil {
		return fmt.Errorf("writing the jump: %w", err)
	}
	return nil
}

// setActiveLocked switches collection in every pad on or off; switched
// on, it wakes the drainer (once: each wake costs a context switch, and
// a tstart placing 1,000 jumps switches it on 1,000 times).
func (in *Installer) setActiveLocked(on bool) {
	if on {
		in.switchedOn++ // a look at the pcs taken before serves no more (leavePads)
	}
	was := false
	if in.lanes != nil {
		was = in.lanes.active()
		in.lanes.setActive(on)
	}
	if on && !was {
		in.wakeFD.wake()
	}
	if on != was && in.lanes != nil {
		in.logf("fast tracepoints: collection switched %s", map[bool]string{true: "on", false: "off"}[on])
	}
}

func (in *Installer) memLocked() memory {
	if in.hookMem != nil {
		return in.hookMem
	}
	return in.proc
}

// installJump places tp as a jump pad, or says why it cannot.
func (in *Installer) installJump(tp *tracing.Tracepoint) error {
	if tp.StepCount > 0 {
		return errors.New("while-stepping needs single-steps: traps only")
	}
	acts, err := compileActions(tp, in.engine.StaticReads)
	if err != nil {
		return err
	}
	return in.placeSite(tp, acts) // isa_*.go
}

// placeX86 places tp's x86-64 jump and pad for acts: the shapes a jump
// at tp.Addr may take (plain, punned, short, evicting, after a push),
// the first that gets pad memory.
func (in *Installer) placeX86(tp *tracing.Tracepoint, acts *padActions) error {
	// The cheap shapes first (a plain or successor-preserving jump,
	// SiteCandidates' first ones): where one is free and gets a pad, the
	// whole list would have given the same site; the others (short jumps
	// and eviction search the code around) are listed only when needed.
	if quick, err := in.quickCandidates(tp.Addr); err == nil {
		if free := in.freeCandidates(in.clearOfOthers(tp, quick)); len(free) > 0 {
			err := in.placeJump(tp, acts, free)
			if _, unplaced := errors.AsType[*unplacedError](err); !unplaced {
				return err
			}
		}
	}
	cands, err := in.siteCandidates(tp.Addr)
	if err != nil {
		return err
	}
	// Shapes that touch nothing placed (a short jump next to a
	// neighbour's jump, say) and no other tracepoint's address come
	// first; then those that touch nothing placed; only when every
	// shape meets something does the first one decide what happens.
	if free := in.freeCandidates(in.clearOfOthers(tp, cands)); len(free) > 0 {
		cands = free
	} else if free := in.freeCandidates(cands); len(free) > 0 {
		cands = free
	}
	return in.placeJump(tp, acts, cands)
}

// writePad writes a pad at base: its code, int3s (padFill) up to
// padLen, then tail (the relocated instructions), whose range it notes
// in in.tails, then int3s again to the end of its room (the memory
// reserved for it, which the unused tail room leaves): pads side by side
// in an arena then cover their pages without a gap, which a tstart's
// kept writes make without reading the page first. The writes copy the
// bytes (a tstart's are kept until its end, outside Go's heap:
// inferior's keptBytes), so code and the fill are scratch memory used
// again for the next pad. in.mu is held.
func (in *Installer) writePad(base uint64, code []byte, padLen uint64, tail []byte, room uint64) error {
	in.tails = unionInsert(in.tails, Range{base + padLen, base + padLen + uint64(len(tail))})
	rest := appendPadRest(in.fillScratch[:0], len(code), padLen, tail, room)
	in.fillScratch = rest
	in.forgetCode(base, room)
	if err := in.proc.WriteMemory(base, code); err != nil {
		return fmt.Errorf("writing the pad: %w", err)
	}
	if err := in.proc.WriteMemory(base+uint64(len(code)), rest); err != nil {
		return fmt.Errorf("writing the pad: %w", err)
	}
	return nil
}

// appendPadRest appends what follows a pad's codeLen bytes of code in
// its room: fill to padLen, the tail, fill to the room's end.
func appendPadRest(b []byte, codeLen int, padLen uint64, tail []byte, room uint64) []byte {
	b = appendFill(b, int(padLen)-codeLen)
	b = append(b, tail...)
	return appendFill(b, int(room-padLen)-len(tail))
}

// appendFill appends n bytes' worth of padFill (whole copies) to b.
func appendFill(b []byte, n int) []byte {
	for range n / len(padFill) {
		b = append(b, padFill...)
	}
	return b
}

// buildPadLocked builds the pad of spec, or copies one built for
// another tracepoint with the same spec otherwise (jit.PadSpec.Key: no
// condition or collection code) and retargets it.
func (in *Installer) buildPadLocked(spec jit.PadSpec) (*jit.JumpPad, error) {
	key, ok := spec.Key()
	if t := in.padTemplates[key]; ok && t != nil {
		p := t.CloneTo(in.padScratch)
		in.padScratch = p
		if err := p.Retarget(spec.TPAddr, spec.TPIndex); err == nil {
			return p, nil
		}
	}
	p, err := buildPad(spec) // isa_*.go
	if err == nil && ok {
		if in.padTemplates == nil {
			in.padTemplates = map[jit.PadKey]*jit.JumpPad{}
		}
		in.padTemplates[key] = p.Clone()
	}
	return p, err
}

// unplacedError says that no candidate shape got pad memory.
type unplacedError struct{ err error }

func (e *unplacedError) Error() string { return e.err.Error() }
func (e *unplacedError) Unwrap() error { return e.err }

// placeJump places tp's jump in the first of cands (in order of
// preference) that gets pad memory, with its pad for acts.
func (in *Installer) placeJump(tp *tracing.Tracepoint, acts *padActions, cands []Site) error {
	site := cands[0]
	if at, ok := in.breakInside(site.Start(), uint64(site.Span())); ok {
		return &heldBackError{at: at}
	}
	if in.trapsWithin(site.Start(), uint64(site.Span())) {
		return errors.New("another tracepoint shares its bytes")
	}
	if others := in.jumpsCovering(site.Start(), uint64(site.Span())); len(others) > 0 {
		// Jumps whose bytes hold this tracepoint's address become
		// traps; this one may then still get a shape of its own.
		for _, s := range others {
			if err := in.convertToTrap(s); err != nil {
				return err
			}
		}
		if cands = in.freeCandidates(cands); len(cands) == 0 || in.trapsWithin(cands[0].Start(), uint64(cands[0].Span())) {
			return errors.New("another tracepoint shares its bytes")
		}
	}

	in.mu.Lock()
	defer in.mu.Unlock()
	// Size the pad, then place it and its relocated tail in an arena.
	spec, slot, reused, pad, err := in.newPadLocked(tp, acts)
	if err != nil {
		return err
	}
	padLen := align16(uint64(len(pad.Code)))
	site, entry, base, size, own, err := in.placeLocked(cands, func(s Site) uint64 { return padLen + 16*uint64(len(s.Insns)+1) + 64 })
	if err != nil {
		return &unplacedError{err}
	}
	spec.Addr = base
	spec.TailAddr = base + padLen
	if site.Lead > 0 {
		// The push at the tracepoint's address ran: its registers had
		// rsp 8 higher.
		spec.SPBias = 8
		if pad, err = in.buildPadLocked(spec); err != nil {
			return fmt.Errorf("building the pad: %w", err)
		}
		if n := align16(uint64(len(pad.Code))); n != padLen {
			return fmt.Errorf("the pad after the push takes %d bytes, %d reserved", n, padLen)
		}
	}
	if err := pad.Place(spec.Addr, spec.TailAddr); err != nil {
		return fmt.Errorf("placing the pad: %w", err)
	}
	tail, heads, err := RelocateRun(site.Insns, spec.TailAddr, site.Resume())
	if err != nil {
		return fmt.Errorf("relocating the covered instructions: %w", err)
	}
	if padLen+uint64(len(tail)) > size {
		return fmt.Errorf("relocated instructions take %d bytes, %d reserved", len(tail), size-padLen)
	}
	if err := in.writePad(base, pad.Code, padLen, tail, size); err != nil {
		return err
	}
	if entry != base {
		jmp, err := appendJmpRel32(nil, entry, base)
		if err == nil {
			err = in.writeMemory(entry, jmp)
		}
		if err != nil {
			return fmt.Errorf("writing the jump to the pad: %w", err)
		}
	}
	if err := in.writeTrampoline(site); err != nil {
		return err
	}
	if site.Slot != 0 {
		// A thread stopped between the short jump and the slot's jump
		// is stepped on into the pad (Stabilize).
		in.areas = unionInsert(in.areas, Range{site.Slot, site.Slot + JumpLen})
	}
	in.readySlotLocked(tp, slot, reused, pad)
	s := &jumpSite{tp: tp, slot: slot, site: site, padAddr: spec.Addr, padLen: len(pad.Code), padFaults: slices.Clone(pad.Faults), entry: entry, heads: heads, traceTime: acts.traceTime,
		compact: spec.Compact, own: own}
	if holding(own, Range{base, base + 1}) < 0 {
		s.chunk = Range{base, base + align16(size)} // from an arena, not at a forced address
	}

	// Threads stopped inside the covered bytes (not at their start) go to
	// the relocated copies (in a Batch, when it ends); then the jump goes
	// in.
	if in.batches == 0 {
		if err := in.moveThreadsOut([]*jumpSite{s}); err != nil {
			return err
		}
	}
	if err := in.writeJump(site, entry); err != nil {
		return err
	}
	s.patched = true
	if in.batches > 0 {
		in.unmoved = append(in.unmoved, s)
	}
	for _, off := range site.Puns {
		// A thread jumping to a covered instruction other than the first
		// meets an int3 there; the hook sends it to the relocated copy.
		head := site.Addr + uint64(off)
		if err := in.proc.InsertInternalTrap(head); err != nil {
			_ = in.unpatch(s)
			return fmt.Errorf("trapping the covered instruction at %#x: %w", head, err)
		}
		s.puns = append(s.puns, head)
		in.padTraps[head] = padTrap{site: s, kind: trapPun}
	}
	in.commitSiteLocked(s, reused)
	return nil
}

// readySlotLocked readies what tp's pad uses before its jump goes in:
// its table entry (a slot reused by a tracepoint placed again keeps its
// counters, hits towards the passcount) and the recovery of its plain
// loads' faults.
func (in *Installer) readySlotLocked(tp *tracing.Tracepoint, slot uint32, reused bool, pad *jit.JumpPad) {
	if !reused {
		in.lanes.writeSlot(slot, uint64(tp.PassCount))
	}
	in.faultsMu.Lock()
	for _, f := range pad.Faults {
		in.faults[f.PC] = f.Recover
	}
	in.faultsMu.Unlock()
}

// commitSiteLocked records s as placed, its jump in: its table slot
// taken, indexed by address and slot, collection on.
func (in *Installer) commitSiteLocked(s *jumpSite, reused bool) {
	if !reused {
		in.nextSlot++
		in.slots[s.tp] = s.slot
	}
	in.addSiteLocked(s)
	in.bySlot[s.slot] = s
	in.setActiveLocked(true)
}

// newPadLocked builds tp's pad for acts, not yet placed (jit.JumpPad's
// Place gives it its address and its tail's), with its spec and table
// slot (padSlotLocked).
func (in *Installer) newPadLocked(tp *tracing.Tracepoint, acts *padActions) (spec jit.PadSpec, slot uint32, reused bool, pad *jit.JumpPad, err error) {
	if slot, reused, err = in.padSlotLocked(tp); err != nil {
		return
	}
	if spec, err = in.padSpecLocked(tp, acts, slot); err != nil {
		return
	}
	if pad, err = in.buildPadLocked(spec); err != nil {
		err = fmt.Errorf("building the pad: %w", err)
	}
	return
}

// padSlotLocked maps the control block and lanes on first use and
// returns tp's index in the tracepoint table: the one it had when placed
// before (reused: its counters are kept), else the next free one.
func (in *Installer) padSlotLocked(tp *tracing.Tracepoint) (slot uint32, reused bool, err error) {
	if err := in.ensureCtlLocked(); err != nil {
		return 0, false, err
	}
	slot, reused = in.slots[tp]
	if !reused && in.nextSlot >= maxSlots {
		return 0, false, errors.New("tracepoint table full")
	}
	if !reused {
		slot = in.nextSlot
	}
	return slot, reused, nil
}

// padSpecLocked returns the spec of tp's pad for acts, at table index
// slot (its addresses are filled in once it is placed).
func (in *Installer) padSpecLocked(tp *tracing.Tracepoint, acts *padActions, slot uint32) (jit.PadSpec, error) {
	spec := jit.PadSpec{
		TPAddr: tp.Addr, Ctl: in.ctl, TPIndex: slot,
		Cond: acts.cond, Collect: acts.collect, CollectCap: acts.capBytes, CollectRegs: acts.regs,
		Lanes: ownedLanes, FSBase: in.fsBase, TPLoad: in.tpLoad, FrameBase: frames.HeaderSize,
		Uncounted: acts.uncounted,
		// A hit that collects nothing is one 8-byte word in its
		// thread's lane.
		Compact: !acts.regs && len(acts.collect) == 0 && !acts.static && slot <= jit.RecCompactMaxTP,
	}
	if acts.frameRegs {
		spec.FrameBase += uint32(in.engine.RegisterBlockBytes(tp))
	}
	if acts.static {
		// An 'S' block, at least this long (the buffer's room is
		// checked against a lower bound: the engine finds it full).
		spec.FrameBase += frames.StaticBlockHeader + uint32(acts.staticMin)
	}
	vectorState(&spec, acts) // isa_*.go
	if size := padRecordSize(spec.CollectRegs, spec.CollectCap); 2*size > in.lanes.laneSize {
		return spec, fmt.Errorf("a record of %d bytes does not fit twice in a %d-byte lane", size, in.lanes.laneSize)
	}
	return spec, nil
}

// quickCandidates reads the code at addr and lists the cheap shapes a
// jump there may take, those SiteCandidates lists first
// (KeptCandidates).
func (in *Installer) quickCandidates(addr uint64) ([]Site, error) {
	code := make([]byte, ShortCodeLen)
	n, err := in.readCode(addr, code)
	if n < 16 {
		return nil, fmt.Errorf("reading the code: %w", err)
	}
	cands, err := KeptCandidates(code[:n], addr)
	if err != nil {
		return nil, err
	}
	return in.allowedShapes(cands)
}

// siteCandidates reads the code at addr (ShortCodeLen bytes, at least
// 16) and, unless a plain jump fits, the ShortBackLen bytes before it
// (left out when unreadable), and lists the shapes a jump there may take
// (SiteCandidates), then, at a function's entry that pushes, those after
// the push (LeadSites).
func (in *Installer) siteCandidates(addr uint64) ([]Site, error) {
	code := make([]byte, ShortCodeLen)
	n, err := in.readCode(addr, code)
	if n < 16 {
		return nil, fmt.Errorf("reading the code: %w", err)
	}
	code = code[:n]
	if site, err := PlanSite(code, addr); err == nil && len(site.Puns) == 0 {
		return in.allowedShapes([]Site{site}) // nothing more to read
	}
	back := make([]byte, ShortBackLen)
	if m, _ := in.readCode(addr-ShortBackLen, back); m != len(back) {
		back = nil
	}
	m := in.codeMap()
	cands, err := SiteCandidates(back, code, addr, m.insnStart)
	if n := pushLen(code); n > 0 && m.pushEntry(addr, addr+uint64(n)) {
		if lead, lerr := LeadSites(back, code, addr, m.insnStart); lerr == nil {
			cands, err = append(cands, lead...), nil
		}
	}
	if err != nil {
		return nil, err
	}
	return in.allowedShapes(cands)
}

// writeTrampoline writes the trampoline of an evicting site's next
// instruction, or of the neighbour holding a short jump's slot: the
// instructions relocated, then a jump back after them.
func (in *Installer) writeTrampoline(site Site) error {
	e := site.Evicted
	if e == nil {
		e = site.Host
	}
	if e == nil {
		return nil
	}
	code, _, err := RelocateRun(e.Insns, site.Tramp, e.Resume())
	if err != nil {
		return fmt.Errorf("relocating the evicted instruction: %w", err)
	}
	if len(code) > TrampolineSize {
		return fmt.Errorf("the evicted instruction's trampoline takes %d bytes, %d reserved", len(code), TrampolineSize)
	}
	if err := in.writeMemory(site.Tramp, code); err != nil {
		return fmt.Errorf("writing the trampoline: %w", err)
	}
	return nil
}

// placeLocked takes the first candidate (SiteCandidates) that gets pad
// memory, sizeFor(site) bytes: a plain jump's pad goes to an arena near
// the code; a jump whose displacement must have given bytes (int3 puns,
// kept successor bytes) goes to a jump at an address that gives them
// (forcedPlaceLocked). Candidates after the first are skipped when their
// bytes hold a breakpoint, a trap or another jump. It returns the site,
// where its jump goes (entry), the pad's address and size, and the
// memory at forced addresses it took; the error is the first
// candidate's.
func (in *Installer) placeLocked(cands []Site, sizeFor func(Site) uint64) (site Site, entry, base, size uint64, own []Range, err error) {
	var first error
	for i, c := range cands {
		if (i > 0 || c.Slot != 0) && in.conflictLocked(c) {
			continue
		}
		if len(c.Forced) == 0 {
			base, err = in.arenaSpaceLocked(c.Addr, sizeFor(c))
			if err == nil && c.Host != nil {
				c.Tramp, err = in.arenaSpaceLocked(c.Host.Addr, TrampolineSize)
			}
			entry = base
		} else {
			entry, base, own, err = in.forcedPlaceLocked(&c, sizeFor(c))
		}
		if err == nil {
			return c, entry, base, sizeFor(c), own, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = errors.New("another tracepoint, a breakpoint or a trap holds the bytes of every shape")
	}
	return Site{}, 0, 0, 0, nil, first
}

// forcedPlaceLocked places the pad (size bytes) of site c, whose jump
// displacement has forced bytes: a JumpLen-byte jump at an address with
// those bytes leads to the pad in an arena, so that sites a few bytes
// apart, whose forced addresses are as close, do not compete for the
// room of whole pads (their jumps share pages, a mapping each saved).
// Where no arena space is within reach of that jump, the whole pad goes
// to the forced address. It fills in c.Tramp for a site with a
// trampoline and returns the jump's target, the pad's address and the
// memory at forced addresses taken.
func (in *Installer) forcedPlaceLocked(c *Site, size uint64) (entry, base uint64, own []Range, err error) {
	entry, tramp, err := in.punnedPadAddr(*c, JumpLen)
	if err == nil {
		own = []Range{{entry, entry + JumpLen}}
		if tramp != 0 {
			own = append(own, Range{tramp, tramp + TrampolineSize})
		}
		base, err = in.arenaSpaceLocked(c.Addr, size)
		if err == nil {
			if _, err = rel32(entry+JumpLen, base); err == nil {
				c.Tramp = tramp
				return entry, base, own, nil
			}
			in.unreserveArenaLocked(base, size)
		}
		in.addSpareLocked(own...)
	}
	base, c.Tramp, err = in.punnedPadAddr(*c, size)
	if err != nil {
		return 0, 0, nil, err
	}
	own = []Range{{base, base + size}}
	if c.Tramp != 0 {
		own = append(own, Range{c.Tramp, c.Tramp + TrampolineSize})
	}
	return base, base, own, nil
}

// ensureCtlLocked maps the shared control block and lanes on first use
// and starts the drainer.
func (in *Installer) ensureCtlLocked() error {
	if in.lanes != nil {
		return nil
	}
	l, err := mapLanes(in.proc, in.laneSize())
	if err != nil {
		return err
	}
	in.setLanesLocked(l)
	in.fsBase, in.tpLoad = padThreadPointer(in.proc)
	in.prefaultLocked()
	if !in.draining {
		in.draining = true
		go in.drainLoop(in.proc.Done())
	}
	return nil
}

// arenaSpaceLocked returns size bytes of pad space within a jump's
// reach (padReach) of addr: in the arena of addr's window, or in a new
// one mapped near addr when that one is full or out of reach.
func (in *Installer) arenaSpaceLocked(addr, size uint64) (uint64, error) {
	if p, ok := in.reuseChunkLocked(addr, size); ok {
		return p, nil
	}
	window := addr >> arenaWindowShift
	a := in.arenas[window]
	if a == nil || a.used+size > arenaSize || !arenaReaches(a.base+a.used, addr) {
		base, err := in.proc.AllocateScratch(addr, arenaSize)
		if err != nil {
			return 0, fmt.Errorf("mapping a pad area: %w", err)
		}
		a = &arena{base: base}
		in.arenas[window] = a
		if in.mapped != nil {
			in.mapped = insertSorted(in.mapped, Range{base, base + arenaSize})
		}
		in.freeOK = false
		in.areas = unionInsert(in.areas, Range{base, base + arenaSize})
	}
	p := a.base + a.used
	if !arenaReaches(p, addr) {
		return 0, fmt.Errorf("pad area %#x out of jump range of %#x", p, addr)
	}
	a.used += align16(size)
	return p, nil
}

// reuseChunkLocked takes size bytes within reach of addr from the
// memory of removed pads (in.chunks), first fit, where no stopped
// thread's pc lies (Stabilize moved them out; this makes sure).
func (in *Installer) reuseChunkLocked(addr, size uint64) (uint64, bool) {
	size = align16(size)
	for i, c := range in.chunks {
		r := Range{c.Start, c.Start + size}
		if r.End > c.End || !arenaReaches(c.Start, addr) || in.threadInLocked(r) {
			continue
		}
		if r.End == c.End {
			in.chunks = slices.Delete(in.chunks, i, i+1)
		} else {
			in.chunks[i].Start = r.End
		}
		return r.Start, true
	}
	return 0, false
}

// arenaReaches reports whether a jump at addr reaches the whole arena
// from p on.
func arenaReaches(p, addr uint64) bool {
	d := int64(p - addr)
	return d <= padReach-arenaSize && d >= -padReach+arenaSize
}

// unreserveArenaLocked gives back the space arenaSpaceLocked just
// returned at p (nothing was reserved after it).
func (in *Installer) unreserveArenaLocked(p, size uint64) {
	for _, a := range in.arenas {
		if a.base+a.used == p+align16(size) {
			a.used -= align16(size)
			return
		}
	}
	in.chunks = unionInsert(in.chunks, Range{p, p + align16(size)}) // a removed pad's
}

// punnedPadAddr maps size bytes at the pad address nearest to the site
// whose jump displacement has the site's forced bytes, and for an
// evicting site TrampolineSize bytes for its trampoline (FindPadAddrs).
func (in *Installer) punnedPadAddr(site Site, size uint64) (pad, tramp uint64, err error) {
	for attempt := 0; attempt < 4; attempt++ {
		free, err := in.freeRangesLocked()
		if err != nil {
			return 0, 0, err
		}
		p, t, err := FindPadAddrs(site, free, size)
		if err != nil {
			return 0, 0, err
		}
		if err := in.mapPadLocked(p, size); err != nil {
			// Mapped meanwhile (maps was stale): read the map again.
			in.mapped = nil
			in.freeOK = false
			continue
		}
		if t != 0 {
			if err := in.mapPadLocked(t, TrampolineSize); err != nil {
				// The pad's memory stays ours (never unmapped): spare.
				in.addSpareLocked(Range{p, p + size})
				in.mapped = nil
				in.freeOK = false
				continue
			}
		}
		in.takeFreeLocked(free, Range{p, p + size})
		if t != 0 && in.freeOK {
			in.takeFreeLocked(in.freeBuf, Range{t, t + TrampolineSize})
		}
		return p, t, nil
	}
	return 0, 0, errors.New("could not map a pad at a matching address")
}

// freeRangesLocked returns where pads may go: the unmapped ranges and the
// idle spare ones, in address order. Within a Batch the list is kept
// (in.freeBuf, while in.freeOK) and updated as pads take from it:
// rebuilding it from a thousand pads' mappings and spare ranges for each
// of a thousand tracepoints was most of the pad address search.
func (in *Installer) freeRangesLocked() ([]Range, error) {
	if in.freeOK && in.batches > 0 {
		return in.freeBuf, nil
	}
	mapped, err := in.memoryMapLocked()
	if err != nil {
		return nil, err
	}
	in.gapBuf = appendFreeRanges(in.gapBuf[:0], mapped, minMapAddr, maxUserAddr)
	in.freeBuf = appendWithSpare(in.freeBuf[:0], in.gapBuf, in.idleSpareLocked())
	in.freeOK = in.batches > 0
	return in.freeBuf, nil
}

// takeFreeLocked records that a pad took r out of free (the list
// freeRangesLocked returned): mapPadLocked leaves the rest of the pages
// it maps, and of a spare range it uses, spare, so r alone stops being
// free.
func (in *Installer) takeFreeLocked(free []Range, r Range) {
	if in.batches == 0 {
		return
	}
	i := sort.Search(len(free), func(i int) bool { return free[i].End > r.Start })
	if i == len(free) || free[i].Start > r.Start || free[i].End < r.End {
		in.freeOK = false // not one free range's part: rebuild next time
		return
	}
	f := free[i]
	switch {
	case f.Start == r.Start && f.End == r.End:
		free = slices.Delete(free, i, i+1)
	case f.Start == r.Start:
		free[i].Start = r.End
	case f.End == r.End:
		free[i].End = r.Start
	default:
		free[i].End = r.Start
		free = slices.Insert(free, i+1, Range{r.End, f.End})
	}
	in.freeBuf, in.freeOK = free, true
}

// memoryMapLocked returns the process's mapped ranges, in address
// order: from /proc/PID/maps, read once per Batch (in.mapped; the result
// is clipped, so a caller's append copies it).
func (in *Installer) memoryMapLocked() ([]Range, error) {
	if in.mapped != nil {
		return slices.Clip(in.mapped), nil
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", in.proc.Pid()))
	if err != nil {
		return nil, fmt.Errorf("reading the memory map: %w", err)
	}
	mapped, err := ParseMaps(maps)
	if err != nil {
		return nil, err
	}
	if in.batches > 0 {
		in.mapped = slices.Clone(mapped)
	}
	return slices.Clip(mapped), nil
}

// insertSorted inserts r into rs, kept in order of Start.
func insertSorted(rs []Range, r Range) []Range {
	i, _ := slices.BinarySearchFunc(rs, r.Start, byStartAt)
	return slices.Insert(rs, i, r)
}

// mapPadLocked makes [p, p+size) pad memory: a range of in.spare that
// holds it (idle: listed in spare) gives it up, or its pages are mapped
// (AllocateScratchAt) and the rest of them go to in.spare. Within a
// Batch the mapping is padMapGranule-aligned and as large as the gap
// around it allows (padMappingLocked): the forced addresses of
// neighbouring sites' jumps lie a few bytes apart, and each injected
// mmap costs tens of µs. A pad that begins in an idle spare range and
// runs past its end maps only the pages after it.
func (in *Installer) mapPadLocked(p, size uint64) error {
	r := Range{p, p + size}
	if i := holding(in.spare, r); i >= 0 && !in.threadInLocked(in.spare[i]) {
		s := in.spare[i]
		in.spare = slices.Delete(in.spare, i, i+1)
		in.addSpareLocked(Range{s.Start, r.Start}, Range{r.End, s.End})
		in.areas = unionInsert(in.areas, r)
		return nil
	}
	from := r.Start
	i := holding(in.spare, Range{r.Start, r.Start + 1})
	if i >= 0 && in.spare[i].End%4096 == 0 && !in.threadInLocked(in.spare[i]) {
		from = in.spare[i].End // the pages before are ours already
	} else {
		i = -1
	}
	pages := in.padMappingLocked(from, r.End)
	if err := in.proc.AllocateScratchAt(pages.Start, int(pages.End-pages.Start)); err != nil {
		return err
	}
	if in.mapped != nil {
		in.mapped = insertSorted(in.mapped, pages)
	}
	if i >= 0 {
		s := in.spare[i]
		in.spare = slices.Delete(in.spare, i, i+1)
		in.addSpareLocked(Range{s.Start, r.Start})
	} else {
		in.addSpareLocked(Range{pages.Start, r.Start})
	}
	in.addSpareLocked(Range{r.End, pages.End})
	in.areas = unionInsert(in.areas, r)
	return nil
}

// padMapGranule is the alignment and greatest size of the memory
// mapPadLocked maps for a pad at a forced address within a Batch.
const padMapGranule = 64 << 10

// padMapMargin is how far from another mapping padMappingLocked's growth
// stops: a heap grows up from the mapping below, a stack down from the
// one above (the kernel keeps a 1 MiB guard gap below a stack), and the
// growth must not take their room (the pad's own pages may, as before).
const padMapMargin = 1 << 20

// padMappingLocked returns the pages to map for pad memory [from, to):
// its own pages, within a Batch grown to the padMapGranule-aligned
// window holding from, as far as the unmapped gap around them reaches
// less padMapMargin on either side — not grown at all when its pages lie
// within such a margin.
func (in *Installer) padMappingLocked(from, to uint64) Range {
	pages := pagesOf(from, to-from)
	if in.batches == 0 {
		return pages
	}
	mapped, err := in.memoryMapLocked()
	if err != nil {
		return pages
	}
	i := sort.Search(len(mapped), func(i int) bool { return mapped[i].Start >= pages.Start })
	// room: the gap less the neighbours' margins.
	room := Range{minMapAddr, maxUserAddr}
	if i > 0 {
		if mapped[i-1].End > pages.Start {
			return pages // already mapped: let the mmap fail
		}
		room.Start = mapped[i-1].End + padMapMargin
	}
	if i < len(mapped) {
		if mapped[i].Start < pages.End {
			return pages
		}
		room.End = max(mapped[i].Start, padMapMargin) - padMapMargin
	}
	if room.Start > pages.Start || room.End < pages.End {
		return pages // inside a neighbour's margin: no growth
	}
	window := from &^ (padMapGranule - 1)
	return Range{max(window, room.Start), max(min(window+padMapGranule, room.End), pages.End)}
}

// byStartAt orders a range against an address by its start, for binary
// searches of range lists kept in address order.
func byStartAt(r Range, at uint64) int { return cmp.Compare(r.Start, at) }

// inAreas reports whether pc lies in one of the sorted, merged ranges
// areas (in.areas: pad memory).
func inAreas(areas []Range, pc uint64) bool { return holding(areas, Range{pc, pc + 1}) >= 0 }

// holding returns the index of the range of rs (in order, not
// overlapping) that holds all of r, or -1.
func holding(rs []Range, r Range) int {
	i, found := slices.BinarySearchFunc(rs, r.Start, byStartAt)
	if !found {
		i--
	}
	if i >= 0 && i < len(rs) && rs[i].Start <= r.Start && r.End <= rs[i].End {
		return i
	}
	return -1
}

// idleSpareLocked returns the ranges of in.spare no thread's pc lies in
// (a thread is never left inside a removed pad, Stabilize; this makes
// sure).
func (in *Installer) idleSpareLocked() []Range {
	if len(in.spare) == 0 {
		return nil
	}
	// in.spare is in order and its ranges do not overlap: each pc is in
	// at most one, found by binary search; usually none is, and the
	// whole list is copied at once (a Batch of a thousand tracepoints
	// leaves as many ranges).
	var busy []int
	for _, pc := range in.threadPCsLocked() {
		if i := holding(in.spare, Range{pc, pc + 1}); i >= 0 {
			busy = append(busy, i)
		}
	}
	idle := in.idleBuf[:0]
	defer func() { in.idleBuf = idle }()
	if len(busy) == 0 {
		idle = append(idle, in.spare...)
		return idle
	}
	for i, r := range in.spare {
		if !slices.Contains(busy, i) {
			idle = append(idle, r)
		}
	}
	return idle
}

// threadInLocked reports whether a stopped thread's pc lies in r.
func (in *Installer) threadInLocked(r Range) bool {
	return slices.ContainsFunc(in.threadPCsLocked(), func(pc uint64) bool { return r.Start <= pc && pc < r.End })
}

// addSpareLocked adds ranges to in.spare (in address order), merged
// with their neighbours; empty ranges are left out. The Batch's free
// list is rebuilt after (freeRangesLocked), unless the caller updates it.
func (in *Installer) addSpareLocked(rs ...Range) {
	in.freeOK = false
	for _, r := range rs {
		in.spare = unionInsert(in.spare, r)
	}
}

// unionInsert adds r to rs (in order, not overlapping), merging it with
// the ranges it overlaps or touches.
func unionInsert(rs []Range, r Range) []Range {
	if r.End <= r.Start {
		return rs
	}
	i, _ := slices.BinarySearchFunc(rs, r.Start, byStartAt)
	if i > 0 && rs[i-1].End >= r.Start {
		i--
		r = Range{rs[i].Start, max(rs[i].End, r.End)}
		rs = slices.Delete(rs, i, i+1)
	}
	j := i
	for j < len(rs) && rs[j].Start <= r.End {
		r.End = max(r.End, rs[j].End)
		j++
	}
	rs = slices.Delete(rs, i, j)
	return slices.Insert(rs, i, r)
}

// threadPCsLocked returns the pcs of the process's threads (read once
// per Batch: in.pcs).
func (in *Installer) threadPCsLocked() []uint64 {
	if in.pcs != nil {
		return in.pcs
	}
	pcs := in.proc.StoppedPCs()
	if in.batches > 0 {
		in.pcs = pcs
	}
	return pcs
}

// appendWithSpare appends to out the free ranges with the spare ones
// added, in address order (both are in address order).
func appendWithSpare(out, free, spare []Range) []Range {
	for len(free) > 0 || len(spare) > 0 {
		if len(spare) == 0 || (len(free) > 0 && free[0].Start < spare[0].Start) {
			out, free = append(out, free[0]), free[1:]
		} else {
			out, spare = append(out, spare[0]), spare[1:]
		}
	}
	return out
}

// The user address range pads may use (vm.mmap_min_addr's usual value to
// the top of 4-level paging's user space).
const (
	minMapAddr  = 0x10000
	maxUserAddr = 0x7ffffffff000
)

func align16(v uint64) uint64 { return (v + 15) &^ 15 }

// padActions is a tracepoint's condition and collection compiled for a
// pad (compileActions).
type padActions struct {
	cond    *jit.Code
	collect []*jit.Code
	// capBytes bounds the collection blocks of a record.
	capBytes uint32
	// regs: the record holds the register block; xsave: the vector state
	// too; frameRegs: the frame too (an R action, not only $_sdata).
	regs, xsave, frameRegs bool
	// traceTime: the tracepoint collects $trace_timestamp, which the stub
	// adds from the record's time.
	traceTime bool
	// static: the tracepoint collects $_sdata: the last uncounted
	// collections record the marker's argument memory (besides the
	// register block), and staticMin is the fewest bytes of its 'S' block.
	static               bool
	uncounted, staticMin int
}

// compileActions compiles tp's condition and collection for a pad:
// everything must compile (no interpreter inside the inferior) and no
// trace state variable the pads do not keep may be used. $_sdata
// needs static, what the marker's data reads (tracing.Engine.StaticReads).
func compileActions(tp *tracing.Tracepoint, static func(addr uint64) (tracing.StaticReads, bool)) (*padActions, error) {
	// Plain loads: a bad address faults, and the stub's fault hook sends
	// the thread to the recovery code, which redoes the read safely.
	opts := jit.Options{ZeroUnreadable: true, FaultLoads: true}
	compile := func(what string, e *agentexpr.Expr) (*jit.Code, error) {
		for _, num := range append(append([]int(nil), e.TSVsRead...), e.TSVsWritten...) {
			if num == traceTimestampTSV || num >= padTSVs {
				// $trace_timestamp is the stub's clock; the pads keep
				// variables 0 to padTSVs-1 (LoadTSV).
				return nil, fmt.Errorf("%s uses trace state variable %d (kept by the stub: traps only)", what, num)
			}
		}
		c, err := jit.Compile(e, jitArch, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if c.Fallback != "" {
			return nil, fmt.Errorf("%s needs the interpreter: %s", what, c.Fallback)
		}
		return c, nil
	}
	pa := &padActions{}
	var err error
	if tp.Cond != nil {
		if pa.cond, err = compile("the condition", tp.Cond); err != nil {
			return nil, err
		}
	}
	total := uint64(0)
	var staticMem []tracing.Action
	add := func(what string, e *agentexpr.Expr) error {
		c, err := compile(what, e)
		if err != nil {
			return err
		}
		pa.collect = append(pa.collect, c)
		total += collectBound(e)
		return nil
	}
	for i := range tp.Actions {
		a := &tp.Actions[i]
		var e *agentexpr.Expr
		switch a.Kind {
		case tracing.ActionRegisters:
			pa.regs, pa.frameRegs = true, true
			pa.xsave = pa.xsave || maskHasFPRegs(a.RegMask)
			continue
		case tracing.ActionMemory:
			if e, err = memoryActionExpr(a); err != nil {
				return nil, err
			}
		case tracing.ActionExpr:
			if collectsTraceTimestamp(a.Expr) {
				pa.traceTime = true // the stub adds it from the record's time
				continue
			}
			e = a.Expr
		case tracing.ActionStaticData:
			if pa.static {
				continue
			}
			reads, ok := static(tp.Addr)
			if !ok {
				return nil, errors.New("$_sdata: no static tracepoint marker there")
			}
			pa.static, pa.regs, pa.staticMin = true, true, reads.MinText
			staticMem = reads.Memory
			continue
		default:
			return nil, fmt.Errorf("action %q not supported in a pad", a.Text)
		}
		if err := add(fmt.Sprintf("action %q", a.Text), e); err != nil {
			return nil, err
		}
	}
	// The marker's memory last: the engine takes its blocks from the end.
	for i := range staticMem {
		e, err := memoryActionExpr(&staticMem[i])
		if err != nil {
			return nil, fmt.Errorf("$_sdata: %w", err)
		}
		if err := add("$_sdata's argument", e); err != nil {
			return nil, err
		}
		pa.uncounted++
	}
	if total > maxCollectCap {
		return nil, fmt.Errorf("collects up to %d bytes per hit (pads reserve at most %d)", total, maxCollectCap)
	}
	pa.capBytes = uint32(total)
	return pa, nil
}

// collectsTraceTimestamp reports whether e is gdb's bytecode for
// `collect $trace_timestamp` (getv 1, tracev 1, pop, end): the pads
// record every hit's time, so the stub makes the 'V' block itself.
func collectsTraceTimestamp(e *agentexpr.Expr) bool {
	want := []agentexpr.Op{agentexpr.OpGetv, agentexpr.OpTracev, agentexpr.OpPop, agentexpr.OpEnd}
	if e == nil || len(e.Insns) != len(want) {
		return false
	}
	for i, in := range e.Insns {
		if in.Op != want[i] || (i < 2 && in.Imm != traceTimestampTSV) {
			return false
		}
	}
	return true
}

// traceTimestampTSV is the number of gdb's $trace_timestamp.
const traceTimestampTSV = 1

// maskHasFPRegs reports whether an R action's register mask (gdb's hex
// string, the last two digits being registers 0-7) names an x87, SSE or
// AVX register: only then does the pad store the XSAVE area.
func maskHasFPRegs(mask string) bool {
	for i := 0; i < len(mask); i++ {
		d := mask[len(mask)-1-i]
		var v byte
		switch {
		case d >= '0' && d <= '9':
			v = d - '0'
		case d >= 'a' && d <= 'f':
			v = d - 'a' + 10
		case d >= 'A' && d <= 'F':
			v = d - 'A' + 10
		default:
			return true // malformed: collect everything
		}
		for b := 0; b < 4; b++ {
			n := 4*i + b
			if v&(1<<b) != 0 && (n >= tdesc.ST0 && n <= tdesc.MXCSR || n >= tdesc.YMM0H && n < tdesc.YMM0H+16) {
				return true
			}
		}
	}
	return false
}

// memoryActionExpr turns an M action into the bytecode collecting it.
func memoryActionExpr(a *tracing.Action) (*agentexpr.Expr, error) {
	var insns []agentexpr.Insn
	if a.BaseReg >= 0 {
		insns = append(insns,
			agentexpr.Insn{Op: agentexpr.OpReg, Imm: uint64(a.BaseReg)},
			agentexpr.Insn{Op: agentexpr.ConstOp(a.Offset), Imm: a.Offset},
			agentexpr.Insn{Op: agentexpr.OpAdd})
	} else {
		insns = append(insns, agentexpr.Insn{Op: agentexpr.ConstOp(a.Offset), Imm: a.Offset})
	}
	insns = append(insns,
		agentexpr.Insn{Op: agentexpr.ConstOp(a.Len), Imm: a.Len},
		agentexpr.Insn{Op: agentexpr.OpTrace},
		agentexpr.Insn{Op: agentexpr.OpEnd})
	code, err := agentexpr.Encode(nil, insns)
	if err != nil {
		return nil, fmt.Errorf("action %q: %w", a.Text, err)
	}
	e, err := agentexpr.Parse(code)
	if err != nil {
		return nil, fmt.Errorf("action %q: %w", a.Text, err)
	}
	if err := agentexpr.Validate(e, agentexpr.Limits{}); err != nil {
		return nil, fmt.Errorf("action %q: %w", a.Text, err)
	}
	return e, nil
}

// collectBound is an upper bound of the block bytes e appends, assuming
// unknownCollect for a trace whose length is computed.
func collectBound(e *agentexpr.Expr) uint64 {
	const mHeader = 11
	total := uint64(0)
	for i, in := range e.Insns {
		switch in.Op {
		case agentexpr.OpTraceQuick, agentexpr.OpTrace16:
			total += mHeader + in.Imm
		case agentexpr.OpTracev:
			total += 13
		case agentexpr.OpTrace, agentexpr.OpTracenz:
			n := uint64(unknownCollect)
			if i > 0 && agentexpr.IsConst(e.Insns[i-1].Op) {
				n = e.Insns[i-1].Imm
			}
			total += n + mHeader*(n/65535+1)
		}
	}
	return align16(total)
}
