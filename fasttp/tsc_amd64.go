package fasttp

import (
	"sync"
	"time"
)

// rdtsc reads the time-stamp counter, the clock the pads stamp records
// with and compare the lease against.
func rdtsc() uint64

// tscPerSecond is the time-stamp counter's rate, measured once against
// the monotonic clock (the counter is invariant on the CPUs the kernel
// marks constant_tsc/nonstop_tsc, which every x86-64 of the last decade is).
var tscPerSecond = sync.OnceValue(func() uint64 {
	t0, c0 := time.Now(), rdtsc()
	time.Sleep(20 * time.Millisecond)
	c1, t1 := rdtsc(), time.Now()
	ns := t1.Sub(t0).Nanoseconds()
	if ns <= 0 || c1 <= c0 {
		return 1e9
	}
	return uint64(float64(c1-c0) * 1e9 / float64(ns))
})
