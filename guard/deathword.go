package guard

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A deathWord tells the watchdog of the exit of the stub's ptrace thread
// where the kernel has no thread pidfds (before Linux 6.9: Debian 12's
// 6.1, Ubuntu 22.04's 5.15, RHEL 9's 5.14), through the kernel's robust
// futex list: a page of a memfd, mapped by both, holds a robust list
// head and one entry whose futex word holds the tid of the thread that
// last told the watchdog of a process (Client.Memory, called on the
// ptrace thread, which registers the list for itself with
// set_robust_list). When that thread exits, however it dies, the kernel
// walks its robust list (exit_mm, just before the exit detaches its
// tracees): finding the word owned by the dying thread it replaces the
// tid with FUTEX_OWNER_DIED and wakes the word's waiter, the watchdog's
// watcher thread (watchDeaths). Without it the watchdog would learn of
// the death only from its socket's end of file, once every thread of
// the stub is gone: tens of milliseconds after the detach under load
// (in the arm64 VM's emulation the program's next int3 came first now
// and then).
//
// The page's layout (offsets in bytes): 0 the list head (next → the
// entry, futex_offset, list_op_pending 0), 24 the entry (next → the
// head), 32 the futex word, 40 a generation count the stub increments
// after each new owner's tid goes in (so the watcher tells a second
// death from the first it already reported).
//
// The stub's Go runtime, linked with cgo, lets glibc register a robust
// list for each thread it starts: the ptrace thread's is replaced by this
// one; the stub holds no robust mutex.
type deathWord struct {
	mem []byte
	fd  int
}

const (
	deathWordSize   = 4096
	deathEntryOff   = 24
	deathWordOff    = 32
	deathGenOff     = 40
	robustHeadLen   = 24 // sizeof(struct robust_list_head)
	futexWaiters    = 0x80000000
	futexOwnerDied  = 0x40000000
	futexTidMask    = 0x3fffffff
	futexWaitShared = 0 // FUTEX_WAIT without FUTEX_PRIVATE_FLAG
	futexWakeShared = 1 // FUTEX_WAKE
)

// newDeathWord makes the page (the stub's side).
func newDeathWord() (*deathWord, error) {
	fd, err := unix.MemfdCreate("gotpstub-watchdog", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("watchdog death word: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, deathWordSize); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watchdog death word: ftruncate: %w", err)
	}
	d, err := mapDeathWord(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	base := uint64(uintptr(unsafe.Pointer(&d.mem[0])))
	*(*uint64)(unsafe.Pointer(&d.mem[0])) = base + deathEntryOff
	*(*int64)(unsafe.Pointer(&d.mem[8])) = deathWordOff - deathEntryOff
	*(*uint64)(unsafe.Pointer(&d.mem[16])) = 0
	*(*uint64)(unsafe.Pointer(&d.mem[deathEntryOff])) = base
	return d, nil
}

// mapDeathWord maps the page of memfd fd, which d then owns.
func mapDeathWord(fd int) (*deathWord, error) {
	mem, err := unix.Mmap(fd, 0, deathWordSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("watchdog death word: mmap: %w", err)
	}
	return &deathWord{mem: mem, fd: fd}, nil
}

func (d *deathWord) word() *uint32 { return (*uint32)(unsafe.Pointer(&d.mem[deathWordOff])) }
func (d *deathWord) gen() *uint32  { return (*uint32)(unsafe.Pointer(&d.mem[deathGenOff])) }

// own makes the calling thread the word's owner and registers the robust
// list for it, so that its exit marks the word.
func (d *deathWord) own() error {
	tid := uint32(unix.Gettid())
	w := d.word()
	for {
		old := atomic.LoadUint32(w)
		if atomic.CompareAndSwapUint32(w, old, old&futexWaiters|tid) {
			break
		}
	}
	// The generation after the word: a watcher that reads it first and
	// then the word sees a new generation only with the new owner's
	// word (or its death's).
	atomic.AddUint32(d.gen(), 1)
	if atomic.LoadUint32(w)&futexWaiters != 0 {
		futex(w, futexWakeShared, 1, nil)
	}
	head := uintptr(unsafe.Pointer(&d.mem[0]))
	if _, _, e := unix.RawSyscall(unix.SYS_SET_ROBUST_LIST, head, robustHeadLen, 0); e != 0 {
		return fmt.Errorf("watchdog death word: set_robust_list: %w", e)
	}
	return nil
}

// died reports whether the word's last owner has exited.
func (d *deathWord) died() bool { return atomic.LoadUint32(d.word())&futexOwnerDied != 0 }

// close unmaps the page and closes its file.
func (d *deathWord) close() {
	_ = unix.Munmap(d.mem)
	unix.Close(d.fd)
}

// watchDeaths waits on the word on a thread of its own (real-time when
// permitted) and writes a byte to notify each time an owner's exit
// marks it, until stop is set (it looks every 100 ms); then it closes
// notify.
func (d *deathWord) watchDeaths(notify *os.File, stop *atomic.Bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer notify.Close()
	raisePriority()
	w := d.word()
	reported := ^uint32(0) // the generation last reported
	timeout := unix.NsecToTimespec(int64(100 * time.Millisecond))
	for !stop.Load() {
		gen := atomic.LoadUint32(d.gen())
		v := atomic.LoadUint32(w)
		if v&futexOwnerDied != 0 && gen != reported {
			reported = gen
			_, _ = notify.Write([]byte{1})
		}
		if v&futexWaiters == 0 {
			if !atomic.CompareAndSwapUint32(w, v, v|futexWaiters) {
				continue
			}
			v |= futexWaiters
		}
		futex(w, futexWaitShared, v, &timeout)
	}
}

// futex makes a futex system call on w (errors are the callers' loops').
func futex(w *uint32, op int, val uint32, timeout *unix.Timespec) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), uintptr(op), uintptr(val),
		uintptr(unsafe.Pointer(timeout)), 0, 0)
}

// raisePriority makes the calling thread real-time when permitted, else
// nice -20 when permitted.
func raisePriority() {
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1}, 0); err != nil {
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, -20)
	}
}

// threadPidfds reports whether the kernel offers thread pidfds
// (PIDFD_THREAD, Linux 6.9).
func threadPidfds() bool {
	fd, err := unix.PidfdOpen(unix.Gettid(), pidfdThread)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
