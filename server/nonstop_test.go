package server

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// recvNotification reads the next asynchronous notification (%...#cs)
// and returns its payload.
func (r *rawClient) recvNotification() (string, error) { return r.readFrame('%') }

// TestNonStopProtocol walks count.c through non-stop mode packet by
// packet: resumptions are answered OK at once, each stop comes as a
// %Stop notification that vStopped acknowledges, ? lists the stopped
// thread, and the exit comes as a notification too.
func TestNonStopProtocol(t *testing.T) {
	prog := buildCount(t)
	s := startSession(t, prog)
	if got := s.ask("qSupported:multiprocess-"); !strings.Contains(got, "QNonStop+") {
		t.Fatalf("qSupported does not offer QNonStop: %q", got)
	}
	for pkt, want := range map[string]string{"QNonStop:2": "E.", "QNonStop:1": "OK"} {
		if got := s.ask(pkt); !strings.HasPrefix(got, want) {
			t.Fatalf("%s: %q, want %s...", pkt, got, want)
		}
	}
	if got := s.ask("?"); !strings.HasPrefix(got, "T05thread:") {
		t.Fatalf("?: %q, want the stopped thread", got)
	}
	if got := s.ask("vStopped"); got != "OK" {
		t.Fatalf("vStopped after ?: %q, want OK (one thread)", got)
	}
	tick := symbol(t, prog, "tick")
	if got := s.ask(fmt.Sprintf("Z0,%x,1", tick)); got != "OK" {
		t.Fatalf("Z0: %q", got)
	}
	for i := 1; i <= 2; i++ {
		if got := s.ask("vCont;c"); got != "OK" {
			t.Fatalf("vCont;c %d: %q, want OK at once", i, got)
		}
		n, err := s.client.recvNotification()
		if err != nil {
			t.Fatalf("hit %d: %v", i, err)
		}
		if !strings.HasPrefix(n, "Stop:T05thread:") || !strings.Contains(n, "swbreak:") {
			t.Fatalf("hit %d: notification %q", i, n)
		}
		if got := s.ask("vStopped"); got != "OK" {
			t.Fatalf("vStopped: %q", got)
		}
		if got := s.ask("g"); strings.HasPrefix(got, "E") || len(got) < 100 {
			t.Fatalf("registers of the stopped thread: %q", got)
		}
	}
	if got := s.ask(fmt.Sprintf("z0,%x,1", tick)); got != "OK" {
		t.Fatalf("z0: %q", got)
	}
	if got := s.ask("vCont;c"); got != "OK" {
		t.Fatalf("last vCont;c: %q", got)
	}
	n, err := s.client.recvNotification()
	if err != nil || n != "Stop:W0a" {
		t.Fatalf("exit notification %q (%v), want Stop:W0a", n, err)
	}
	if got := s.ask("vStopped"); got != "OK" {
		t.Fatalf("vStopped after the exit: %q", got)
	}
}

// TestNonStopAttach: vAttach in non-stop mode answers OK, and the
// attached thread's stop (signal 0) comes as a notification once gdb asks
// for it (vCont;t), as gdb expects.
func TestNonStopAttach(t *testing.T) {
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Skipf("sleep: %v", err)
	}
	defer func() {
		_ = sleeper.Process.Kill()
		_ = sleeper.Wait()
	}()
	srv := New(Config{Multi: true, Progress: &bytes.Buffer{}, PacketLog: testLog(t)})
	a, b := net.Pipe()
	s := &session{t: t, client: &rawClient{c: b, rd: bufio.NewReader(b)}, done: make(chan error, 1), srv: srv}
	go func() { s.done <- srv.Serve(a) }()
	defer func() {
		s.client.Close()
		<-s.done
		srv.Shutdown()
	}()
	if got := s.ask("QNonStop:1"); got != "OK" {
		t.Fatalf("QNonStop:1: %q", got)
	}
	if got := s.ask("?"); got != "OK" {
		t.Fatalf("? with no process in non-stop mode: %q, want OK", got)
	}
	if got := s.ask(fmt.Sprintf("vAttach;%x", sleeper.Process.Pid)); got != "OK" {
		t.Fatalf("vAttach in non-stop mode: %q, want OK", got)
	}
	if got := s.ask(fmt.Sprintf("vCont;t:%x", sleeper.Process.Pid)); got != "OK" {
		t.Fatalf("vCont;t after the attach: %q, want OK", got)
	}
	n, err := s.client.recvNotification()
	if want := fmt.Sprintf("Stop:T00thread:%x;", sleeper.Process.Pid); err != nil || !strings.HasPrefix(n, want) {
		t.Fatalf("notification %q (%v), want %s...", n, err, want)
	}
	if got := s.ask("vStopped"); got != "OK" {
		t.Fatalf("vStopped: %q", got)
	}
	if got := s.ask("D"); got != "OK" {
		t.Fatalf("detach: %q", got)
	}
}

// TestNonStopListsToldForkChildren: two threads fork at once in non-stop
// mode. The first fork's %Stop tells gdb of its child; the second waits
// behind it (until vStopped). qfThreadInfo meanwhile lists the first
// child, held, but not the second: gdb, not knowing that fork, would
// take the thread for one of a new process (as gdbserver, which lists a
// fork child only once its fork event is reported).
func TestNonStopListsToldForkChildren(t *testing.T) {
	prog := buildTestProgram(t, "twoforks", "-pthread")
	s := startSession(t, prog)
	if got := s.ask("qSupported:multiprocess+;fork-events+;vfork-events+"); !strings.Contains(got, "fork-events+") {
		t.Fatalf("qSupported: %q", got)
	}
	s.ask("QNonStop:1")
	s.ask("?")
	s.ask("vStopped")
	if got := s.ask("vCont;c"); got != "OK" {
		t.Fatalf("vCont;c: %q", got)
	}
	n, err := s.client.recvNotification()
	if err != nil {
		t.Fatal(err)
	}
	first := regexp.MustCompile(`fork:p([0-9a-f]+)\.`).FindStringSubmatch(n)
	if first == nil {
		t.Fatalf("first stop %q, want a fork", n)
	}
	time.Sleep(300 * time.Millisecond) // the second fork happens meanwhile
	var listed []string
	for r := s.ask("qfThreadInfo"); strings.HasPrefix(r, "m"); r = s.ask("qsThreadInfo") {
		listed = append(listed, strings.Split(r[1:], ",")...)
	}
	pids := map[string]bool{}
	for _, id := range listed {
		if pid, _, ok := strings.Cut(strings.TrimPrefix(id, "p"), "."); ok {
			pids[pid] = true
		}
	}
	next := s.ask("vStopped") // the second fork, now told
	if next == "OK" {
		if next, err = s.client.recvNotification(); err != nil {
			t.Fatal(err)
		}
	}
	second := regexp.MustCompile(`fork:p([0-9a-f]+)\.`).FindStringSubmatch(next)
	if second == nil {
		t.Fatalf("second stop %q, want the other fork", next)
	}
	if !pids[first[1]] || pids[second[1]] || len(pids) != 2 {
		t.Errorf("qfThreadInfo lists processes %v; want the parent and the told child %s, not %s", pids, first[1], second[1])
	}
}
