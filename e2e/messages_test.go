package e2e

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runStubOnly runs the stub with args (no gdb) and returns its output
// and exit status; it must end within 10 s.
func runStubOnly(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(stubPath(t), args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not exit; output:\n%s", args, out.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// The stub's own failures say plainly what went wrong, once (issue 10).
func TestStartupMessages(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's messages")
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyAddr := busy.Addr().String()

	_, traced := startSleeper(t, "60")
	// A tracer of our own holds the sleeper (gdb would do the same).
	tracer := exec.Command(gdbPath, "-batch", "-nx", "-p", strconv.Itoa(traced.Process.Pid), "-ex", "shell sleep 20")
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tracer.Process.Kill(); tracer.Wait() })
	if !waitFor(10*time.Second, func() bool { return tracerOf(traced.Process.Pid) != 0 }) {
		t.Fatal("gdb did not attach to the sleeper")
	}

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing program", []string{"--once", "127.0.0.1:0", "/nonexistent/prog"},
			"Cannot exec /nonexistent/prog: no such file or directory.\nExiting\n"},
		{"no such process", []string{"--once", "--attach", "127.0.0.1:0", "999999999"},
			"Cannot attach to process 999999999: no such process\nExiting\n"},
		{"already traced", []string{"--once", "--attach", "127.0.0.1:0", strconv.Itoa(traced.Process.Pid)},
			"Cannot attach to process " + strconv.Itoa(traced.Process.Pid) + ": already traced by process "},
		// The port is bound before the program starts: nothing is run.
		{"port in use", []string{"--once", busyAddr, "/bin/true"},
			"Can't bind address: Address already in use.\nExiting\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, status := runStubOnly(t, c.args...)
			if status == 0 || !strings.HasPrefix(out, c.want) {
				t.Errorf("status %d, output:\n%q\nwant it to start with\n%q", status, out, c.want)
			}
			if strings.Contains(out, "Process ") {
				t.Errorf("a program was started: %q", out)
			}
		})
	}
}

// tracerOf returns the TracerPid of process pid (0: none).
func tracerOf(pid int) int {
	b, err := exec.Command("awk", "/^TracerPid:/ {print $2}", "/proc/"+strconv.Itoa(pid)+"/status").Output()
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}
