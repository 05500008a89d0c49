package inferior

import (
	"runtime"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"gotpstub/prio"
)

// In non-stop mode the ptrace goroutine cannot block in wait4 (gdb's
// requests come while threads run) and used to learn of a tracee's stop
// from SIGCHLD alone: the runtime's signal handler wakes os/signal's
// goroutine on whatever thread of the stub is free, at the stub's normal
// priority, which then wakes the ptrace goroutine. With the program's
// threads busy on every CPU that thread waited for a CPU for
// milliseconds, and the stopped thread with it: the kernel's scheduler
// trace (e2e's TestNonStopTraceWhileRunning) showed threads stopped at
// an int3 just after a flush, or at a trap tracepoint, served 2-10 ms
// later. statusWaiter is a thread of its own, raised (prio.Raise),
// blocked in waitid until some tracee has a status: it wakes the ptrace
// goroutine directly. SIGCHLD stays as the safety net it was.
//
// waitid without __WNOTHREAD sees every child of the stub's and every
// tracee of any of its threads, and returns the first it finds: a child
// that is no tracee of this Process (an os/exec child exited and not yet
// reaped, another Process's tracee when fork children are debugged as
// processes of their own) hides this Process's statuses behind it until
// it is collected. The waiter then wakes the ptrace goroutine once a
// statusWaiterBackoff, and SIGCHLD wakes it too.

// statusWaiterBackoff is how long statusWaiter waits before it reports
// a status that is not of one of this Process's threads (a child of the
// stub's that is no tracee, a fork child's first stop), which waitid
// without __WNOTHREAD sees too and the ptrace goroutine may not collect.
const statusWaiterBackoff = time.Millisecond

// chldInfo is the siginfo a waitid fills in for a child: unix.Siginfo's
// layout with the fields of SIGCHLD's, the same on x86-64 and arm64.
type chldInfo struct {
	Signo, Errno, Code, _ int32
	Pid, UID, Status      int32
	_                     [100]byte
}

var _ [unsafe.Sizeof(unix.Siginfo{}) - unsafe.Sizeof(chldInfo{})]struct{} // same size
var _ [unsafe.Sizeof(chldInfo{}) - unsafe.Sizeof(unix.Siginfo{})]struct{}

// peekStatus blocks until a child or tracee of the stub has a status and
// returns who and which, leaving it to be collected (WNOWAIT).
func peekStatus() (chldInfo, error) {
	var ci chldInfo
	for {
		err := unix.Waitid(unix.P_ALL, 0, (*unix.Siginfo)(unsafe.Pointer(&ci)),
			unix.WSTOPPED|unix.WEXITED|unix.WALL|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return ci, err
		}
	}
}

// startStatusWaiter starts statusWaiter once.
func (p *Process) startStatusWaiter() {
	if p.statusWake != nil {
		return
	}
	p.statusWake = make(chan struct{}, 1)
	p.statusTaken = make(chan struct{}, 1)
	go p.statusWaiter()
}

// statusWaiter wakes the ptrace goroutine (statusWake) whenever a status
// is there to collect, in non-stop mode, and waits for it to say it
// drained (statusTaken) before it looks again. A status that is not of
// one of the Process's threads is reported only after
// statusWaiterBackoff, slept on this raised thread (a Go timer would
// wait for a thread of the stub's at normal priority to run it).
func (p *Process) statusWaiter() {
	runtime.LockOSThread() // never unlocked: the thread ends with it
	prio.Raise(unix.Gettid())
	for {
		if !p.nonStopFlag.Load() {
			// All-stop: the ptrace goroutine blocks in wait4 itself.
			if p.waitOrDone(10 * time.Millisecond) {
				return
			}
			continue
		}
		ci, err := peekStatus()
		if err != nil {
			// No child (the process is gone) or a failure: look again
			// later, unless the Process is closed.
			if p.waitOrDone(10 * time.Millisecond) {
				return
			}
			continue
		}
		if !p.isThread(int(ci.Pid)) {
			ts := unix.NsecToTimespec(statusWaiterBackoff.Nanoseconds())
			_ = unix.Nanosleep(&ts, nil)
		}
		p.waiterWakes.Add(1)
		select {
		case p.statusWake <- struct{}{}:
		default:
		}
		select {
		case <-p.statusTaken:
		case <-p.done:
			return
		}
	}
}

// isThread reports whether tid is one of the Process's live threads (the
// snapshot updateTids keeps).
func (p *Process) isThread(tid int) bool {
	p.tidsMu.Lock()
	defer p.tidsMu.Unlock()
	return slices.Contains(p.tids, tid)
}

// waitOrDone sleeps d and reports whether the Process was closed.
func (p *Process) waitOrDone(d time.Duration) bool {
	select {
	case <-time.After(d):
		return false
	case <-p.done:
		return true
	}
}

// drainForWaiter is the ptrace goroutine's answer to statusWake: drain,
// then tell statusWaiter it may look again.
func (p *Process) drainForWaiter() {
	p.drain()
	select {
	case p.statusTaken <- struct{}{}:
	default:
	}
}
