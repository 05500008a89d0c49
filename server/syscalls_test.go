package server

import (
	"slices"
	"strings"
	"testing"
)

func TestParseCatchSyscalls(t *testing.T) {
	cases := []struct {
		pkt  string
		want syscallCatch
		ok   bool
	}{
		{"QCatchSyscalls:0", syscallCatch{}, true},
		{"QCatchSyscalls:1", syscallCatch{on: true}, true},
		{"QCatchSyscalls:1;e7", syscallCatch{on: true, nrs: []int{0xe7}}, true},
		{"QCatchSyscalls:1;1;27;e7", syscallCatch{on: true, nrs: []int{1, 0x27, 0xe7}}, true},
		{"QCatchSyscalls:", syscallCatch{}, false},
		{"QCatchSyscalls:2", syscallCatch{}, false},
		{"QCatchSyscalls:0;1", syscallCatch{}, false},
		{"QCatchSyscalls:1;", syscallCatch{}, false},
		{"QCatchSyscalls:1;zz", syscallCatch{}, false},
		{"QCatchSyscalls:1;-1", syscallCatch{}, false},
		{"QCatchSyscalls:1;ffffffffff", syscallCatch{}, false},
		{"QCatchSyscall:1", syscallCatch{}, false},
	}
	for _, c := range cases {
		got, err := parseCatchSyscalls([]byte(c.pkt))
		if (err == nil) != c.ok || got.on != c.want.on || !slices.Equal(got.nrs, c.want.nrs) {
			t.Errorf("%q: %+v, %v; want %+v (ok %v)", c.pkt, got, err, c.want, c.ok)
		}
	}
}

func FuzzParseCatchSyscalls(f *testing.F) {
	for _, s := range []string{"QCatchSyscalls:0", "QCatchSyscalls:1", "QCatchSyscalls:1;e7;3c", "QCatchSyscalls:1;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pkt string) {
		c, err := parseCatchSyscalls([]byte(pkt))
		if err != nil {
			return
		}
		if !strings.HasPrefix(pkt, "QCatchSyscalls:") || !c.on && len(c.nrs) > 0 {
			t.Fatalf("%q accepted as %+v", pkt, c)
		}
		for _, n := range c.nrs {
			if n < 0 {
				t.Fatalf("%q: syscall number %d", pkt, n)
			}
		}
	})
}

// TestCatchSyscallStop: after QCatchSyscalls naming exit_group, continuing
// stops at its entry with the stop reply's syscall_entry field, then the
// program exits.
func TestCatchSyscallStop(t *testing.T) {
	s := startSession(t, buildCount(t))
	if got := s.ask("QCatchSyscalls:1;e7"); got != "OK" {
		t.Fatalf("QCatchSyscalls: %q", got)
	}
	if got := s.ask("vCont;c"); !strings.HasPrefix(got, "T05syscall_entry:e7;thread:") {
		t.Fatalf("stop %q, want exit_group's syscall_entry", got)
	}
	if got := s.ask("QCatchSyscalls:0"); got != "OK" {
		t.Fatalf("QCatchSyscalls:0: %q", got)
	}
	if got := s.ask("vCont;c"); got != "W0a" {
		t.Fatalf("exit: %q, want W0a", got)
	}
}
