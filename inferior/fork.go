package inferior

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"golang.org/x/sys/unix"

	"gotpstub/tdesc"
)

// ErrNotForkChild: the pid is not a fork child held by the process.
var ErrNotForkChild = errors.New("inferior: not a held fork child")

// forkChild is a child of fork or vfork (by pid in Process.forks) that is
// held stopped, as traced by this process's ptrace thread, until gdb
// decides what becomes of it.
type forkChild struct {
	vfork bool // it shares its parent's memory
	// reported: Wait has returned its fork event. Until then gdb does
	// not know the child, and ForkChildren does not list it (a thread of
	// an unknown process in gdb's thread list makes gdb take it for a
	// new inferior), as gdbserver hides it too.
	reported bool
}

// markForkReported notes that ev, about to be returned by Wait, tells
// gdb of its fork child.
func (p *Process) markForkReported(ev StopEvent) {
	if c := p.forks[ev.ForkChild]; ev.ForkChild != 0 && c != nil {
		c.reported = true
	}
}

// SetReportForks decides whether fork and vfork are reported to the
// caller (gdb's fork-events and vfork-events) or handled silently.
//
// Silently (the default), a fork child is traced just long enough to take
// our int3s and code patches out of its memory, then detached: it runs
// undebugged (gdb's follow-fork-mode parent without fork events).
//
// Reported, Wait returns a SIGTRAP stop of the forking thread with
// ForkChild set (VFork for vfork) and the child is held stopped: it is not
// one of Threads, but ForkChildren lists it (once Wait has returned its
// fork event) and DetachForkChild,
// KillForkChild or FollowForkChild decide its fate. A fork child's memory
// is cleaned of our int3s and patches at once (so it reads like the
// parent's and can be detached at any time); a vfork child shares its
// parent's memory, which is left alone. A thread whose vfork child has
// exec'd or exited reports a SIGTRAP stop with VForkDone (vfork events
// only).
//
// Turning reporting off does not release children already held.
func (p *Process) SetReportForks(fork, vfork bool) {
	_ = p.do(func() error {
		if p.reportFork == fork && p.reportVFork == vfork {
			return nil
		}
		p.reportFork, p.reportVFork = fork, vfork
		p.optionsGen++ // PTRACE_O_TRACEVFORKDONE follows reportVFork
		for _, t := range p.threads {
			if t.stopped && !t.zombie {
				p.updateOptions(t)
			}
		}
		return nil
	})
}

// DetachForkChildren lets every held fork child go, reported or not
// (gdb went away: nobody would decide for them).
func (p *Process) DetachForkChildren() {
	_ = p.do(func() error {
		p.releaseForks(false)
		return nil
	})
}

// ForkChildren returns the pids of the held fork children whose fork
// event Wait has returned, sorted.
func (p *Process) ForkChildren() []int {
	var out []int
	_ = p.do(func() error {
		for pid, c := range p.forks {
			if c.reported {
				out = append(out, pid)
			}
		}
		return nil
	})
	sort.Ints(out)
	return out
}

// IsForkChild reports whether pid is a held fork child.
func (p *Process) IsForkChild(pid int) bool {
	held := false
	_ = p.do(func() error { _, held = p.forks[pid]; return nil })
	return held
}

// ForkChildRegisters reads the registers of a held fork child.
func (p *Process) ForkChildRegisters(pid int) (*tdesc.Regs, error) {
	var r *tdesc.Regs
	err := p.do(func() error {
		if p.forks[pid] == nil {
			return fmt.Errorf("registers of %d: %w", pid, ErrNotForkChild)
		}
		regs, err := p.getRegs(pid)
		r = regs
		return err
	})
	return r, err
}

// ReadForkChildMemory reads a held fork child's memory. For a fork child
// that is the child's own memory (our int3s were taken out of it when it
// was held); for a vfork child, the memory it shares with the parent, as
// ReadMemory shows it.
func (p *Process) ReadForkChildMemory(pid int, addr uint64, buf []byte) (int, error) {
	var n int
	err := p.do(func() error {
		fc := p.forks[pid]
		if fc == nil {
			return fmt.Errorf("memory of %d: %w", pid, ErrNotForkChild)
		}
		if fc.vfork {
			var err error
			n, err = p.readMemory(addr, buf)
			return err
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
		if err != nil {
			return fmt.Errorf("memory of %d: %w", pid, err)
		}
		defer f.Close()
		n, err = f.ReadAt(buf, int64(addr))
		if n > 0 {
			return nil
		}
		return fmt.Errorf("reading %d bytes at %#x of %d: %w", len(buf), addr, pid, err)
	})
	return n, err
}

// WriteForkChildMemory writes a held fork child's memory: gdb restores
// there what it changed in the parent before the fork (a displaced
// step's scratch bytes) and removes its breakpoints. For a vfork child
// that is the memory it shares with the parent (WriteMemory's).
func (p *Process) WriteForkChildMemory(pid int, addr uint64, data []byte) error {
	return p.do(func() error {
		fc := p.forks[pid]
		if fc == nil {
			return fmt.Errorf("memory of %d: %w", pid, ErrNotForkChild)
		}
		if fc.vfork {
			return p.writeMemory(addr, data)
		}
		f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("memory of %d: %w", pid, err)
		}
		defer f.Close()
		if _, err := f.WriteAt(data, int64(addr)); err != nil {
			return fmt.Errorf("writing %d bytes at %#x of %d: %w", len(data), addr, pid, err)
		}
		return nil
	})
}

// SetForkChildRegisters writes the registers of a held fork child.
func (p *Process) SetForkChildRegisters(pid int, r *tdesc.Regs) error {
	return p.do(func() error {
		if p.forks[pid] == nil {
			return fmt.Errorf("registers of %d: %w", pid, ErrNotForkChild)
		}
		return p.setRegs(pid, r)
	})
}

// DetachForkChild lets a held fork child run undebugged.
func (p *Process) DetachForkChild(pid int) error {
	return p.do(func() error {
		if p.forks[pid] == nil {
			return fmt.Errorf("detach %d: %w", pid, ErrNotForkChild)
		}
		return p.detachForkChild(pid)
	})
}

// detachForkChild forgets a held child and lets it run.
func (p *Process) detachForkChild(pid int) error {
	delete(p.forks, pid)
	if err := ptraceDetach(pid, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("detach fork child %d: %w", pid, err)
	}
	return nil
}

// KillForkChild kills a held fork child and reaps it.
func (p *Process) KillForkChild(pid int) error {
	return p.do(func() error {
		if p.forks[pid] == nil {
			return fmt.Errorf("kill %d: %w", pid, ErrNotForkChild)
		}
		p.killForkChild(pid)
		return nil
	})
}

func (p *Process) killForkChild(pid int) {
	delete(p.forks, pid)
	_ = unix.Kill(pid, unix.SIGKILL)
	for {
		_, ws, err := wait4(pid, 0)
		if err != nil || ws.Exited() || ws.Signaled() {
			return
		}
		if isExitEvent(ws) || ws.Stopped() {
			_ = ptraceCont(pid, 0)
		}
	}
}

// releaseForks lets every held fork child go: detached, or killed with
// kill.
func (p *Process) releaseForks(kill bool) {
	for pid := range p.forks {
		if kill {
			p.killForkChild(pid)
		} else {
			_ = p.detachForkChild(pid)
		}
	}
}

// FollowForkChild makes the held fork child pid the debugged process
// (gdb's follow-fork-mode child, or detaching the parent of a child kept
// with detach-on-fork off): the parent is detached as Detach does (our
// breakpoints, traps and code patches taken out of its memory, queued
// signals delivered), every other held child is detached, and from then on
// this Process is the child: Pid, Threads, memory and registers are the
// child's, stopped where it forked. The child's memory holds none of our
// breakpoints or patches (a vfork child's shared memory was cleaned with
// the parent's); the caller inserts what it wants again. Hooks stay set;
// the parent's queued events are dropped. A launched parent's child is
// killed at Close like a launched program.
func (p *Process) FollowForkChild(pid int) error {
	return p.do(func() error {
		if p.forks[pid] == nil {
			return fmt.Errorf("follow %d: %w", pid, ErrNotForkChild)
		}
		if p.exitEvent != nil {
			return ErrExited
		}
		delete(p.forks, pid)
		err := p.detachThreads()
		p.releaseForks(false)
		p.pid = pid
		p.attached = false
		p.threads = map[int]*thread{pid: {tid: pid, stopped: true, optionsGen: p.optionsGen - 1}}
		p.orphans = map[int]bool{}
		p.pending = nil
		p.sigs().threads = map[int]*threadSignals{}
		p.stopping = false
		p.swbps = map[uint64]*swBreakpoint{}
		p.patches = newPatchSet()
		p.debugRegs = debugRegisters{}
		p.drGen++
		p.updateTids()
		p.consumeInterrupt()
		if merr := p.openMem(); merr != nil && err == nil {
			err = merr
		}
		return err
	})
}

// forkChildStopped returns the pid of the child t's fork or vfork event
// announced, once the child is in its first ptrace-stop. ok is false if
// the child is already gone.
func (p *Process) forkChildStopped(t *thread) (int, bool) {
	msg, err := unix.PtraceGetEventMsg(t.tid)
	if err != nil {
		return 0, false
	}
	child := int(msg)
	if p.orphans[child] {
		delete(p.orphans, child)
		return child, true
	}
	for {
		// Its first stop may have been collected already by a wait for
		// any status (waitLive's, with other threads running).
		ws, taken := p.takeStashedStatus(child)
		var err error
		if !taken {
			_, ws, err = wait4(child, 0)
		}
		if err != nil || ws.Exited() || ws.Signaled() {
			return 0, false
		}
		if ws.Stopped() {
			return child, true
		}
	}
}

// onForkEvent handles t's fork or vfork event. It returns true when the
// event is reported (queued, the child held, t left stopped) and false
// when the child was let go and t may continue.
func (p *Process) onForkEvent(t *thread, vfork bool) bool {
	child, ok := p.forkChildStopped(t)
	if !ok {
		return false
	}
	if !vfork {
		p.cleanForkChild(child)
	}
	if (vfork && p.reportVFork) || (!vfork && p.reportFork) {
		p.forks[child] = &forkChild{vfork: vfork}
		p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP), ForkChild: child, VFork: vfork})
		return true
	}
	_ = ptraceDetach(child, 0)
	return false
}

// cleanForkChild writes the original bytes under our breakpoints and code
// patches into a fork child's memory: it inherited them and would die of
// SIGTRAP on an int3, or jump into a pad whose ring nobody reads. A vfork
// child shares its parent's memory, so this is never done for one (it
// usually execs at once).
func (p *Process) cleanForkChild(child int) {
	if len(p.swbps) == 0 && len(p.patches.byAddr) == 0 {
		return
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", child), os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	for addr, bp := range p.swbps {
		if bp.inserted {
			_, _ = f.WriteAt(bp.orig[:], int64(addr))
		}
	}
	// Code patches after the breakpoints: under a patch a breakpoint's
	// saved byte is the patch's.
	for addr, c := range p.patches.byAddr {
		_, _ = f.WriteAt(c.orig, int64(addr))
	}
}

// onVForkDone handles t's PTRACE_EVENT_VFORK_DONE: reported when vfork
// events are. It returns true when the event was queued.
func (p *Process) onVForkDone(t *thread) bool {
	if !p.reportVFork {
		return false
	}
	p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP), VForkDone: true})
	return true
}
