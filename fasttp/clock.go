package fasttp

import (
	"sync"
	"time"
)

// tscClock turns the counter values in the pads' records (the
// time-stamp counter; on arm64 the virtual counter, cntvct_el0) into
// nanoseconds since the Unix epoch: the stub reads the counter and the
// clock together when it starts and before each drain (the counter is
// the same for every process on the machine: constant and synchronised
// across CPUs on the x86-64 machines Linux trusts it on, and so by the
// architecture on arm64), and maps a value linearly from its first
// reading. The x86-64 rate is measured between the first and the latest
// readings; the arm64 one is cntfrq_el0's (counterPeriod).
type tscClock struct {
	mu     sync.Mutex
	c0     uint64 // counter at t0
	t0     time.Time
	perTSC float64 // nanoseconds per counter tick; 0 until two readings apart
	fixed  bool    // perTSC is the architecture's (counterPeriod): not measured
}

// minCalibration is how far apart the readings must be before their
// ratio is used (a shorter interval gives a poor rate).
const minCalibration = 10 * time.Millisecond

func newTSCClock() *tscClock {
	c := &tscClock{c0: rdtsc(), t0: time.Now(), perTSC: counterPeriod()}
	c.fixed = c.perTSC != 0
	return c
}

// sample takes a new reading and updates the rate.
func (c *tscClock) sample() {
	if c == nil || c.fixed {
		return
	}
	now, tsc := time.Now(), rdtsc()
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := now.Sub(c.t0); d >= minCalibration && tsc > c.c0 {
		c.perTSC = float64(d.Nanoseconds()) / float64(tsc-c.c0)
	}
}

// tscMap is a tscClock's mapping at one moment, for converting a batch
// of records without taking its lock for each.
type tscMap struct {
	c0     uint64
	t0     int64
	perTSC float64
	now    int64 // the time of the snapshot, said while the rate is unknown
}

// snapshot returns the current mapping.
func (c *tscClock) snapshot() tscMap {
	if c == nil { // no reading: every record is said to be from now
		return tscMap{now: time.Now().UnixNano()}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return tscMap{c0: c.c0, t0: c.t0.UnixNano(), perTSC: c.perTSC, now: time.Now().UnixNano()}
}

// nanos converts a counter value; before the rate is known (or without a
// counter) it says the time of the snapshot.
func (m tscMap) nanos(tsc uint64) int64 {
	if m.perTSC == 0 || tsc == 0 {
		return m.now
	}
	return m.t0 + int64(float64(int64(tsc-m.c0))*m.perTSC)
}
