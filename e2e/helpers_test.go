package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// gdbPath is the gdb the tests drive.
const gdbPath = "/usr/bin/gdb"

// gdbTimeout bounds one gdb session.
const gdbTimeout = 90 * time.Second

// listenTimeout bounds the wait for the stub's "Listening on port" line.
const listenTimeout = 20 * time.Second

var (
	stubOnce   sync.Once
	stubBinary string
	stubErr    error
	stubTmpDir string
)

// TestMain removes the directory of the gotpstub binary built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if stubTmpDir != "" {
		os.RemoveAll(stubTmpDir)
	}
	os.Exit(code)
}

// repoRoot is the module root (the parent of this package's directory).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	return filepath.Dir(wd)
}

// requireTools skips the test when gdb or gcc is missing.
func requireTools(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(gdbPath); err != nil {
		t.Skipf("gdb not available at %s: %v", gdbPath, err)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("gcc not available: %v", err)
	}
}

// stubPath returns the stub to test: $GOTPSTUB_STUB, or ./cmd/gotpstub
// built once per run. It skips the test when neither is usable.
func stubPath(t *testing.T) string {
	t.Helper()
	skipOnThisISA(t)
	requireTools(t)
	if env := os.Getenv("GOTPSTUB_STUB"); env != "" {
		if _, err := os.Stat(env); err != nil {
			t.Fatalf("GOTPSTUB_STUB=%s: %v", env, err)
		}
		return env
	}
	root := repoRoot(t)
	stubOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gotpstub-e2e-")
		if err != nil {
			stubErr = fmt.Errorf("temp dir for the stub: %w", err)
			return
		}
		stubTmpDir = dir
		bin := filepath.Join(dir, "gotpstub")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/gotpstub")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			stubErr = fmt.Errorf("go build ./cmd/gotpstub: %w\n%s", err, out)
			return
		}
		stubBinary = bin
	})
	if stubErr != nil {
		t.Skipf("no stub to test (set GOTPSTUB_STUB to use another one): %v", stubErr)
	}
	return stubBinary
}

// isGdbserver reports whether the stub under test is GDB's own gdbserver.
func isGdbserver(stub string) bool {
	return filepath.Base(stub) == "gdbserver"
}

// buildC compiles testdata sources (paths relative to ../testdata) with
// gcc -g -O0 plus extra flags into out (an absolute path) and returns out.
func buildC(t *testing.T, out string, sources []string, extra ...string) string {
	t.Helper()
	skipOnThisISA(t)
	requireTools(t)
	root := repoRoot(t)
	args := []string{"-g", "-O0", "-o", out}
	for _, s := range sources {
		args = append(args, filepath.Join(root, "testdata", s))
	}
	args = append(args, extra...)
	cmd := exec.Command("gcc", args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// buildProgram builds testdata/NAME.c into a temp dir, with -lpthread.
func buildProgram(t *testing.T, name string) string {
	t.Helper()
	return buildC(t, filepath.Join(t.TempDir(), name), []string{name + ".c"}, "-lpthread")
}

// lockedBuffer is a bytes.Buffer safe for one writer and many readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// stubProcess is one running stub.
type stubProcess struct {
	t      *testing.T
	cmd    *exec.Cmd
	port   int
	output *lockedBuffer // the stub's and its inferior's stdout+stderr
	done   chan struct{} // closed when the stub has exited
	err    error         // Wait's result, valid after done
}

var (
	processCreatedRE = regexp.MustCompile(`Process .* created; pid = (\d+)`)
	listeningRE      = regexp.MustCompile(`Listening on port (\d+)`)
)

// pickPort returns a localhost TCP port ≥ 20000 that was free a moment ago.
func pickPort(t *testing.T) int {
	t.Helper()
	for range 200 {
		port := 20000 + rand.IntN(20000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port found in 20000..39999")
	return 0
}

// startStub runs `STUB FLAGS... 127.0.0.1:PORT REST...` and waits for its
// "Listening on port" line. flags go before the address (e.g. --once,
// --multi), rest after it (a program and its arguments, or --attach PID).
// The stub and anything it started are killed when the test ends.
func startStub(t *testing.T, flags []string, rest ...string) *stubProcess {
	t.Helper()
	stub := stubPath(t)
	var lastOutput string
	for attempt := 0; attempt < 5; attempt++ {
		port := pickPort(t)
		args := append(append(append([]string{}, flags...), "127.0.0.1:"+strconv.Itoa(port)), rest...)
		s := &stubProcess{t: t, port: port, output: &lockedBuffer{}, done: make(chan struct{})}
		s.cmd = exec.Command(stub, args...)
		s.cmd.Stdout = s.output
		s.cmd.Stderr = s.output
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("start %s %s: %v", stub, strings.Join(args, " "), err)
		}
		go func() {
			s.err = s.cmd.Wait()
			close(s.done)
		}()
		t.Cleanup(s.kill)
		deadline := time.Now().Add(listenTimeout)
		for time.Now().Before(deadline) {
			out := s.output.String()
			if listeningRE.MatchString(out) {
				return s
			}
			select {
			case <-s.done:
				deadline = time.Time{}
			case <-time.After(20 * time.Millisecond):
			}
		}
		lastOutput = s.output.String()
		s.kill()
		if strings.Contains(lastOutput, "Address already in use") {
			continue
		}
		t.Fatalf("%s %s: no \"Listening on port\" line within %v; output:\n%s",
			stub, strings.Join(args, " "), listenTimeout, lastOutput)
	}
	t.Fatalf("stub could not bind a port in 5 attempts; last output:\n%s", lastOutput)
	return nil
}

// inferiorPid is the pid from the stub's "Process ... created; pid = N"
// line, or 0.
func (s *stubProcess) inferiorPid() int {
	m := processCreatedRE.FindStringSubmatch(s.output.String())
	if m == nil {
		return 0
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// describeProcess describes process pid for a failure message: gone (it
// died: the caller saw no normal end), or each thread's state and the
// signals pending and blocked (a stopped program, a hung one).
func describeProcess(pid int) string {
	if pid == 0 {
		return "no pid"
	}
	dirs, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return fmt.Sprintf("process %d gone: killed by a signal, or exited without its output", pid)
	}
	var parts []string
	for _, d := range dirs {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, d.Name()))
		if err != nil {
			continue
		}
		var keep []string
		for _, line := range strings.Split(string(st), "\n") {
			for _, key := range []string{"State:", "SigPnd:", "ShdPnd:", "SigBlk:", "TracerPid:"} {
				if strings.HasPrefix(line, key) {
					keep = append(keep, strings.Join(strings.Fields(line), " "))
				}
			}
		}
		parts = append(parts, "thread "+d.Name()+": "+strings.Join(keep, ", "))
	}
	return fmt.Sprintf("process %d alive: %s", pid, strings.Join(parts, "; "))
}

// target is the address gdb connects to.
func (s *stubProcess) target() string {
	return "127.0.0.1:" + strconv.Itoa(s.port)
}

// waitExit waits up to d for the stub to exit and reports whether it did.
func (s *stubProcess) waitExit(d time.Duration) bool {
	select {
	case <-s.done:
		return true
	case <-time.After(d):
		return false
	}
}

// kill ends the stub, its process group and the inferior it created.
func (s *stubProcess) kill() {
	if pid := s.inferiorPid(); pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-s.done:
	default:
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		s.cmd.Process.Kill()
		<-s.done
	}
}

// gdbSession describes one batch gdb run.
type gdbSession struct {
	program  string   // local program file; "" runs gdb without one
	commands []string // one gdb command each; a command with newlines is sourced from a file
	// keepSysroot leaves gdb's default sysroot "target:" (libraries read
	// from the stub with vFile); otherwise it is "/" (local files).
	keepSysroot bool
}

// gdbArgs returns gdb's command line for sess, writing multi-line
// commands to files in a temp dir.
func gdbArgs(t *testing.T, sess gdbSession) []string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"-batch", "-nx", "-ex", "set width 0", "-ex", "set height 0",
		"-ex", "set confirm off"}
	if !sess.keepSysroot {
		args = append(args, "-ex", "set sysroot /")
	}
	for i, c := range sess.commands {
		if strings.Contains(c, "\n") {
			f := filepath.Join(dir, fmt.Sprintf("cmds%d.gdb", i))
			if err := os.WriteFile(f, []byte(c+"\n"), 0o644); err != nil {
				t.Fatalf("write gdb script: %v", err)
			}
			args = append(args, "-x", f)
			continue
		}
		args = append(args, "-ex", c)
	}
	if sess.program != "" {
		args = append(args, sess.program)
	}
	return args
}

// runGDB runs gdb -batch -nx with the session's commands and returns its
// combined stdout and stderr. It fails the test if gdb hangs.
func runGDB(t *testing.T, sess gdbSession) string {
	t.Helper()
	args := gdbArgs(t, sess)
	ctx, cancel := context.WithTimeout(context.Background(), gdbTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, gdbPath, args...)
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("gdb timed out after %v; output so far:\n%s", gdbTimeout, out.String())
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run gdb: %v", err)
	}
	t.Logf("gdb %s\n%s", strings.Join(args, " "), out.String())
	return out.String()
}

// gdbProcess is a gdb started in the background (startGDBSession).
type gdbProcess struct {
	cmd    *exec.Cmd
	output *lockedBuffer
	done   chan struct{} // closed when gdb has exited
}

// startGDBSession starts a batch gdb with the session's commands and returns
// at once; the test's cleanup kills it if it is still running.
func startGDBSession(t *testing.T, sess gdbSession) *gdbProcess {
	t.Helper()
	args := gdbArgs(t, sess)
	g := &gdbProcess{output: &lockedBuffer{}, done: make(chan struct{})}
	g.cmd = exec.Command(gdbPath, args...)
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.cmd.Stdout = g.output
	g.cmd.Stderr = g.output
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start gdb: %v", err)
	}
	go func() {
		_ = g.cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() {
		select {
		case <-g.done:
		default:
			syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
			<-g.done
		}
		t.Logf("gdb %s\n%s", strings.Join(args, " "), g.output.String())
	})
	return g
}

// killHard sends SIGKILL to gdb alone (not its process group) and
// waits for it to be gone.
func (g *gdbProcess) killHard() {
	syscall.Kill(g.cmd.Process.Pid, syscall.SIGKILL)
	<-g.done
}

// debugSession starts the stub with --once on prog (and its arguments)
// and runs gdb on prog connected to it, with the given commands after
// `target remote`. It returns gdb's output and the stub.
func debugSession(t *testing.T, prog string, progArgs []string, commands ...string) (string, *stubProcess) {
	t.Helper()
	stub := startStub(t, []string{"--once"}, append([]string{prog}, progArgs...)...)
	cmds := append([]string{"target remote " + stub.target()}, commands...)
	out := runGDB(t, gdbSession{program: prog, commands: cmds})
	return out, stub
}

// mustContain fails the test for each want missing from out.
func mustContain(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
}

// mustMatch fails the test unless out matches the regular expression and
// returns the submatches.
func mustMatch(t *testing.T, out, expr string) []string {
	t.Helper()
	m := regexp.MustCompile(expr).FindStringSubmatch(out)
	if m == nil {
		t.Errorf("output does not match %q", expr)
	}
	return m
}

// countMatches counts non-overlapping matches of expr in out.
func countMatches(out, expr string) int {
	return len(regexp.MustCompile(expr).FindAllStringIndex(out, -1))
}

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// regexpAll returns every submatch list of expr in out.
func regexpAll(out, expr string) [][]string {
	return regexp.MustCompile(expr).FindAllStringSubmatch(out, -1)
}
