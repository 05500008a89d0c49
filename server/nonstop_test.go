package server

import (
	"fmt"
	"strings"
	"testing"
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
