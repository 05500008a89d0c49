package inferior

// SetThreadStartHook sets the function run when a thread the program
// creates (clone, traced through PTRACE_O_TRACECLONE) first stops, before
// it runs its first instruction (nil: none, the default). The hook runs on
// the ptrace goroutine with a *Stopped for the new thread: its Registers
// (the thread pointer the clone gave it included), ReadMemory and
// WriteMemory work, but it must not step the thread nor call Process
// methods (they would run re-entrantly in the middle of event handling).
// The thread is resumed after the hook as without one, so whatever time
// the hook takes delays that thread's start alone; the other threads run
// on meanwhile.
func (p *Process) SetThreadStartHook(h func(s *Stopped)) {
	_ = p.do(func() error { p.startHook = h; return nil })
}

// threadStarted runs the start hook for t, a new thread at its first stop.
func (p *Process) threadStarted(t *thread) {
	if !t.fresh {
		return
	}
	t.fresh = false
	if p.startHook == nil || p.inHook {
		return
	}
	p.inHook = true
	p.startHook(&Stopped{p: p, t: t})
	p.inHook = false
}
