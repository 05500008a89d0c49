package fasttp

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"gotpstub/frames"
	"gotpstub/jit"
	"gotpstub/tracing"
)

// The drainer: a goroutine of the stub that moves the pads' records from
// the shared lanes into the trace buffer while the program runs, so no hit
// ever waits for the stub. It turns what the pads report (a passcount reached, a failure, dropped hits) into the
// engine's state.

// Drainer pacing. The drainer looks at the lanes every minIdleSleep to
// maxBusySleep while the pads write (backing off while no drain is due),
// up to maxIdleSleep once a look finds no lane written since the one
// before (a program that hits rarely, or a run that is over: 2,000
// looks a second cost the stub 5-10% of a CPU for nothing), but drains only when
// a pass is due (drainDue): a lane is 1/drainShare full, or holds more
// than the trace buffer can still take, or a pad stopped tracing, or
// records have waited maxDrainDelay. Until then the stub stays off the
// program's CPUs: a program that runs on every core would otherwise
// share them with the drainer, and a burst that fits in the lanes is
// drained when the program pauses or gdb asks (Sync). A pass that found
// records is followed by another at once.
const (
	minIdleSleep  = 50 * time.Microsecond
	maxBusySleep  = 500 * time.Microsecond
	maxIdleSleep  = 20 * time.Millisecond
	drainShare    = 4
	maxDrainDelay = 100 * time.Millisecond
)

// dropStats are the drop counters last reported to the engine.
type dropStats struct {
	full, noStub, lost uint64
	errs               int // drain errors logged
	// unresolved: records of tracepoints removed since; ignored:
	// records the engine did not keep (drained before the run started
	// or after it stopped, or of a tracepoint not installed).
	unresolved, ignored uint64
}

// drainLoop runs until done is closed (the process is gone; Sync still
// drains what is left).
func (in *Installer) drainLoop(done <-chan struct{}) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	shortSlice()
	wake := in.drainerWake()
	defer in.closeDrainerWake()
	sleep := minIdleSleep
	last := time.Now()
	for {
		if in.drainDue(time.Since(last)) {
			n := in.drainOnce(true)
			last = time.Now()
			if n > 0 {
				sleep = minIdleSleep
				continue
			}
		}
		if wake.sleep(sleep) {
			sleep = minIdleSleep // a run started: look at once, and often
			continue
		}
		select {
		case <-done:
			return
		default:
		}
		sleep = nextSleep(sleep, in.lookMoved.Load())
	}
}

// wakeFD is an eventfd the drainer sleeps on (-1: none, it only
// sleeps); the installer writes it when a run starts collecting, so a
// drainer deep in an idle sleep looks at the new run's lanes at once.
type wakeFD int

// drainerWake returns the drainer's eventfd, made on first use.
func (in *Installer) drainerWake() wakeFD {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.wakeFD == 0 {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			fd = -1
		}
		in.wakeFD = wakeFD(fd)
	}
	return in.wakeFD
}

// closeDrainerWake closes the drainer's eventfd as it ends; the
// installer writes it no more.
func (in *Installer) closeDrainerWake() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.wakeFD > 0 {
		_ = unix.Close(int(in.wakeFD))
	}
	in.wakeFD = -1
}

// sleep sleeps for d in the kernel (not on a Go timer, which another
// thread of the stub would have to fire first: the kernel wakes this
// thread, whose short slice lets it run at once on a CPU the program's
// threads keep busy), or until woken; it reports whether it was woken.
func (w wakeFD) sleep(d time.Duration) bool {
	ts := unix.NsecToTimespec(int64(d))
	if w < 0 {
		_ = unix.Nanosleep(&ts, nil)
		return false
	}
	fds := []unix.PollFd{{Fd: int32(w), Events: unix.POLLIN}}
	n, err := unix.Ppoll(fds, &ts, nil)
	if err != nil || n == 0 {
		return false
	}
	var buf [8]byte
	_, _ = unix.Read(int(w), buf[:])
	return true
}

// wake wakes the drainer (no-op without an eventfd).
func (w wakeFD) wake() {
	if w > 0 {
		one := [8]byte{1}
		_, _ = unix.Write(int(w), one[:])
	}
}

// nextSleep is the drainer's sleep after one of sleep with no drain:
// twice as long, up to maxBusySleep when the last look found a lane
// written since the one before, up to maxIdleSleep when not.
func nextSleep(sleep time.Duration, moved bool) time.Duration {
	if moved {
		return min(2*sleep, maxBusySleep)
	}
	return min(2*sleep, maxIdleSleep)
}

// drainerSlice is the time slice the drainer's thread asks the kernel's
// fair scheduler for (sched_setattr's sched_runtime, Linux 6.12 and
// later; older kernels ignore it).
const drainerSlice = 100 * time.Microsecond

// shortSlice asks for drainerSlice as the calling thread's slice. Under
// EEVDF a woken thread preempts the running one only if its deadline
// (its slice ahead) comes first, so with the default slice (0.75-3 ms)
// a drainer woken while the program's threads kept every CPU busy
// waited up to 10 ms for a CPU: two threads collecting `$regs` into a
// linear buffer then wrote up to twice the buffer's room before the
// drainer saw it full. A short slice costs nothing in CPU share (the
// weight stays the default's); it only makes the drainer's short looks
// prompt. Failures (an older kernel, seccomp) only cost that.
func shortSlice() {
	_ = unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_NORMAL, Runtime: uint64(drainerSlice)}, 0)
}

// drainDue reports whether the drainer should pass now, since the time
// since its last pass (see the pacing constants). It only tries the
// installer's lock: the installer holds it through each tracepoint's
// installation, and a look that waited for it would, once it had waited
// a millisecond, put the mutex in starvation mode, where every Unlock of
// the installer hands the lock over and yields its CPU (QTStart with
// 1,000 fast tracepoints lost 10 ms to that). A busy lock means the stub
// is changing tracepoints: the next look comes within maxIdleSleep.
func (in *Installer) drainDue(since time.Duration) bool {
	if !in.mu.TryLock() {
		return false
	}
	l := in.lanes
	filled := l != nil && in.bufferFilledLocked(l)
	in.mu.Unlock()
	if l == nil {
		return false
	}
	if filled || load64(l.ctl(), jit.CtlStop) != 0 {
		return true
	}
	in.drainMu.Lock() // backlog looks at the lanes like a drain (populate)
	backlog, moved := l.backlog()
	in.lookMoved.Store(moved)
	in.drainMu.Unlock()
	if backlog == 0 {
		return false
	}
	limit := min(l.laneSize/drainShare, uint64(in.engine.RoomBeforeFull()))
	return backlog >= limit || since >= maxDrainDelay
}

// bufferFilled is bufferFilledLocked with the installer's lock taken.
func (in *Installer) bufferFilled(l *lanes) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.bufferFilledLocked(l)
}

// bufferFilledLocked reports whether the records in the lanes make more
// frame bytes than a linear trace buffer takes in this run; the first
// time, it switches the pads off (the run is over: tfull) and sets
// fullPending, so that the pads stop within one look at the lanes rather
// than once the stub has drained enough to find the buffer full.
func (in *Installer) bufferFilledLocked(l *lanes) bool {
	if in.runRoom == 0 || in.runFull {
		return false
	}
	spent := l.spent()
	if spent+frames.EOBMarkerSize <= in.runRoom {
		l.tightenBudgets(in.runRoom - spent)
		return false
	}
	in.runFull, in.fullPending = true, true
	in.setActiveLocked(false)
	return true
}

// endRunIfFull ends the run with tfull once a full linear buffer's last
// records are in (bufferFilled switched the pads off); more says the
// lanes still hold some.
func (in *Installer) endRunIfFull(more bool) {
	in.mu.Lock()
	full := in.fullPending && !more
	var spent, room uint64
	if full {
		in.fullPending = false
		if in.lanes != nil {
			spent, room = in.lanes.spent(), in.runRoom
		}
	}
	in.mu.Unlock()
	if full {
		in.logf("fast tracepoints: the linear buffer is full: the pads wrote %d bytes of records for its %d bytes of room", spent, room)
		in.engine.FastBufferFull()
	}
}

// drainOnce moves every committed record to the engine and reports
// drops and stops; it returns the number of records. async says the
// caller is the drainer goroutine (the process may be running).
func (in *Installer) drainOnce(async bool) int {
	in.drainMu.Lock()
	defer in.drainMu.Unlock()
	if async {
		// Remove tells its calls from here by the thread (asyncTid).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	in.mu.Lock()
	l := in.lanes
	in.mu.Unlock()
	if l == nil {
		return 0
	}
	in.clock.sample()
	// The stop word first: a pad sets it after committing its last
	// record, so that record is drained before the stop is acted on.
	why, slot := l.takeStop()
	recs, lost, more, err := l.drain(in.drained[:0], false)
	in.drained = recs
	if err != nil && in.stats.errs < 10 {
		in.stats.errs++
		in.logf("fast tracepoints: draining the lanes: %v", err)
	}
	hits := in.resolve(recs)
	if async {
		in.mu.Lock()
		in.asyncTid = unix.Gettid()
		in.mu.Unlock()
	}
	ignored := in.engine.FastHits(hits)
	in.mu.Lock()
	in.stats.ignored += uint64(ignored)
	in.stats.unresolved += uint64(len(recs) - len(hits))
	in.mu.Unlock()
	l.release()
	in.endRunIfFull(more)
	in.reportStop(why, slot)
	in.reportDrops(l, lost)
	in.mu.Lock()
	in.asyncTid = 0
	in.mu.Unlock()
	if more {
		return max(len(recs), 1)
	}
	return len(recs)
}

// resolve turns records into the engine's hits; records of tracepoints
// removed since are dropped.
func (in *Installer) resolve(recs []*RingRecord) []tracing.FastRecord {
	out := in.hits[:0]
	clock := in.clock.snapshot()
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range recs {
		if int(r.TPIndex) >= len(in.bySlot) || in.bySlot[r.TPIndex] == nil {
			continue
		}
		s := in.bySlot[r.TPIndex]
		h := tracing.FastRecord{TP: s.tp, Blocks: r.Blocks, Time: r.Time, Thread: r.Thread,
			When: clock.nanos(r.Time), TraceTime: s.traceTime}
		if r.Flags&jit.RecError != 0 {
			h.Err = fmt.Sprintf("fast tracepoint %d: %s", s.tp.Num, jitErrText(r.ErrCode))
		} else if r.HasRegs() {
			fastRegs(&h, r)
		}
		out = append(out, h)
	}
	in.hits = out
	return out
}

// reportStop tells the engine that a pad stopped tracing (why and slot
// from the control block's stop word), when the records did not already.
func (in *Installer) reportStop(why uint64, slot uint32) {
	if why == 0 {
		return
	}
	in.mu.Lock()
	var s *jumpSite
	if int(slot) < len(in.bySlot) {
		s = in.bySlot[slot]
	}
	in.mu.Unlock()
	if s == nil {
		return
	}
	switch why {
	case jit.StopPassCount:
		in.engine.FastPassCount(s.tp)
	case jit.StopError:
		in.engine.FastHitError(s.tp, fmt.Sprintf("fast tracepoint %d: a condition or collection failed (its error record was dropped)", s.tp.Num))
	}
}

// reportDrops hands new drop counts to the engine (tstatus notes) and
// the debug log.
func (in *Installer) reportDrops(l *lanes, lost uint64) {
	full, noStub := l.dropped()
	in.mu.Lock()
	st := &in.stats
	st.lost += lost
	changed := full != st.full || noStub != st.noStub || lost != 0
	st.full, st.noStub = full, noStub
	total, lostAll := st.full+st.noStub, st.lost
	in.mu.Unlock()
	if !changed {
		return
	}
	in.engine.SetFastDropped(total)
	in.logf("fast tracepoints: %d hits dropped so far (%d: lanes full, the stub fell behind; %d: no stub; %d bytes of abandoned records)", total, full, noStub, lostAll)
}

// StartRun prepares a new experiment (tracing.RunStarter): whatever the
// lanes still hold belongs to the previous one and is discarded, with the
// drop counters and the stop word; tracepoint slots are reused. No
// thread is inside a pad then with a record to commit: stopped ones were
// moved out (Stabilize), running ones are waited for (leavePads; when
// releaseQuarantine looked at their pcs at the start of the same Batch,
// QTStart's, that look may serve).
func (in *Installer) StartRun() {
	in.leavePads()
	in.drainMu.Lock()
	defer in.drainMu.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	if st := in.stats; st.ignored+st.unresolved > 0 {
		in.logf("fast tracepoints: records not stored since the last run started: %d of tracepoints removed since, %d while no run went on (or of tracepoints not installed)", st.unresolved, st.ignored)
	}
	in.stats = dropStats{}
	in.runRoom, in.runFull, in.fullPending = 0, false, false
	if room := in.engine.RoomBeforeFull(); room < math.MaxInt {
		in.runRoom = uint64(room)
	}
	if in.lanes == nil {
		return
	}
	in.lanes.reset()
	in.lanes.setBudget(in.runRoom)
	if len(in.sites) != 0 || len(in.pending) != 0 {
		in.prefaultLocked()
		return
	}
	in.nextSlot = 0
	clear(in.bySlot)
	clear(in.slots)
	if want := in.laneSize(); want > in.lanes.laneSize {
		// gdb asked for a larger trace buffer: larger lanes. No pad
		// refers to the old ones any more (none is placed).
		old := in.lanes
		l, err := mapLanes(in.proc, want)
		if err != nil {
			in.logf("fast tracepoints: keeping %d-byte lanes: %v", old.laneSize, err)
			return
		}
		in.setLanesLocked(l) // the trace state variables move too
		in.prefaultLocked()
		if err := in.proc.Unmap(old.mem); err != nil {
			in.logf("fast tracepoints: %v", err)
		}
		return
	}
	in.prefaultLocked()
}

// drainAll drains until the lanes hold nothing committed (a pass takes at
// most maxDrainBatch records; a running program may keep adding, so it
// stops after the records that were there when it began, roughly).
func (in *Installer) drainAll() {
	for range 1 << 14 {
		if in.drainOnce(false) < maxDrainBatch {
			return
		}
	}
}

// takeLookLocked returns the pcs releaseQuarantine kept (in.look) if
// they may serve leavePads as its first look (ok), and drops them.
func (in *Installer) takeLookLocked() (pcs []uint64, ok bool) {
	pcs, ok = in.look, in.lookOK && in.lookOn == in.switchedOn
	in.look, in.lookOK = nil, false
	if !ok {
		return nil, false
	}
	return pcs, true
}

// padExitLooks bounds how many times leavePads looks for threads inside
// pads, padExitPause apart.
const (
	padExitLooks = 20
	padExitPause = 200 * time.Microsecond
)

// leavePads waits, with threads running (non-stop, live patching), until
// no thread is inside a pad: each look stops every running thread a
// moment for its pc (inferior.Process.AllPCs). A thread there may be in
// the middle of a record of the run that ended, which it would commit
// into a lane StartRun has just reset: a stale frame of the old run in
// the new one (its time older than any other; the live stress test saw
// it standing where the new run's first hits, drained before QTStart had
// started the run and so dropped, should have been, as a "lost hit").
// Stopped threads were moved out of pads already (Stabilize).
//
// Why one look that finds no thread inside is enough, though the threads
// run on until the reset: collection is off (the run is over: the last
// Remove or a pad switched it off), and every pad's first instructions
// leave at once when it is (jit's fastExit, before anything is
// reserved). A thread that enters a pad after the look has no record to
// commit.
//
// The same argument lets the first look be an older one: the pcs
// releaseQuarantine read at the start of this Batch (QTStart's, whose
// first step is StartRun), when it had quarantined memory to free (a
// tstart after a tstop made with threads running): in.look. Then a
// tstart stops the running threads for their pcs once, not twice. That
// look serves when collection was off when it began and has not been
// switched on since (in.lookOn == in.switchedOn; only the stub switches
// it on, setActiveLocked, and pads only switch it off):
//   - a thread it found outside every pad that is inside one now
//     entered it since, with collection off, and writes nothing; so
//     does a thread started since (it starts outside every pad);
//   - a thread it did not see had stopped at an int3 or after a step
//     (AllPCs leaves those out, their pc past the instruction): if the
//     look handled that stop, it sent the thread on from an int3 of the
//     live protocol's, outside every pad, and any pad it is in now it
//     entered since; if not, the thread is still stopped (its stop waits
//     while the Batch holds the ptrace goroutine) and a look now would
//     leave it out too;
//   - the collection word the stub read as 0 before the look is what
//     every thread reads after it: each running one was stopped and
//     resumed by the look (a kernel round trip) or started since.
//
// Should that look have found a thread inside a pad, it counts as the
// first look and the next is taken padExitPause later. The kept look
// lasts only for its Batch (endBatch drops it): the Batch holds the
// process (inferior.Process.Exclusive), so between the two points only
// the Batch's own code runs in the stub, and the jumps it puts in or
// takes out with threads running are patched at its end (inferior
// queues live patches until then).
func (in *Installer) leavePads() {
	if in.proc == nil || !in.proc.ThreadsRunning() {
		return
	}
	in.mu.Lock()
	areas, tails := slices.Clone(in.areas), slices.Clone(in.tails)
	pcs, kept := in.takeLookLocked()
	in.mu.Unlock()
	if len(areas) == 0 {
		return
	}
	// A thread in a pad's tail (its relocated instructions) has
	// committed its record or made none: only pad bodies count. (One
	// held in a stop the Batch cannot handle stays where it is for every
	// look; in a tail it no longer makes them all wait.)
	inPad := func(pc uint64) bool { return inAreas(areas, pc) && !inAreas(tails, pc) }
	for range padExitLooks {
		if !kept {
			var err error
			if pcs, err = in.proc.AllPCs(); err != nil {
				return
			}
		}
		kept = false
		if !slices.ContainsFunc(pcs, inPad) {
			return
		}
		time.Sleep(padExitPause)
	}
	in.logf("fast tracepoints: a thread stays inside a pad at the start of a run: a record of the last run may show in this one")
}
