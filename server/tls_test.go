package server

import (
	"debug/elf"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// buildTLS compiles testdata/tls.c (non-PIE, so done's address is final).
func buildTLS(t *testing.T) string { return buildTestProgram(t, "tls", "-pthread") }

// tlsOffset is the st_value of a TLS symbol: its offset in the module's
// TLS block, what gdb sends in qGetTLSAddr.
func tlsOffset(t *testing.T, prog, name string) uint64 {
	t.Helper()
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_TLS {
			return s.Value
		}
	}
	t.Fatalf("no TLS symbol %s", name)
	return 0
}

func TestGetTLSAddr(t *testing.T) {
	prog := buildTLS(t)
	s := startSession(t, prog)
	off := tlsOffset(t, prog, "tlsvar")
	if got := s.ask(fmt.Sprintf("Z0,%x,1", symbol(t, prog, "done"))); got != "OK" {
		t.Fatalf("Z0: %q", got)
	}
	threadRe := regexp.MustCompile(`thread:([0-9a-fp.]+);`)
	for _, want := range []string{"07000000", "2a000000"} { // worker, then main
		stop := s.ask("vCont;c")
		m := threadRe.FindStringSubmatch(stop)
		if !strings.HasPrefix(stop, "T05") || m == nil {
			t.Fatalf("stop at done: %q", stop)
		}
		lib := s.ask("qXfer:libraries-svr4:read::0,fff")
		lm := regexp.MustCompile(`main-lm="0x([0-9a-f]+)"`).FindStringSubmatch(lib)
		if lm == nil {
			t.Fatalf("no main-lm in %q", trunc(lib))
		}
		addr := s.ask(fmt.Sprintf("qGetTLSAddr:%s,%x,%s", m[1], off, lm[1]))
		if addr == "" || addr[0] == 'E' {
			t.Fatalf("qGetTLSAddr: %q", addr)
		}
		if got := s.ask(fmt.Sprintf("m%s,4", addr)); got != want {
			t.Fatalf("thread %s: tlsvar at %s = %q, want %q", m[1], addr, got, want)
		}
		// lm 0 is module 1, the program itself (static executables).
		if got := s.ask(fmt.Sprintf("qGetTLSAddr:%s,%x,0", m[1], off)); got != addr {
			t.Errorf("lm 0: %q, want %q", got, addr)
		}
	}
	for _, bad := range []string{"qGetTLSAddr:", "qGetTLSAddr:1,2", "qGetTLSAddr:zz,0,0", "qGetTLSAddr:7fffffff,0,0", "qGetTLSAddr:1,0,0,0"} {
		if got := s.ask(bad); got != "E01" {
			t.Errorf("%q → %q, want E01", bad, got)
		}
	}
}
