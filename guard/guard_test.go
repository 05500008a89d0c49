package guard

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pair returns a client and the watchdog's socket, connected.
func pair(t *testing.T) (*Client, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{sock: fds[0], logf: t.Logf}
	return c, os.NewFile(uintptr(fds[1]), "watchdog end")
}

// serve runs Serve in a goroutine; the channel yields its status and
// what it wrote.
type served struct {
	code int
	log  string
}

func serve(sock *os.File) chan served {
	ch := make(chan served, 1)
	go func() {
		var log bytes.Buffer
		code := Serve(sock, &log)
		// Closed now, not by a finalizer once its number serves
		// another test's descriptor.
		sock.Close()
		ch <- served{code, log.String()}
	}()
	return ch
}

// target is memory of this process standing for a program's code: the
// watchdog writes it through /proc/self/mem.
func target(t *testing.T) ([]byte, *os.File) {
	t.Helper()
	code := []byte{0xcc, 0x55, 0xcc, 0x90, 0xcc}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return code, mem
}

func addr(b []byte, i int) uint64 { return uint64(uintptr(unsafe.Pointer(&b[i]))) }

// On the end of file without a goodbye (the stub's death) the watchdog
// restores the bytes of the table still holding an int3, and only those.
func TestDeathRestoresInt3s(t *testing.T) {
	c, sock := pair(t)
	done := serve(sock)
	code, mem := target(t)
	c.Memory(os.Getpid(), mem)
	c.Trap(addr(code, 0), 0x48) // int3 in memory: restored
	c.Trap(addr(code, 2), 0x31)
	c.Untrap(addr(code, 2)) // removed by the stub: left alone
	c.Trap(addr(code, 3), 0x11)
	c.Trap(addr(code, 4), 0x22)
	c.Trap(addr(code, 4), 0x23) // the saved byte changed: the last one counts
	// code[3] holds no int3 (the stub lifted it to step over): untouched.
	unix.Close(c.sock) // the stub dies
	r := <-done
	runtime.KeepAlive(code)
	if r.code != 0 {
		t.Errorf("Serve returned %d", r.code)
	}
	if want := []byte{0x48, 0x55, 0xcc, 0x90, 0x23}; !bytes.Equal(code, want) {
		t.Errorf("memory after the death: % x, want % x", code, want)
	}
	if !strings.Contains(r.log, "restored 2 of 2 breakpoint bytes") {
		t.Errorf("log %q", r.log)
	}
}

// The goodbye makes the watchdog exit without touching anything.
func TestGoodbyeTouchesNothing(t *testing.T) {
	c, sock := pair(t)
	done := serve(sock)
	code, mem := target(t)
	c.Memory(os.Getpid(), mem)
	c.Trap(addr(code, 0), 0x48)
	c.send(msgQuit, 0, 0, -1)
	r := <-done
	runtime.KeepAlive(code)
	if r.code != 0 || code[0] != 0xcc || r.log != "" {
		t.Errorf("after the goodbye: status %d, code[0] %#x, log %q", r.code, code[0], r.log)
	}
	unix.Close(c.sock)
}

// A new process (or an exec: Memory again) forgets the old table, and
// Memory(0, nil) means no process at all.
func TestMemoryResetsTheTable(t *testing.T) {
	c, sock := pair(t)
	done := serve(sock)
	code, mem := target(t)
	c.Memory(os.Getpid(), mem)
	c.Trap(addr(code, 0), 0x48)
	c.Memory(os.Getpid(), mem) // exec: the old image's int3s are gone
	c.Trap(addr(code, 2), 0x31)
	c.Memory(0, nil)
	c.Trap(addr(code, 4), 0x22) // ignored: no process
	unix.Close(c.sock)
	<-done
	runtime.KeepAlive(code)
	if want := []byte{0xcc, 0x55, 0xcc, 0x90, 0xcc}; !bytes.Equal(code, want) {
		t.Errorf("memory: % x, want it untouched", code)
	}
}

// The exit of the thread that sent Memory (the stub's ptrace thread, whose
// exit detaches the program) repairs at once, while the socket is still
// open; the watchdog then waits for the next process.
func TestTracerThreadExitRepairs(t *testing.T) {
	if _, err := unix.PidfdOpen(unix.Gettid(), pidfdThread); err != nil {
		t.Skipf("no thread pidfds here (Linux 6.9): %v", err)
	}
	c, sock := pair(t)
	done := serve(sock)
	code, mem := target(t)
	for sent := false; !sent; {
		ok := make(chan bool)
		go func() {
			runtime.LockOSThread()
			if unix.Gettid() == os.Getpid() {
				// The main thread: the runtime never ends it.
				runtime.UnlockOSThread()
				ok <- false
				return
			}
			// The thread dies with this goroutine (never unlocked).
			c.Memory(os.Getpid(), mem)
			c.Trap(addr(code, 4), 0x22)
			ok <- true
		}()
		sent = <-ok
	}
	deadline := time.Now().Add(10 * time.Second)
	for *(*byte)(unsafe.Pointer(&code[4])) == 0xcc {
		if time.Now().After(deadline) {
			c.send(msgQuit, 0, 0, -1)
			r := <-done
			t.Fatalf("the ptrace thread's exit did not make the watchdog restore the int3 (log %q)", r.log)
		}
		time.Sleep(time.Millisecond)
	}
	if code[4] != 0x22 {
		t.Fatalf("restored %#x, want 0x22", code[4])
	}
	select {
	case r := <-done:
		t.Fatalf("the watchdog exited (%d, %q) while the stub lives", r.code, r.log)
	case <-time.After(50 * time.Millisecond):
	}
	c.send(msgQuit, 0, 0, -1)
	if r := <-done; r.code != 0 {
		t.Errorf("status %d", r.code)
	}
	unix.Close(c.sock)
}

// The real watchdog: a child process running this test binary as
// WatchdogArg's subcommand would; here the helper process is the test
// binary itself (TestMain runs Serve for it).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == WatchdogArg {
		os.Exit(Serve(os.NewFile(3, "watchdog socket"), os.Stderr))
	}
	os.Exit(m.Run())
}

// startWatchdog starts a watchdog: this test binary (TestMain serves).
func startWatchdog(t *testing.T) *Client {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(exe, os.Stderr, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Start and Close: the watchdog process comes and goes.
func TestStartClose(t *testing.T) {
	c := startWatchdog(t)
	pid := c.Pid()
	c.Memory(0, nil)
	c.Close()
	if err := unix.Kill(pid, 0); err == nil {
		t.Errorf("watchdog %d still there after Close", pid)
	}
}

// A program found stopped after the stub's death (a SIGSTOP the stub had
// queued, delivered once nobody traces it) is continued.
func TestStoppedProgramContinued(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !stopped(pid) {
		if time.Now().After(deadline) {
			t.Fatal("sleep never stopped")
		}
		time.Sleep(time.Millisecond)
	}
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		t.Skipf("cannot open the memory of a child: %v", err)
	}
	defer mem.Close()
	c, sock := pair(t)
	done := serve(sock)
	c.Memory(pid, mem)
	unix.Close(c.sock) // the stub dies
	r := <-done
	if stopped(pid) {
		t.Fatalf("the program is still stopped (log %q)", r.log)
	}
	if !strings.Contains(r.log, "continued it") {
		t.Errorf("log %q", r.log)
	}
}

func TestFileRanges(t *testing.T) {
	maps := `559a21a64000-559a21a66000 r--p 00000000 fe:00 247026                     /usr/bin/gotpstub
559a21a66000-559a21a6b000 r-xp 00002000 fe:00 247026                     /usr/bin/gotpstub
559a21a6e000-559a21a6f000 rw-p 00000000 00:00 0 
559a21a70000-559a21a71000 r--p 00000000 fe:00 247027                     /usr/bin/gotpstub-old
7f0000000000-7f0000001000 r-xp 00000000 fe:00 247026                     /usr/bin/gotpstub (deleted)
7f0000002000-7f0000003000 r-xp 00000000 fe:00 247028                     /tmp/a dir/gotpstub
zz-7f0000004000 r-xp 00000000 fe:00 247026                     /usr/bin/gotpstub
7f0000005000-7f0000004000 r-xp 00000000 fe:00 247026                     /usr/bin/gotpstub
`
	for _, tc := range []struct {
		path string
		want [][2]uint64
	}{
		{"/usr/bin/gotpstub", [][2]uint64{{0x559a21a64000, 0x559a21a66000}, {0x559a21a66000, 0x559a21a6b000}, {0x7f0000000000, 0x7f0000001000}}},
		{"/tmp/a dir/gotpstub", [][2]uint64{{0x7f0000002000, 0x7f0000003000}}},
		{"/usr/bin/none", nil},
		{"", nil},
	} {
		got := fileRanges([]byte(maps), tc.path)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("fileRanges(%q) = %x, want %x", tc.path, got, tc.want)
		}
	}
}

func FuzzFileRanges(f *testing.F) {
	f.Add([]byte("559a21a64000-559a21a66000 r--p 00000000 fe:00 247026   /bin/x\n"), "/bin/x")
	f.Add([]byte("1-2 r 0 0 0 /x (deleted)\n-\n"), "/x")
	f.Fuzz(func(t *testing.T, maps []byte, path string) {
		for _, r := range fileRanges(maps, path) {
			if r[1] <= r[0] {
				t.Fatalf("empty or reversed range %x", r)
			}
		}
	})
}

// The watchdog's code is resident from its start (holdCode): the repair
// reads no page from the file when the stub dies.
func TestWatchdogCodeResident(t *testing.T) {
	c := startWatchdog(t)
	defer c.Close()
	path, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	var missing string
	deadline := time.Now().Add(10 * time.Second)
	for {
		smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", c.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		missing = notResident(string(smaps), path)
		if missing == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if missing != "" {
		t.Errorf("the watchdog's code is not all resident: %s", missing)
	}
}

// notResident describes the mappings of path in an smaps listing whose
// pages are not all resident ("" when all are, or none is mapped: then
// "not mapped").
func notResident(smaps, path string) string {
	var out []string
	found, cur, size := false, "", ""
	for _, line := range strings.Split(smaps, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4: // a mapping
			cur = ""
			if len(f) >= 6 && strings.Join(f[5:], " ") == path {
				cur, found = f[0], true
			}
		case cur != "" && len(f) == 3 && f[0] == "Size:":
			size = f[1]
		case cur != "" && len(f) == 3 && f[0] == "Rss:" && f[1] != size:
			out = append(out, fmt.Sprintf("%s %s of %s kB", cur, f[1], size))
		}
	}
	if !found {
		return "not mapped"
	}
	return strings.Join(out, ", ")
}

// Serve keeps its socket's file alive: a collection of the *os.File it
// was given (whose finalizer closes the descriptor) made it read an end
// of file, repair a program whose stub still lived, and exit. The
// watchdog allocates a little for each message: a long session would
// have met its first collection.
func TestServeSurvivesCollection(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, fd := &Client{sock: fds[0], logf: t.Logf}, fds[1]
	done := make(chan served, 1)
	go func() {
		var log bytes.Buffer
		code := Serve(os.NewFile(uintptr(fd), "watchdog end"), &log)
		done <- served{code, log.String()}
	}()
	code, mem := target(t)
	c.Memory(os.Getpid(), mem)
	c.Trap(addr(code, 0), 0x48)
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("the watchdog exited (%d, %q) while the stub lives", r.code, r.log)
	case <-time.After(50 * time.Millisecond):
	}
	if code[0] != 0xcc {
		t.Errorf("the watchdog restored %#x while the stub lives", code[0])
	}
	c.send(msgQuit, 0, 0, -1)
	if r := <-done; r.code != 0 {
		t.Errorf("status %d", r.code)
	}
	unix.Close(c.sock)
}

// fakeMem is memory at address 0 that records its writes.
type fakeMem struct {
	b      []byte
	writes [][2]int // offset, length
}

func (m *fakeMem) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || int(off)+len(p) > len(m.b) {
		return 0, fmt.Errorf("unmapped %#x", off)
	}
	return copy(p, m.b[off:]), nil
}

func (m *fakeMem) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || int(off)+len(p) > len(m.b) {
		return 0, fmt.Errorf("unmapped %#x", off)
	}
	m.writes = append(m.writes, [2]int{int(off), len(p)})
	return copy(m.b[off:], p), nil
}

// A breakpoint instruction longer than a byte (arm64's brk) is restored
// in one write of the whole instruction, never byte by byte (a thread
// running it meanwhile would meet a torn instruction); instructions no
// longer holding the breakpoint, or out of memory, are left alone.
func TestRestoreTrapsWholeInstructions(t *testing.T) {
	brk := []byte{0x00, 0x00, 0x20, 0xd4}
	for _, c := range []struct {
		name   string
		insn   []byte
		mem    []byte
		traps  map[uint64]byte
		want   []byte
		writes [][2]int
		n      int
	}{
		{"brk", brk,
			[]byte{0, 0, 0x20, 0xd4, 0, 0, 0x20, 0xd4, 1, 2, 3, 4},
			map[uint64]byte{0: 0xfd, 1: 0x7b, 2: 0xbf, 3: 0xa9, 8: 9, 9: 9, 10: 9, 11: 9, 100: 1},
			[]byte{0xfd, 0x7b, 0xbf, 0xa9, 0, 0, 0x20, 0xd4, 1, 2, 3, 4},
			[][2]int{{0, 4}}, 4},
		{"int3", []byte{0xcc},
			[]byte{0xcc, 0x55, 0xcc},
			map[uint64]byte{0: 0x48, 1: 0x31, 2: 0x90},
			[]byte{0x48, 0x55, 0x90},
			[][2]int{{0, 1}, {2, 1}}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &fakeMem{b: c.mem}
			n, failed := restoreTraps(m, c.traps, c.insn)
			slices.SortFunc(m.writes, func(a, b [2]int) int { return a[0] - b[0] })
			if n != c.n || failed != 0 || !bytes.Equal(m.b, c.want) || !slices.Equal(m.writes, c.writes) {
				t.Errorf("restored %d, failed %d, memory % x, writes %v; want %d, 0, % x, %v", n, failed, m.b, m.writes, c.n, c.want, c.writes)
			}
		})
	}
}
