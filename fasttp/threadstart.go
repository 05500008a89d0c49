package fasttp

import (
	"sync"
	"time"

	"gotpstub/inferior"
	"gotpstub/jit"
)

// DefaultThreadAhead is how much of a new thread's lane threadStarted
// has allocated and mapped before the thread runs, unless
// SetThreadLaneAhead says otherwise: what a tight loop of
// compact records writes in its first 10-20 ms, or 3,500 `collect $regs`
// records. It costs the new thread's start 2.5-4 ms here (1,024 pages
// at 2.4-3.8 µs), once per lane: a lane keeps its pages for the next
// thread that claims it.
const DefaultThreadAhead = 4 << 20

// SetThreadLaneAhead sets how many bytes of a new thread's lane the
// stub allocates and maps before the thread runs (rounded down to
// pages; 0: none, the thread starts at once and its pads fault the
// lane's pages in).
func (in *Installer) SetThreadLaneAhead(n uint64) {
	in.mu.Lock()
	in.threadAhead = n
	in.mu.Unlock()
}

// threadStarted is the process's thread start hook (on the ptrace
// goroutine, the new thread stopped before its first instruction). While
// a run collects, it claims the thread's lane now and has its first
// in.threadAhead bytes (no more than the run's linear buffer takes)
// allocated and mapped in the process, so that the thread's first lap
// takes no page faults. Left to the pads and the drainer, that lap cost
// every thread a fault per 4 KiB whenever the program's threads kept
// every CPU busy (the drainer then leaves the pages to them: its work
// would take their CPU): two threads paid 1.5-1.65 times one thread's
// cost per hit. Here the cost moves to the thread's start, where the
// program's other threads do not wait for it. The hook waits for the
// locks no longer than hookLockWait: a drain or an installation that
// holds them longer leaves the lane to the drainer, as before.
func (in *Installer) threadStarted(s *inferior.Stopped) {
	if !tryLockFor(&in.drainMu, hookLockWait) {
		return
	}
	defer in.drainMu.Unlock()
	if !tryLockFor(&in.mu, hookLockWait) {
		return
	}
	defer in.mu.Unlock()
	l := in.lanes
	if l == nil || l.pid == 0 || load64(l.ctl(), jit.CtlActive) == 0 || !(in.fsBase || in.tpLoad) {
		return
	}
	// A thread starting while a run collects may start hitting at once:
	// the drainer, perhaps deep in an idle sleep, looks again soon.
	defer in.wakeFD.wake()
	tp, err := s.ThreadPointer()
	if err != nil || tp == 0 {
		return
	}
	lane, ok := l.claim(tp)
	if !ok {
		return // every owned lane is taken: the shared one
	}
	want := min(l.laneSize, in.threadAhead) &^ 4095
	if want == 0 {
		return
	}
	if in.runRoom > 0 {
		want = min(want, (in.runRoom+4095)&^4095)
	}
	if l.totalPopulated()+want > prefaultBudget {
		return
	}
	l.prepare(lane, want)
}

// hookLockWait is how long the thread start hook waits for a lock a
// drain or an installation holds: a drain is over in well under a
// millisecond, but one that waits for the ptrace goroutine (a full
// buffer ending the run) never ends while the hook holds that goroutine,
// so the hook gives up after this and leaves the lane to the drainer.
// Giving up at once left a thread's lane unprepared whenever it started
// during a drain (TestFastTraceLanesReadyAtThreadStart failed 1 run in
// 10-40).
const hookLockWait = 2 * time.Millisecond

// tryLockFor tries to lock mu for up to d, and reports whether it did.
func tryLockFor(mu *sync.Mutex, d time.Duration) bool {
	if mu.TryLock() {
		return true
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Microsecond)
		if mu.TryLock() {
			return true
		}
	}
	return false
}

// totalPopulated is the lane bytes allocated so far, all lanes together.
func (l *lanes) totalPopulated() uint64 {
	var n uint64
	for _, p := range l.populated {
		n += p
	}
	return n
}

// prepare allocates lane i's first n bytes (those not allocated yet) and
// has the process map all n.
func (l *lanes) prepare(i int, n uint64) {
	l.allocate(i, n)
	l.mapInProcess(i, 0, n)
}
