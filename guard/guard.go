// Package guard keeps a debugged program alive when the stub dies.
//
// When a tracer dies (SIGKILL, a crash) the kernel detaches its tracees
// and they run on, but every int3 the stub left in their code (gdb's
// breakpoints, trap tracepoints) is now fatal: the next thread to execute
// one gets a SIGTRAP nobody answers and the program dies with a core dump.
// The stub therefore starts a watchdog, a second copy of its own binary
// (/proc/self/exe with the hidden first argument WatchdogArg) in a session
// of its own, holding one end of a socket pair. The stub tells it, in
// order, about every int3 it writes or removes and hands it the process's
// /proc/PID/mem file (opened by the stub, the tracer, so that the
// watchdog's writes need no ptrace permission of their own) with the tid
// of the stub's ptrace thread. The kernel detaches the tracees when that
// thread exits; the watchdog watches it through a thread pidfd (Linux
// 6.9) and, when it exits with the process still registered (or, without
// thread pidfds, when the socket ends without the stub's goodbye), writes
// the saved byte back wherever an int3 of the table still is (on arm64,
// where "int3" means the 4-byte brk #0, the whole instruction in one
// write), then sends
// SIGCONT to the program if it finds it stopped (a SIGSTOP the stub had
// sent, or the one the kernel queues for a new thread, is delivered once
// nobody traces the thread, and would stop the whole program for good).
// The watchdog's waiting thread runs SCHED_FIFO when permitted (else at
// nice -20), and its code is resident from its start (mlock, holdCode),
// so that it wins the race below when the machine is loaded or its
// binary's pages are not cached.
//
// What cannot be saved, and why (the kernel decides, not the watchdog;
// observed on Linux 6.18 by freezing the stub with SIGSTOP while a
// program hit a trap tracepoint in a tight loop, then killing it):
//
//   - A thread that sits in the stop of a trap tracepoint's int3 when the
//     stub dies, before the stub handled the stop: the kernel lets it go
//     without the SIGTRAP it stopped with, from where it stopped, the byte
//     after the int3, in the middle of the original instruction. What
//     those bytes decode to runs: a crash, or silently wrong results. Once
//     the stub handles the hit the thread waits parked at the displaced
//     copy of the instruction, which ends with a jump home (package
//     trapfallback): a death then is harmless.
//   - A thread the stub is single-stepping (through that copy, or an
//     injected system call): the kernel's single-step state stays armed
//     after the detach, and the next instruction's debug trap kills the
//     program with SIGTRAP. Only while the stub handles a packet:
//     before it waits for gdb again it settles the step of every thread
//     stopped for gdb (inferior.SettleSteps), in all-stop and non-stop
//     mode, so a thread gdb stepped, or one the stub stepped for tstart,
//     no longer dies with a stub killed later — except in the moment
//     between a stepped thread's stop and its report to gdb.
//   - A thread that reaches an int3 between the detach and the
//     watchdog's write: the pidfd is signalled in the same kernel function
//     that detaches, and the watchdog's write follows within
//     microseconds on an idle machine, but a thread in a tight loop meets
//     the int3 first. The socket's end of file, the fallback, comes only
//     when every thread of the stub is gone: under load, tens of
//     milliseconds after the detach.
//
// So a program hitting a trap tracepoint in a tight loop usually dies
// with the stub (its thread is in a stop most of the time); one whose hits
// are milliseconds apart usually survives. Fast tracepoints' pads do not
// stop the thread (the other part of issue 14).
//   - If the program is stopped (group stop) at the instant the stub, its
//     parent, exits, its process group becomes orphaned with a stopped
//     member and the kernel sends it SIGHUP and SIGCONT: a program that
//     does not handle SIGHUP dies of it. The watchdog's own SIGCONT comes
//     too late for that case.
//   - The bytes of fast tracepoints' jumps stay: their pads run without
//     the stub. Fork children the stub holds for gdb are not covered.
package guard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// WatchdogArg is the first argument that makes the stub's binary run as
// the watchdog (Serve) on file descriptor 3.
const WatchdogArg = "__gotpstub-watchdog"

// Message kinds on the socket (one SOCK_SEQPACKET message each).
const (
	msgMemory = 'P' // pid u32, ptrace thread's tid u32, the memory file as SCM_RIGHTS (pid 0: no process)
	msgTrap   = 'T' // addr u64, orig byte
	msgUntrap = 'U' // addr u64
	msgQuit   = 'Q' // orderly end: exit without touching anything
)

const msgLen = 1 + 8 + 1

// Client is the stub's end: it implements inferior.Guard. Its methods
// never fail; once the watchdog is unreachable they do nothing (the first
// failure is logged).
type Client struct {
	mu     sync.Mutex
	sock   int // our end of the socket pair, -1 once closed
	cmd    *exec.Cmd
	broken bool
	logf   func(format string, args ...any)
}

// Start starts the watchdog: exe (normally /proc/self/exe) run with
// WatchdogArg, its standard error going to stderr. logf receives the
// first send failure (nil: discarded).
func Start(exe string, stderr io.Writer, logf func(string, ...any)) (*Client, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("watchdog: socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "watchdog socket")
	cmd := exec.Command(exe, WatchdogArg)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = stderr
	// A session of its own: neither the stub's process group being
	// killed nor its terminal hanging up reaches the watchdog, which
	// exits by itself once the socket closes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		unix.Close(fds[0])
		theirs.Close()
		return nil, fmt.Errorf("watchdog: starting %s: %w", exe, err)
	}
	theirs.Close()
	return &Client{sock: fds[0], cmd: cmd, logf: logf}, nil
}

// send sends one message, with fd passed along when it is ≥ 0.
func (c *Client) send(kind byte, v uint64, b byte, fd int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sock < 0 || c.broken {
		return
	}
	var msg [msgLen]byte
	msg[0] = kind
	binary.LittleEndian.PutUint64(msg[1:], v)
	msg[9] = b
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	for {
		err := unix.Sendmsg(c.sock, msg[:], oob, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			c.broken = true
			c.logf("watchdog unreachable (%v): a death of the stub would leave breakpoints in the program", err)
		}
		return
	}
}

// Memory implements inferior.Guard: the process (pid 0: none) and its
// memory file. The watchdog forgets the int3s of the previous one.
func (c *Client) Memory(pid int, mem *os.File) {
	fd := -1
	v := uint64(0)
	if pid > 0 && mem != nil {
		fd = int(mem.Fd())
		// Called on the ptrace thread (inferior.Guard): the watchdog
		// watches it, since its exit detaches the program.
		v = uint64(uint32(pid)) | uint64(uint32(unix.Gettid()))<<32
	}
	c.send(msgMemory, v, 0, fd)
}

// Trap implements inferior.Guard: an int3 is about to be written at addr
// over orig (or the byte saved under it changed).
func (c *Client) Trap(addr uint64, orig byte) { c.send(msgTrap, addr, orig, -1) }

// Untrap implements inferior.Guard: addr holds its own byte again.
func (c *Client) Untrap(addr uint64) { c.send(msgUntrap, addr, 0, -1) }

// Close tells the watchdog to exit without touching the program (the
// stub ends in order: it killed or detached its process) and waits for
// it.
func (c *Client) Close() {
	c.send(msgQuit, 0, 0, -1)
	c.mu.Lock()
	if c.sock >= 0 {
		unix.Close(c.sock)
		c.sock = -1
	}
	c.mu.Unlock()
	done := make(chan struct{})
	go func() {
		_ = c.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// Pid is the watchdog's process id (for tests).
func (c *Client) Pid() int { return c.cmd.Process.Pid }

// watchdog is Serve's state: the table of int3s of the current process.
type watchdog struct {
	sock      int
	pid       int
	mem       *os.File
	tracer    int // pidfd of the stub's ptrace thread, -1 for none
	tracerTid int // that thread (0: none)
	// tracerGone: the ptrace thread had exited before its pidfd could
	// be opened.
	tracerGone bool
	traps      map[uint64]byte
	repaired   bool // repair has run for a process
	logf       func(format string, args ...any)
}

// pidfdThread is PIDFD_THREAD (O_EXCL): a pidfd for one thread, readable
// once that thread has exited (Linux 6.9).
const pidfdThread = unix.O_EXCL

// raisePriority makes the calling thread real-time when permitted, else
// nice -20 when permitted.
func raisePriority() {
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1}, 0); err != nil {
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, -20)
	}
}

// Serve is the watchdog's main: it reads the stub's messages from sock
// until the stub says goodbye (exit status 0, nothing done) or dies, and
// then repairs the program as the package doc says. It returns the exit
// status.
//
// The stub's death shows first as the exit of its ptrace thread, watched
// through a thread pidfd: the kernel detaches the tracees in that
// thread's exit, and signals the pidfd right after. The socket's end of
// file comes only once every thread of the stub is gone, which under load
// can be many milliseconds later; it is the fallback where thread pidfds
// do not exist (before Linux 6.9). A robust futex the kernel marks in
// that thread's exit would do there too, but the thread's one robust
// list is the fast tracepoints' (inferior.Process.MarkTracerAlive):
// registering a second list would replace it.
func Serve(sock *os.File, stderr io.Writer) int {
	w := &watchdog{sock: int(sock.Fd()), tracer: -1, traps: map[uint64]byte{}, logf: func(format string, args ...any) {
		fmt.Fprintf(stderr, "gotpstub watchdog: "+format+"\n", args...)
	}}
	// sock's finalizer closes the descriptor once sock is unreachable,
	// and w keeps only the number: without this the watchdog's first
	// collection (each message allocates a little) ended it, its next
	// poll taken for the stub's death: the int3s of a live session
	// restored under the stub, and no watchdog left.
	defer runtime.KeepAlive(sock)
	// This thread waits for the stub's end and races the program's
	// threads to the restored bytes once it comes: it should be the
	// first to run then (real-time when permitted, else the highest
	// nice; it sleeps the rest of the time).
	runtime.LockOSThread()
	raisePriority()
	holdCode(w.logf)
	for {
		if w.tracerGone {
			if w.tracerExited() {
				return 0
			}
			continue
		}
		fds := []unix.PollFd{{Fd: int32(w.sock), Events: unix.POLLIN}, {Fd: -1}}
		if w.tracer >= 0 {
			fds[1] = unix.PollFd{Fd: int32(w.tracer), Events: unix.POLLIN}
		}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			w.repair("poll failed: " + err.Error())
			return 0
		}
		if fds[1].Revents != 0 {
			if w.tracerExited() {
				return 0
			}
			continue
		}
		if fds[0].Revents == 0 {
			continue
		}
		quit, eof, _ := w.receive(0)
		if quit {
			return 0
		}
		if eof {
			w.repair("its socket closed")
			return 0
		}
	}
}

// tracerExited handles the exit of the stub's ptrace thread: it takes the
// messages that thread sent before it exited, then repairs the program,
// unless those messages end with the process gone (an orderly end of the
// thread: the stub killed or detached the process first) or another
// thread took over. It reports whether Serve is done.
func (w *watchdog) tracerExited() (done bool) {
	if w.tracer >= 0 {
		unix.Close(w.tracer)
		w.tracer = -1
	}
	w.tracerGone = false
	old := w.tracerTid
	for w.tracerTid == old && w.pid != 0 {
		quit, eof, empty := w.receive(unix.MSG_DONTWAIT)
		if quit {
			return true
		}
		if eof || empty {
			w.repair("its ptrace thread exited")
			return eof
		}
	}
	return false
}

// receive handles one message: quit is the stub's goodbye, eof its death
// (or an error), empty that nothing was queued (with MSG_DONTWAIT).
func (w *watchdog) receive(flags int) (quit, eof, empty bool) {
	var buf [64]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(w.sock, buf[:], oob, flags|unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.EAGAIN {
		return false, false, true
	}
	if err != nil || n == 0 {
		return false, true, false
	}
	var files []int
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range msgs {
				if fds, rerr := unix.ParseUnixRights(&m); rerr == nil {
					files = append(files, fds...)
				}
			}
		}
	}
	defer func() {
		for _, f := range files {
			unix.Close(f)
		}
	}()
	if n < msgLen {
		return false, false, false
	}
	v := binary.LittleEndian.Uint64(buf[1:])
	switch buf[0] {
	case msgMemory:
		if w.mem != nil {
			w.mem.Close()
			w.mem = nil
		}
		if w.tracer >= 0 {
			unix.Close(w.tracer)
			w.tracer = -1
		}
		w.pid = int(uint32(v))
		w.tracerTid = 0
		w.traps = map[uint64]byte{}
		if w.pid != 0 && len(files) > 0 {
			w.mem = os.NewFile(uintptr(files[0]), "mem")
			files = files[1:]
			if tid := int(v >> 32); tid > 0 {
				w.tracerTid = tid
				w.watchTracer(tid)
			}
		}
	case msgTrap:
		w.traps[v] = buf[9]
	case msgUntrap:
		delete(w.traps, v)
	case msgQuit:
		return true, false, false
	}
	return false, false, false
}

// watchTracer watches thread tid, the stub's ptrace thread, through a
// thread pidfd (where the kernel has them).
func (w *watchdog) watchTracer(tid int) {
	fd, err := unix.PidfdOpen(tid, pidfdThread)
	switch err {
	case nil:
		w.tracer = fd
	case unix.ESRCH:
		w.tracerGone = true // already
	}
}

// repair takes the int3s out of the program and continues it if it
// stopped. why says what told the watchdog of the stub's death. It logs
// what it found every time (a program that dies anyway then shows
// whether the watchdog woke, and what it saw).
func (w *watchdog) repair(why string) {
	if w.pid == 0 || w.mem == nil {
		if !w.repaired {
			w.logf("the stub died (%s) with no process registered", why)
		}
		return
	}
	w.repaired = true
	start := time.Now()
	restored, failed := w.restore()
	tracer, alive := tracerPid(w.pid)
	took := time.Since(start)
	w.logf("the stub died: restored %d of %d breakpoint bytes in process %d (%s at %s; %d in its table; %v; the process %s; threads %s)",
		restored, restored+failed, w.pid, why, start.Format("15:04:05.000000"), len(w.traps),
		took.Round(time.Microsecond), processState(alive, tracer), threadsWhere(w.pid))
	w.unstop()
	w.pid, w.traps = 0, map[uint64]byte{}
}

// restore writes the saved bytes back wherever the table's breakpoint
// instructions (trapInsn) still are.
func (w *watchdog) restore() (restored, failed int) {
	return restoreTraps(w.mem, w.traps, trapInsn)
}

// restoreTraps writes the saved bytes of traps back into mem wherever a
// breakpoint instruction insn still is, each instruction in one write: on
// arm64 a brk's four bytes are four entries of the table, and writing
// them one at a time left, for a thread running there meanwhile, a brk
// with another immediate (the first byte back) or an undefined
// instruction: a SIGTRAP or a SIGILL after the stub's death. It counts
// the bytes.
func restoreTraps(mem interface {
	io.ReaderAt
	io.WriterAt
}, traps map[uint64]byte, insn []byte) (restored, failed int) {
	unit := uint64(len(insn))
	units := map[uint64][]uint64{} // an instruction's address → its bytes' addresses
	for addr := range traps {
		u := addr &^ (unit - 1)
		units[u] = append(units[u], addr)
	}
	b := make([]byte, unit)
	for u, addrs := range units {
		if _, err := mem.ReadAt(b, int64(u)); err != nil || !bytes.Equal(b, insn) {
			continue // unmapped since, or the stub had lifted it
		}
		for _, addr := range addrs {
			b[addr-u] = traps[addr]
		}
		if _, err := mem.WriteAt(b, int64(u)); err != nil {
			failed += len(addrs)
			continue
		}
		restored += len(addrs)
	}
	return restored, failed
}

// unstop waits for the kernel to detach the program from the dead stub,
// then for a short while sends SIGCONT whenever a thread of the program is
// stopped (a SIGSTOP delivered once nobody traced the thread).
func (w *watchdog) unstop() {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		tracer, ok := tracerPid(w.pid)
		if !ok {
			w.logf("process %d is gone", w.pid)
			return
		}
		if tracer == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Bytes restored before the detach are restored; restore again for
	// an int3 the stub wrote while dying (its table entry came first).
	w.restore()
	end := time.Now().Add(300 * time.Millisecond)
	sent := false
	for time.Now().Before(end) {
		if st := threadState(fmt.Sprintf("/proc/%d/stat", w.pid)); st == 0 || st == 'Z' || st == 'X' {
			w.logf("process %d ended within %v of the detach", w.pid, 300*time.Millisecond)
			return
		}
		if stopped(w.pid) {
			if err := unix.Kill(w.pid, unix.SIGCONT); err == nil && !sent {
				w.logf("the stub died: process %d was stopped (a SIGSTOP meant for the stub): continued it", w.pid)
				sent = true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tracerPid returns the TracerPid of pid's status; ok is false when the
// process is gone.
func tracerPid(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	var tracer int
	for _, line := range splitLines(b) {
		if _, err := fmt.Sscanf(line, "TracerPid:\t%d", &tracer); err == nil {
			return tracer, true
		}
	}
	return 0, true
}

// processState describes a process for repair's log: gone, or by whom
// it is still traced.
func processState(alive bool, tracer int) string {
	switch {
	case !alive:
		return "gone"
	case tracer != 0:
		return fmt.Sprintf("still traced by %d", tracer)
	}
	return "detached"
}

// threadsWhere describes where each thread of pid is, for repair's log:
// its state letter and /proc's syscall line's number and pc (a thread in
// a system call, or "running", or -1 for a stop).
func threadsWhere(pid int) string {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return "unknown"
	}
	var out []string
	for _, t := range tasks {
		st := threadState(dir + "/" + t.Name() + "/stat")
		if st == 0 {
			st = '?'
		}
		sc, _ := os.ReadFile(dir + "/" + t.Name() + "/syscall")
		f := strings.Fields(string(sc))
		where := strings.Join(f, " ")
		if len(f) > 2 {
			where = f[0] + " pc " + f[len(f)-1]
		}
		out = append(out, fmt.Sprintf("%s %c %s", t.Name(), st, where))
	}
	return strings.Join(out, ", ")
}

// stopped reports whether a thread of pid is in a stop (state T).
func stopped(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, t := range tasks {
		if threadState(dir+"/"+t.Name()+"/stat") == 'T' {
			return true
		}
	}
	return false
}

// threadState returns the state letter of a /proc stat file (0 when it
// cannot be read).
func threadState(path string) byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// The state follows the last ')' (the command may hold one).
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2]
	}
	return 0
}

func splitLines(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == '\n' {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, string(b[start:]))
	}
	return out
}

// ErrNoWatchdog is returned by StartSelf where /proc/self/exe cannot be run.
var ErrNoWatchdog = errors.New("watchdog: cannot run /proc/self/exe")

// StartSelf starts the watchdog from the running binary.
func StartSelf(stderr io.Writer, logf func(string, ...any)) (*Client, error) {
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoWatchdog, err)
	}
	return Start("/proc/self/exe", stderr, logf)
}

// holdCode makes the watchdog's own code resident and keeps it so: its
// executable's mappings locked (mlock), or, where the locked-memory limit
// refuses that, read in (MADV_POPULATE_READ, Linux 5.14; without a lock
// the kernel may evict them again under memory pressure). The repair
// runs code the watchdog has not run before; a page of it read from the
// file at the stub's death (a cold cache, a binary on a network or 9p
// file system: under the arm64 VM's emulation tens of milliseconds) lets
// the program's threads reach an int3 first, which kills the program.
// (It was a suspect for the rare failure of e2e
// TestStubKilledWhileTracingProgramRunsOn in the arm64 VM, the program
// dead before any repair; that failure came again with the code
// resident, so its cause is elsewhere.) Failures are logged.
func holdCode(logf func(string, ...any)) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		logf("finding its own code: %v", err)
		return
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		logf("finding its own code: %v", err)
		return
	}
	for _, r := range fileRanges(maps, exe) {
		if _, _, e := unix.Syscall(unix.SYS_MLOCK, uintptr(r[0]), uintptr(r[1]-r[0]), 0); e == 0 {
			continue
		}
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, uintptr(r[0]), uintptr(r[1]-r[0]), unix.MADV_POPULATE_READ); e != 0 {
			logf("reading its own code in: %v", e)
			return
		}
	}
}

// fileRanges returns the address ranges [start, end) that a
// /proc/PID/maps listing shows mapped from the file at path (" (deleted)"
// after the name once it was replaced).
func fileRanges(maps []byte, path string) [][2]uint64 {
	var out [][2]uint64
	for _, line := range strings.Split(string(maps), "\n") {
		// start-end perms offset dev inode path
		f := strings.SplitN(line, " ", 6)
		if len(f) < 6 || path == "" || strings.TrimSuffix(strings.TrimLeft(f[5], " "), " (deleted)") != path {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, [2]uint64{start, end})
	}
	return out
}
