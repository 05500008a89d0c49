package inferior

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// schedClocks keeps each thread's /proc/PID/task/TID/schedstat open: a
// flush reads it whenever it stops a thread or sends one on, and opening
// the file each time took three system calls (os.ReadFile 20-100 µs).
// Owned by the ptrace goroutine.
type schedClocks map[int]int

// schedstat returns how long thread tid has run on a CPU and waited for
// one while runnable, in all, from its schedstat (ok false if unknown).
// A thread in a ptrace-stop does neither: these clocks stand still.
func (p *Process) schedstat(tid int) (run, wait time.Duration, ok bool) {
	if p.schedFds == nil {
		p.schedFds = schedClocks{}
	}
	fd, open := p.schedFds[tid]
	if !open {
		var err error
		fd, err = unix.Open(fmt.Sprintf("/proc/%d/task/%d/schedstat", p.pid, tid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, 0, false
		}
		p.schedFds[tid] = fd
	}
	var buf [96]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil || n <= 0 {
		p.schedFds.forget(tid)
		return 0, 0, false
	}
	return parseSchedstat(string(buf[:n]))
}

// parseSchedstat reads schedstat's first two fields (nanoseconds).
func parseSchedstat(s string) (run, wait time.Duration, ok bool) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseInt(f[0], 10, 64)
	w, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || r < 0 || w < 0 {
		return 0, 0, false
	}
	return time.Duration(r), time.Duration(w), true
}

// forget closes tid's file.
func (c schedClocks) forget(tid int) {
	if fd, ok := c[tid]; ok {
		unix.Close(fd)
		delete(c, tid)
	}
}

// keepOnly closes the files of threads no longer in threads.
func (c schedClocks) keepOnly(threads map[int]*thread) {
	for tid := range c {
		if threads[tid] == nil {
			c.forget(tid)
		}
	}
}
