// Package prio raises the scheduling weight of the stub's threads that
// gdb or a stopped program waits for. A traced program whose threads
// keep every CPU busy would otherwise get most of the CPU time at the
// same nice value, and the stub's answers would wait for it: gdb gives
// up on a packet after its remote timeout (2 s by default), and a thread
// stopped for a live patch stays stopped as long as the stub waits.
//
// Raise lowers a thread's nice value; Realtime puts a thread in the
// SCHED_FIFO class for a moment: the stub's ptrace thread while it
// patches code live, and a thread of the program from the SIGSTOP the
// stub sends it to its stop (inferior/livepatch.go), never while the
// program's own code runs.
//
// Raising needs root or CAP_SYS_NICE; without them nothing changes.
package prio

import "golang.org/x/sys/unix"

// UrgentNice is the nice value of a raised thread.
const UrgentNice = -10

// Raise gives thread tid the CPU weight of nice UrgentNice, when the
// stub may and the thread has less, and returns what puts its old value
// back (nothing to do when it did not change).
func Raise(tid int) (restore func()) {
	old, err := Nice(tid)
	if err != nil || old <= UrgentNice || unix.Setpriority(unix.PRIO_PROCESS, tid, UrgentNice) != nil {
		return func() {}
	}
	return func() { _ = unix.Setpriority(unix.PRIO_PROCESS, tid, old) }
}

// Nice returns thread tid's nice value.
func Nice(tid int) (int, error) {
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return 0, err
	}
	return 20 - raw, nil // the system call returns 20 - nice
}

// Realtime puts thread tid in the SCHED_FIFO class at the lowest
// real-time priority, when the stub may and the thread is not real-time
// already, and returns what puts its old policy and nice value back.
// A real-time thread runs as soon as it is runnable, ahead of every
// ordinary thread: for the moments a thread of the program waits, stopped,
// for the stub (patching live), whatever the program's other threads
// keep the CPUs busy with. The kernel's real-time throttling (95% of each
// second by default) bounds what a runaway real-time thread could take.
func Realtime(tid int) (restore func()) {
	old, err := unix.SchedGetAttr(tid, 0)
	if err != nil || old.Policy != unix.SCHED_NORMAL {
		return func() {}
	}
	// Threads the thread creates meanwhile (a Go runtime thread started
	// from the stub's, a clone of the program's) do not inherit it.
	rt := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1, Flags: unix.SCHED_FLAG_RESET_ON_FORK}
	if unix.SchedSetAttr(tid, &rt, 0) != nil {
		return func() {}
	}
	return func() {
		back := *old
		back.Size = unix.SizeofSchedAttr
		_ = unix.SchedSetAttr(tid, &back, 0)
	}
}
