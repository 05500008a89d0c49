package prio

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRaise: Raise gives the thread nice UrgentNice and its restore
// function puts the old value back; a thread already at UrgentNice or
// higher is left as it is.
func TestRaise(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	nice := func() int {
		n, err := Nice(tid)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := nice()
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, UrgentNice); err != nil {
		t.Skipf("cannot lower this thread's nice value (not root?): %v", err)
	}
	_ = unix.Setpriority(unix.PRIO_PROCESS, tid, before)
	restore := Raise(tid)
	if got := nice(); got != UrgentNice {
		t.Errorf("nice %d raised, want %d", got, UrgentNice)
	}
	again := Raise(tid) // already raised: no change, nothing to put back
	again()
	if got := nice(); got != UrgentNice {
		t.Errorf("nice %d after a second Raise's restore, want %d", got, UrgentNice)
	}
	restore()
	if got := nice(); got != before {
		t.Errorf("nice %d after, want %d as before", got, before)
	}
}

// TestRealtime: Realtime makes the thread SCHED_FIFO and its restore
// function puts the old policy and nice value back; a real-time thread
// is left as it is.
func TestRealtime(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	attr := func() *unix.SchedAttr {
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	before := attr()
	restore := Realtime(tid)
	if got := attr(); got.Policy != unix.SCHED_FIFO {
		defer restore()
		t.Skipf("cannot make this thread real-time (not root?): policy %d", got.Policy)
	}
	again := Realtime(tid) // real-time already: nothing to put back
	again()
	if got := attr(); got.Policy != unix.SCHED_FIFO {
		t.Errorf("policy %d after a second Realtime's restore, want SCHED_FIFO", got.Policy)
	}
	restore()
	if got := attr(); got.Policy != before.Policy || got.Nice != before.Nice {
		t.Errorf("policy %d nice %d after, want %d and %d as before", got.Policy, got.Nice, before.Policy, before.Nice)
	}
}

// TestRealtimeNotInherited: a process started from a thread made
// real-time runs in the normal class (SCHED_FLAG_RESET_ON_FORK), as do
// threads created from it (a Go runtime thread, a program's clone).
func TestRealtimeNotInherited(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	restore := Realtime(unix.Gettid())
	defer restore()
	if a, err := unix.SchedGetAttr(unix.Gettid(), 0); err != nil || a.Policy != unix.SCHED_FIFO {
		t.Skip("cannot make this thread real-time (not root?)")
	}
	// The child is forked from this locked thread.
	out, err := exec.Command("sh", "-c", "cat /proc/self/sched | grep -m1 policy").CombinedOutput()
	if err != nil {
		t.Skipf("no shell: %v", err)
	}
	if !strings.Contains(string(out), " 0") { // SCHED_NORMAL
		t.Errorf("child's %s, want policy 0 (SCHED_NORMAL)", strings.TrimSpace(string(out)))
	}
}
