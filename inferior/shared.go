package inferior

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SharedMemory is memory mapped both in the process and in the stub: the
// same pages, so the stub reads what the process writes without a system
// call and without stopping it. Data is the stub's view; Addr is where the
// process sees it.
type SharedMemory struct {
	Addr uint64
	Data []byte
}

// Close unmaps the stub's view (the process keeps its own).
func (m *SharedMemory) Close() error {
	if m == nil || m.Data == nil {
		return nil
	}
	err := unix.Munmap(m.Data)
	m.Data = nil
	return err
}

// Unmap removes the process's view of m (its pages are freed once no
// one maps them) and closes the stub's. Every thread must be stopped and
// none may use the memory again.
func (p *Process) Unmap(m *SharedMemory) error {
	err := p.do(func() error {
		return p.withSyscallThread(func(t *thread) error {
			res, err := p.injectSyscall(t, unix.SYS_MUNMAP, m.Addr, uint64(len(m.Data)))
			if err == nil && int64(res) < 0 {
				err = unix.Errno(-int64(res))
			}
			return err
		})
	})
	if cerr := m.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unmapping shared memory: %w", err)
	}
	return nil
}

// memfdName is the name the process's memfd shows in /proc/PID/maps
// ("/memfd:gotpstub-trace (deleted)").
const memfdName = "gotpstub-trace\x00"

// MapShared creates size bytes of memory shared between the process and
// the stub, zero-filled: a memfd created in the process (memfd_create,
// ftruncate, mmap MAP_SHARED read-write, then close: the process keeps
// only the mapping, not a file descriptor), opened by the stub through
// /proc/PID/fd and mapped here too. The memfd is close-on-exec; a fork
// child inherits the mapping (its code patches are removed, so it does
// not write to it). Every thread must be stopped.
func (p *Process) MapShared(size int) (*SharedMemory, error) {
	var m *SharedMemory
	err := p.do(func() error {
		var err error
		m, err = p.mapShared(size)
		return err
	})
	return m, err
}

func (p *Process) mapShared(size int) (*SharedMemory, error) {
	if size <= 0 || size > 1<<34 || size%pageSize != 0 {
		return nil, fmt.Errorf("shared memory: bad size %d", size)
	}
	var m *SharedMemory
	err := p.withSyscallThread(func(t *thread) error {
		var err error
		m, err = p.mapSharedWith(t, size)
		return err
	})
	if err != nil && !errors.Is(err, ErrRunning) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("shared memory: %w", err)
	}
	return m, nil
}

// mapSharedWith is mapShared with stopped thread t making the calls.
func (p *Process) mapSharedWith(t *thread, size int) (*SharedMemory, error) {
	call := func(what string, nr uintptr, args ...uint64) (uint64, error) {
		res, err := p.injectSyscall(t, nr, args...)
		if err != nil {
			return 0, fmt.Errorf("shared memory: %s: %w", what, err)
		}
		if int64(res) < 0 && int64(res) > -4096 {
			return 0, fmt.Errorf("shared memory: %s in the process: %w", what, unix.Errno(-int64(res)))
		}
		return res, nil
	}
	fd, err := p.memfdCreate(t, call)
	if err != nil {
		return nil, err
	}
	closeFd := func() { _, _ = call("close", unix.SYS_CLOSE, fd) }
	if _, err := call("ftruncate", unix.SYS_FTRUNCATE, fd, uint64(size)); err != nil {
		closeFd()
		return nil, err
	}
	addr, err := call("mmap", unix.SYS_MMAP, 0, uint64(size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED, fd, 0)
	if err != nil {
		closeFd()
		return nil, err
	}
	data, err := mapProcessFd(p.pid, int(fd), size)
	closeFd()
	if err != nil {
		_, _ = call("munmap", unix.SYS_MUNMAP, addr, uint64(size))
		return nil, err
	}
	return &SharedMemory{Addr: addr, Data: data}, nil
}

// memfdCreate runs memfd_create in the process, with the name written on
// the thread's stack below its red zone (and restored afterwards).
func (p *Process) memfdCreate(t *thread, call func(string, uintptr, ...uint64) (uint64, error)) (uint64, error) {
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &regs); err != nil {
		return 0, fmt.Errorf("shared memory: reading registers: %w", err)
	}
	nameAddr := (stackPointer(&regs) - 512) &^ 15
	saved := make([]byte, len(memfdName))
	if _, err := p.readRaw(nameAddr, saved); err != nil {
		return 0, fmt.Errorf("shared memory: reading the stack: %w", err)
	}
	if err := p.writeRaw(nameAddr, []byte(memfdName)); err != nil {
		return 0, fmt.Errorf("shared memory: writing the stack: %w", err)
	}
	fd, err := call("memfd_create", unix.SYS_MEMFD_CREATE, nameAddr, unix.MFD_CLOEXEC)
	if werr := p.writeRaw(nameAddr, saved); werr != nil && err == nil {
		err = fmt.Errorf("shared memory: restoring the stack: %w", werr)
	}
	return fd, err
}

// mapProcessFd maps the process's file descriptor fd into the stub.
func mapProcessFd(pid, fd, size int) ([]byte, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shared memory: %w", err)
	}
	defer f.Close()
	data, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shared memory: mapping it in the stub: %w", err)
	}
	return data, nil
}

// anyStoppedThread returns a stopped live thread to run injected system
// calls, the leader when it is one; one at a syscall-entry stop only when
// no other is stopped (injectAtSyscallEntry has to rewind it).
func (p *Process) anyStoppedThread() (*thread, error) {
	if p.exitEvent != nil {
		return nil, ErrExited
	}
	usable := func(t *thread, entryOK bool) bool {
		return t != nil && t.stopped && !t.zombie && (entryOK || !t.atSyscallEntry)
	}
	for _, entryOK := range []bool{false, true} {
		if lt := p.threads[p.pid]; usable(lt, entryOK) {
			return lt, nil
		}
		for _, c := range p.threads {
			if usable(c, entryOK) {
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("no stopped thread: %w", ErrRunning)
}

// HasStoppedThread reports whether a thread is stopped that can make
// injected system calls (MapShared and the like): then none running is
// stopped for them.
func (p *Process) HasStoppedThread() bool {
	ok := false
	_ = p.do(func() error {
		_, err := p.anyStoppedThread()
		ok = err == nil
		return nil
	})
	return ok
}

// Done is closed when the Process is closed (its ptrace goroutine ended).
func (p *Process) Done() <-chan struct{} { return p.done }

// FutexOwnerDied and FutexTIDMask are the kernel's robust-futex bits: when
// a thread whose robust list names a word holding its thread id ends, the
// kernel stores FutexOwnerDied there (the id bits cleared).
const (
	FutexOwnerDied = 0x40000000
	FutexTIDMask   = 0x3fffffff
)

// robustList is a robust futex list of one entry (struct robust_list_head
// followed by one struct robust_list), in Go memory that the Process keeps
// referenced: the kernel reads it when the thread ends.
type robustList struct {
	next, futexOffset, pending uintptr // the head
	entry                      uintptr // the entry: next = &head
}

// MarkTracerAlive stores the tracer thread's id in the 32-bit word and
// ties the word to that thread: whenever the thread ends — the stub
// exits, crashes or is killed — the kernel clears the id and sets
// FutexOwnerDied (robust futex semantics). A word in SharedMemory.Data
// thus tells code running in the process whether its tracer lives,
// without any system call. Only the last word given is tied.
func (p *Process) MarkTracerAlive(word *uint32) error {
	return p.do(func() error {
		rl, err := tieWordToThread(word)
		if err != nil {
			return fmt.Errorf("marking the tracer alive: %w", err)
		}
		p.robust = rl
		return nil
	})
}

// tieWordToThread registers word in the calling thread's robust list
// (replacing any list it had: the Go runtime registers none) and stores
// the thread's id in it.
func tieWordToThread(word *uint32) (*robustList, error) {
	rl := &robustList{}
	head := uintptr(unsafe.Pointer(rl))
	rl.next = uintptr(unsafe.Pointer(&rl.entry))
	rl.futexOffset = uintptr(unsafe.Pointer(word)) - rl.next
	rl.entry = head
	atomic.StoreUint32(word, uint32(unix.Gettid()))
	if _, _, e := unix.RawSyscall(unix.SYS_SET_ROBUST_LIST, head, 24, 0); e != 0 {
		atomic.StoreUint32(word, 0)
		return nil, e
	}
	return rl, nil
}
