package inferior

// FaultHook decides what becomes of a thread stopped by SIGSEGV or SIGBUS:
// given the thread, its pc, the signal and the faulting data address
// (siginfo's si_addr; 0 for a general-protection fault such as a
// non-canonical address), it returns the pc to continue from and true, or
// false to let the signal be handled as usual (reported to gdb).
type FaultHook func(tid int, pc uint64, sig int, addr uint64) (newPC uint64, ok bool)

// SetFaultHook sets the function consulted first whenever a thread stops
// with SIGSEGV or SIGBUS raised by a fault (not one sent by kill, tgkill
// or sigqueue) (nil: none). It runs on the ptrace goroutine. When
// it returns ok the thread's pc is set to newPC and the thread continues
// as it was resumed, the signal suppressed and nothing reported to gdb;
// a thread gdb was single-stepping reports the end of its step there
// instead. This lets code the stub put into the process (jump pads doing
// plain loads of memory gdb asked to collect) recover from a bad address
// instead of killing the program.
func (p *Process) SetFaultHook(h func(tid int, pc uint64, sig int, addr uint64) (newPC uint64, ok bool)) {
	_ = p.do(func() error { p.faultHook = h; return nil })
}

// fixFault runs the fault hook for t, stopped by sig, and moves its pc
// when the hook takes the fault. It reports whether the fault is dealt
// with (the signal is then not to be delivered).
func (p *Process) fixFault(t *thread, sig int) bool {
	if p.faultHook == nil {
		return false
	}
	si, err := getSiginfo(t.tid)
	if err != nil || int(si.Signo) != sig {
		return false
	}
	if si.Code == siUser || si.Code == siTkill || si.Code == siQueue {
		return false // sent by kill/tgkill/sigqueue: not a fault
	}
	pc, err := getPC(t.tid)
	if err != nil {
		return false
	}
	newPC, ok := p.faultHook(t.tid, pc, sig, si.Addr)
	if !ok {
		return false
	}
	if err := setPC(t.tid, newPC); err != nil {
		return false
	}
	return true
}

// siQueue is SI_QUEUE (sigqueue) in si_code.
const siQueue = -1
