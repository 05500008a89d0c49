package fasttp

import (
	"gotpstub/tdesc"
)

// prefaultBudget bounds the lane bytes prefaultLocked has the process map
// in advance, all lanes together.
const prefaultBudget = 128 << 20

// prefaultLocked prepares the lanes for a run while every thread is
// stopped: it claims a lane for each thread of the process (by its thread
// pointer, where the pads' search finds it; entries of threads gone are
// freed) and has the process map those lanes' pages (inferior.Populate),
// up to prefaultBudget in all. A page a pad touches first costs the
// program a page fault, 1-2.5 µs here, about 10 ns per hit over a lane's
// first lap with small records; with the pages mapped the program pays
// only for the writes. Threads started later claim lanes themselves, and
// their pages fault in (the drainer allocates them ahead). Failures only
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
			regs, err := in.proc.Registers(tid)
			if err != nil {
				continue
			}
			if fs := regs.Uint64(tdesc.FSBASE); fs != 0 {
				if lane, ok := l.claim(fs); ok {
					used = append(used, lane)
				}
			}
		}
	}
	if len(used) == 0 {
		used = []int{ownedLanes} // every hit goes to the shared lane
	}
	per := min(l.laneSize, prefaultBudget/uint64(len(used))) &^ 4095
	for _, lane := range used {
		if l.mapped[lane] >= per {
			continue
		}
		if err := in.proc.Populate(l.mem, l.dataOff(lane)+l.mapped[lane], per-l.mapped[lane]); err != nil {
			in.logf("fast tracepoints: mapping lane %d ahead: %v", lane, err)
			return
		}
		l.mapped[lane] = per
		l.populated[lane] = max(l.populated[lane], per)
	}
}
