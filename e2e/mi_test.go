package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// miGDB drives gdb through its machine interface, for tests that must
// act while the program runs (continue, wait, interrupt), which a -batch
// script cannot.
type miGDB struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	log   *lockedBuffer
}

// startMI starts gdb in MI mode on prog, asynchronous (mi-async on).
func startMI(t *testing.T, prog string) *miGDB {
	t.Helper()
	g := &miGDB{t: t, lines: make(chan string, 4096), log: &lockedBuffer{}}
	g.cmd = exec.Command(gdbPath, "--interpreter=mi3", "-nx", "-q", prog)
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var err error
	if g.stdin, err = g.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.cmd.Stderr = g.log
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start gdb: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			g.lines <- sc.Text()
		}
		close(g.lines)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
		_ = g.cmd.Wait()
		if t.Failed() {
			t.Logf("gdb MI transcript (tail):\n%s", tail(g.log.String(), 6000))
		}
	})
	for _, c := range []string{"-gdb-set mi-async on", "-gdb-set confirm off", "-gdb-set sysroot /",
		"-gdb-set width 0", "-gdb-set height 0"} {
		g.mustDo(c)
	}
	return g
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// next returns gdb's next output line, or false after d.
func (g *miGDB) next(d time.Duration) (string, bool) {
	select {
	case l, ok := <-g.lines:
		if ok {
			fmt.Fprintln(g.log, l)
		}
		return l, ok
	case <-time.After(d):
		return "", false
	}
}

// do sends one command (MI or CLI) and returns its result record (^done,
// ^running, ^error, ^connected) and the console output before it.
func (g *miGDB) do(cmd string) (result, console string) {
	g.t.Helper()
	fmt.Fprintln(g.log, "> "+cmd)
	if _, err := io.WriteString(g.stdin, cmd+"\n"); err != nil {
		g.t.Fatalf("gdb: %v", err)
	}
	var con strings.Builder
	deadline := time.Now().Add(gdbTimeout)
	for {
		l, ok := g.next(time.Until(deadline))
		if !ok {
			g.t.Fatalf("gdb: no result for %q", cmd)
		}
		switch {
		case strings.HasPrefix(l, "~"), strings.HasPrefix(l, "@"): // console, target output
			con.WriteString(unquoteMI(l[1:]))
		case strings.HasPrefix(l, "^"):
			return l, con.String()
		}
	}
}

// mustDo is do that fails the test on ^error.
func (g *miGDB) mustDo(cmd string) string {
	g.t.Helper()
	res, con := g.do(cmd)
	if strings.HasPrefix(res, "^error") {
		g.t.Fatalf("gdb %q: %s", cmd, res)
	}
	return con
}

// waitStopped waits up to d for a *stopped record and returns it.
func (g *miGDB) waitStopped(d time.Duration) (string, bool) {
	deadline := time.Now().Add(d)
	for {
		l, ok := g.next(time.Until(deadline))
		if !ok {
			return "", false
		}
		if strings.HasPrefix(l, "*stopped") {
			return l, true
		}
	}
}

// unquoteMI decodes an MI C string ("...\n").
func unquoteMI(s string) string {
	s = strings.TrimSuffix(strings.TrimPrefix(s, `"`), `"`)
	r := strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\"`, `"`, `\\`, `\`)
	return r.Replace(s)
}

// miSessionAt starts the stub (with flags) on prog and gdb/MI connected
// to it, runs the program to function at (a breakpoint, deleted then),
// and returns both, the program stopped there.
func miSessionAt(t *testing.T, prog string, flags []string, at string) (*miGDB, *stubProcess) {
	t.Helper()
	stub := startStub(t, flags, prog)
	g := startMI(t, prog)
	g.mustDo("-target-select remote " + stub.target())
	g.mustDo("break " + at)
	if res, _ := g.do("-exec-continue"); !strings.HasPrefix(res, "^running") {
		t.Fatalf("continue: %s", res)
	}
	if _, ok := g.waitStopped(30 * time.Second); !ok {
		t.Fatalf("no stop at %s", at)
	}
	g.mustDo("delete")
	return g, stub
}
