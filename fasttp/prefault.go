package fasttp

// prepareLanes maps the shared control block and lanes (ensureCtlLocked:
// the injected memfd_create, ftruncate and mmap, the drainer started, the
// stopped threads' lanes claimed and prepared) in the background when gdb
// defines a fast tracepoint and none are mapped, while gdb downloads the
// rest of the experiment, instead of inside QTStart (half a millisecond
// of a 100-tracepoint QTStart's 1.7 ms). It does so only while a thread
// is stopped to make the injected calls (all-stop mode, or a thread gdb
// stopped in non-stop mode): holding a running thread for them is left
// to QTStart, which has to anyway. The mapping uses the trace buffer
// size known then; a larger one gdb sends before QTStart gets larger
// lanes there (StartRun). A failure is logged, and QTStart tries again.
func (in *Installer) prepareLanes() {
	in.mu.Lock()
	start := in.lanes == nil && !in.lanesPreparing && in.proc != nil
	in.lanesPreparing = in.lanesPreparing || start
	in.mu.Unlock()
	if !start {
		return
	}
	go func() {
		defer func() {
			in.mu.Lock()
			in.lanesPreparing = false
			in.mu.Unlock()
		}()
		// The ptrace goroutine first, then the lock: a Batch's order.
		_ = in.proc.Exclusive(func() {
			if !in.proc.HasStoppedThread() {
				return
			}
			in.mu.Lock()
			defer in.mu.Unlock()
			if err := in.ensureCtlLocked(); err != nil {
				in.logf("fast tracepoints: mapping the lanes ahead of tstart: %v", err)
			}
		})
	}()
}

// prefaultBudget bounds the lane bytes prefaultLocked has the process map
// in advance, all lanes together.
const prefaultBudget = 128 << 20

// prefaultLocked prepares the lanes for a run: it claims a lane for
// each stopped thread of the process (by its thread pointer, where the
// pads' search finds it; entries of threads gone are freed; running
// threads' pads claim theirs at their first hit) and asks the drainer to
// allocate the first startAhead bytes of those lanes and have the
// process map them (lanes.startWant, up to prefaultBudget in all), which
// it does at its next look, woken here: while the stub places the jumps
// and gdb's next packets travel, the program still stopped in all-stop
// mode, and without holding any thread in non-stop mode. A page a pad
// touches first costs the program a page fault, 1-3.8 µs on the VMs
// measured (bench/README.md), 5-10 ns per hit over a lane's first lap
// with small records; with the pages mapped the program pays only for
// the writes. Having the process map them here (an injected madvise
// MADV_POPULATE_WRITE) took 1.4 ms of a 100-tracepoint QTStart's 3 ms,
// and held a running thread that long in non-stop mode. A program whose
// writing threads start before the drainer is done, on every CPU, take
// the faults of the pages it has not reached yet (lanes.populate).
func (in *Installer) prefaultLocked() {
	l := in.lanes
	if l == nil || in.proc == nil { // no process: unit tests' lanes
		return
	}
	var used []int
	if in.fsBase || in.tpLoad {
		l.clearOwners()
		for _, tid := range in.proc.Threads() {
			tp, err := in.proc.ThreadPointer(tid)
			if err != nil {
				continue
			}
			if tp != 0 {
				if lane, ok := l.claim(tp); ok {
					used = append(used, lane)
				}
			}
		}
	}
	if len(used) == 0 {
		used = []int{ownedLanes} // every hit goes to the shared lane
	}
	per := min(l.laneSize, startAhead, prefaultBudget/uint64(len(used))) &^ 4095
	clear(l.startWant)
	for _, lane := range used {
		l.startWant[lane] = per
	}
	l.busy = false // a new run: the last one's writers are no guide
	in.wakeFD.wake()
}

// startAhead is how much of each owned lane prefaultLocked has the
// process map: what a tight loop writes before the drainer's first look
// (woken at the run's start: within 500 µs; about 0.5 MB of small
// records), twice over.
const startAhead = 1 << 20

// spareHead is how much of each lane no thread owns yet the drainer has
// the process map (populateAhead): a thread started after tstart, which
// claims its lane at its first hit when its start came before the run's
// (threadStarted prepares the lanes of threads started during the run),
// then writes its first records without page faults while the drainer
// has not yet seen it. About 60 records of a kilobyte
// (collect $regs with the vector state), 8,192 compact ones. All 17
// lanes' take 1-2 ms of the drainer's first look.
const spareHead = 64 << 10
