package fasttp

// rdtsc reads the virtual counter (cntvct_el0), as the arm64 pads do for
// a record's time.
func rdtsc() uint64

// cntfrq reads cntfrq_el0, the virtual counter's frequency in Hz.
func cntfrq() uint64
