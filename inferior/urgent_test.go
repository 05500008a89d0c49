package inferior

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUrgently: a flush raises the calling thread's weight to nice
// urgentNice and puts the old value back.
func TestUrgently(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	nice := func() int {
		raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			t.Fatal(err)
		}
		return 20 - raw
	}
	before := nice()
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, urgentNice); err != nil {
		t.Skipf("cannot lower this thread's nice value (not root?): %v", err)
	}
	_ = unix.Setpriority(unix.PRIO_PROCESS, tid, before)
	restore := urgently(tid)
	if got := nice(); got != urgentNice {
		t.Errorf("nice %d during the flush, want %d", got, urgentNice)
	}
	restore()
	if got := nice(); got != before {
		t.Errorf("nice %d after, want %d as before", got, before)
	}
}
