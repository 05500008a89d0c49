package fasttp

// prefaultBudget bounds the lane bytes prefaultLocked has the process map
// in advance, all lanes together.
const prefaultBudget = 128 << 20

// prefaultLocked prepares the lanes for a run while every thread is
// stopped: it claims a lane for each thread of the process (by its thread
// pointer, where the pads' search finds it; entries of threads gone are
// freed) and has the process map the first startAhead bytes of those
// lanes (inferior.Populate), up to prefaultBudget in all. The drainer,
// which a run's start wakes, then keeps pages mapped ahead
// of each lane's head and gives the lanes no thread owns yet their first
// spareHead bytes (lanes.populate), unless the program's writing threads
// take every CPU. A page a pad touches first costs the program a page
// fault, 1-3.8 µs on the VMs measured (bench/README.md), 5-10 ns per hit
// over a lane's first lap with small records; with the pages mapped the
// program pays only for the writes. Mapping every lane's first megabyte and whole
// owned lanes here, as before, made tstart 15-25 ms longer. Failures only
// cost speed: they are logged.
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
	want := make([]uint64, len(l.tails))
	for _, lane := range used {
		want[lane] = per
	}
	for lane, n := range want {
		if l.mapped[lane] >= n {
			continue
		}
		if err := in.proc.Populate(l.mem, l.dataOff(lane)+l.mapped[lane], n-l.mapped[lane]); err != nil {
			in.logf("fast tracepoints: mapping lane %d ahead: %v", lane, err)
			return
		}
		l.mapped[lane] = n
		l.populated[lane] = max(l.populated[lane], n)
	}
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
// (collect $regs with the vector state), 8,192 compact ones. All 65
// lanes' take 1-2 ms of the drainer's first look.
const spareHead = 64 << 10
