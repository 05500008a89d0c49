package fasttp

// rdtsc reads the time-stamp counter, as the pads do.
func rdtsc() uint64
