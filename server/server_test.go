package server

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotpstub/agentexpr"
	"gotpstub/rsp"
	"gotpstub/tdesc"
)

// buildTestProgram compiles testdata/NAME.c as a non-PIE program (so
// symbol addresses are final) with the extra gcc flags.
func buildTestProgram(t *testing.T, name string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-g", "-O0", "-no-pie", "-fno-pie", "-o", out, "testdata/" + name + ".c"}, flags...)
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return out
}

// buildCount compiles testdata/count.c.
func buildCount(t *testing.T) string { return buildTestProgram(t, "count") }

func symbol(t *testing.T, prog, name string) uint64 {
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
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("no symbol %s", name)
	return 0
}

// session is a server with a launched program and a client connection.
type session struct {
	t      *testing.T
	client *rawClient
	done   chan error
	srv    *Server
}

// rawClient is a minimal gdb-side framing: it sends packets without
// run-length encoding (as gdb does), acks replies and expands their RLE.
type rawClient struct {
	c     net.Conn
	rd    *bufio.Reader
	noAck bool // after QStartNoAckMode: no '+' either way
}

func (r *rawClient) Close() error { return r.c.Close() }

func (r *rawClient) send(pkt string) error {
	r.c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(r.c, "$%s#%02x", pkt, rsp.Checksum([]byte(pkt))); err != nil {
		return err
	}
	if r.noAck {
		return nil
	}
	b, err := r.rd.ReadByte()
	if err != nil {
		return err
	}
	if b != '+' {
		return fmt.Errorf("got %q instead of an ack", b)
	}
	return nil
}

// readFrame reads the next frame that starts with start ('$' for a
// packet, '%' for a notification), skipping anything before it, and
// returns its checked payload (run-length encoding left as it is).
func (r *rawClient) readFrame(start byte) (string, error) {
	r.c.SetDeadline(time.Now().Add(20 * time.Second))
	for {
		b, err := r.rd.ReadByte()
		if err != nil {
			return "", err
		}
		if b == start {
			break
		}
	}
	body, err := r.rd.ReadString('#')
	if err != nil {
		return "", err
	}
	body = body[:len(body)-1]
	var cs [2]byte
	if _, err := io.ReadFull(r.rd, cs[:]); err != nil {
		return "", err
	}
	if fmt.Sprintf("%02x", rsp.Checksum([]byte(body))) != string(cs[:]) {
		return "", fmt.Errorf("bad checksum on %q", body)
	}
	return body, nil
}

func (r *rawClient) recv() (string, error) {
	body, err := r.readFrame('$')
	if err != nil {
		return "", err
	}
	if r.noAck {
		// nothing to acknowledge
	} else if _, err := r.c.Write([]byte("+")); err != nil {
		return "", err
	}
	var out []byte
	for i := 0; i < len(body); i++ {
		if body[i] == '*' && i > 0 && i+1 < len(body) {
			n := int(body[i+1]) - 29
			out = append(out, bytes.Repeat(out[len(out)-1:], n)...)
			i++
			continue
		}
		out = append(out, body[i])
	}
	return string(out), nil
}

func startSession(t *testing.T, prog string) *session {
	t.Helper()
	return startSessionConfig(t, prog, Config{})
}

// startSessionConfig is startSession with cfg (its Progress and PacketLog
// are set here).
func startSessionConfig(t *testing.T, prog string, cfg Config) *session {
	t.Helper()
	cfg.Progress, cfg.PacketLog = &bytes.Buffer{}, testLog(t)
	srv := New(cfg)
	if err := srv.Launch([]string{prog}); err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	s := &session{t: t, client: &rawClient{c: b, rd: bufio.NewReader(b)}, done: make(chan error, 1), srv: srv}
	go func() { s.done <- srv.Serve(a) }()
	t.Cleanup(func() {
		s.client.Close()
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			t.Error("server did not return after the client closed")
		}
		srv.Shutdown()
	})
	return s
}

// ask sends one packet and returns the reply, skipping console output.
func (s *session) ask(pkt string) string {
	s.t.Helper()
	if err := s.client.send(pkt); err != nil {
		s.t.Fatalf("send %q: %v", pkt, err)
	}
	for {
		r, err := s.client.recv()
		if err != nil {
			s.t.Fatalf("reply to %q: %v", pkt, err)
		}
		if len(r) > 1 && r[0] == 'O' && r != "OK" && pkt != "g" && !strings.HasPrefix(pkt, "m") {
			continue // console output
		}
		return r
	}
}

func TestPacketErrors(t *testing.T) {
	s := startSession(t, buildCount(t))
	layout := tdesc.AMD64Linux(s.srv.layout.HasAVX)
	tests := []struct {
		pkt  string
		want func(string) bool
		desc string
	}{
		{"qSupported:multiprocess+;swbreak+", func(r string) bool {
			return strings.Contains(r, "PacketSize=4000") && strings.Contains(r, "swbreak+") && strings.Contains(r, "qXfer:features:read+") &&
				strings.Contains(r, "QCatchSyscalls+")
		}, "features"},
		{"qNoSuchPacket", func(r string) bool { return r == "" }, "unknown packet → empty"},
		{"m", func(r string) bool { return r == "E02" }, "malformed m"},
		{"mzz,4", func(r string) bool { return r == "E02" }, "bad hex address"},
		{"m0,8", func(r string) bool { return strings.HasPrefix(r, "E") }, "unmapped memory"},
		{"M0,2:zz", func(r string) bool { return r == "E02" }, "bad hex data"},
		{"M0,4:00000000", func(r string) bool { return strings.HasPrefix(r, "E") }, "write to unmapped memory"},
		{"X0,1:", func(r string) bool { return r == "E02" }, "X length mismatch"},
		{"Hg7fffffff", func(r string) bool { return r == "E10" }, "unknown thread"},
		{"T7fffffff", func(r string) bool { return r == "E10" }, "dead thread"},
		{"pffff", func(r string) bool { return r == "E02" }, "bad register number"},
		{"P10=zz", func(r string) bool { return r == "E02" }, "bad register value"},
		{"Z9,0,1", func(r string) bool { return r == "" }, "unsupported breakpoint type"},
		{"Z0,0,1", func(r string) bool { return strings.HasPrefix(r, "E") }, "breakpoint on unmapped memory"},
		{"g", func(r string) bool { return len(r) == 2*layout.Size }, "g has the layout's size"},
		{"vCont;q", func(r string) bool { return strings.HasPrefix(r, "E.") }, "unknown vCont action"},
		{"QCatchSyscalls:1;zz", func(r string) bool { return r == "E02" }, "bad syscall number"},
		{"qXfer:features:read:nosuch.xml:0,100", func(r string) bool { return strings.HasPrefix(r, "E") }, "unknown annex"},
		{"qXfer:features:read:target.xml:0,fff", func(r string) bool {
			return (r[0] == 'm' || r[0] == 'l') && strings.Contains(r, "i386:x86-64")
		}, "target.xml"},
		{"qRcmd," + hex.EncodeToString([]byte("frobnicate")), func(r string) bool { return r == "OK" }, "unknown monitor command"},
	}
	for _, tc := range tests {
		if got := s.ask(tc.pkt); !tc.want(got) {
			t.Errorf("%s: %q → %q", tc.desc, tc.pkt, trunc(got))
		}
	}
	// After all that the stub still works: the program runs to its exit code.
	// gdb offered multiprocess+ above, so the exit names the process.
	if got, want := s.ask("vCont;c"), fmt.Sprintf("W0a;process:%x", s.srv.lastPid); got != want {
		t.Fatalf("run to exit: %q, want %q", got, want)
	}
}

// The safety switches refuse their packets with a message naming the
// option; without them the same packets are served.
func TestSafetySwitches(t *testing.T) {
	prog := buildCount(t)
	vfile := "vFile:setfs:0"
	tsave := "QTSave:" + hex.EncodeToString([]byte(filepath.Join(t.TempDir(), "t.tf")))
	refused := startSessionConfig(t, prog, Config{NoFileAccess: true, NoRunAttach: true, NoSave: true})
	for pkt, want := range map[string]string{
		vfile: "E.vFile refused: the stub runs with --no-file-access",
		"vRun;" + hex.EncodeToString([]byte(prog)): "E.vRun refused: the stub runs with --no-run-attach",
		"vAttach;1": "E.vAttach refused: the stub runs with --no-run-attach",
		tsave:       "E.QTSave: refused: the stub runs with --no-tsave",
	} {
		if got := refused.ask(pkt); got != want {
			t.Errorf("%s: %q, want %q", pkt, got, want)
		}
	}
	open := startSessionConfig(t, prog, Config{})
	for _, pkt := range []string{vfile, tsave} {
		if got := open.ask(pkt); strings.Contains(got, "refused") || !strings.HasPrefix(got, "F") && got != "OK" {
			t.Errorf("%s without safety switches: %q", pkt, got)
		}
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// The same session in no-ack mode, as gdb runs it: most packets are then
// handled on the connection's reader goroutine and resumptions on
// Serve's (server/dispatch.go), in order.
func TestBreakpointStepOverAndMemory(t *testing.T) {
	for _, noAck := range []bool{false, true} {
		t.Run(fmt.Sprint("noack=", noAck), func(t *testing.T) { breakpointStepOverAndMemory(t, noAck) })
	}
}

func breakpointStepOverAndMemory(t *testing.T, noAck bool) {
	prog := buildCount(t)
	s := startSession(t, prog)
	if noAck {
		if got := s.ask("QStartNoAckMode"); got != "OK" {
			t.Fatalf("QStartNoAckMode: %q", got)
		}
		s.client.noAck = true
	}
	tick := symbol(t, prog, "tick")
	counter := symbol(t, prog, "counter")
	if got := s.ask(fmt.Sprintf("Z0,%x,1", tick)); got != "OK" {
		t.Fatalf("Z0: %q", got)
	}
	// Memory under a breakpoint reads as the original code.
	orig := s.ask(fmt.Sprintf("m%x,1", tick))
	if orig == "cc" {
		t.Fatal("breakpoint byte leaked into memory reads")
	}
	for i := 1; i <= 4; i++ {
		r := s.ask("vCont;c")
		if !strings.HasPrefix(r, "T05") || !strings.Contains(r, "swbreak:") {
			t.Fatalf("hit %d: %q", i, r)
		}
		// The expedited pc (register 0x10) is the breakpoint address.
		var pc [8]byte
		binary.LittleEndian.PutUint64(pc[:], tick)
		if !strings.Contains(r, "10:"+hex.EncodeToString(pc[:])+";") {
			t.Fatalf("hit %d: pc not at tick %#x: %q", i, tick, r)
		}
		// counter holds the sum of the previous calls.
		v := s.ask(fmt.Sprintf("m%x,4", counter))
		b, _ := hex.DecodeString(v)
		if want := uint32((i - 1) * i / 2); len(b) != 4 || binary.LittleEndian.Uint32(b) != want {
			t.Fatalf("hit %d: counter = %q, want %d", i, v, want)
		}
	}
	// Writing memory: set counter so the exit code changes: 100 + 4.
	if got := s.ask(fmt.Sprintf("M%x,4:64000000", counter)); got != "OK" {
		t.Fatalf("M: %q", got)
	}
	if got := s.ask(fmt.Sprintf("z0,%x,1", tick)); got != "OK" {
		t.Fatalf("z0: %q", got)
	}
	if got := s.ask("vCont;c"); got != "W68" {
		t.Fatalf("exit: %q, want W68 (104)", got)
	}
	if got := s.ask("g"); !strings.HasPrefix(got, "E") {
		t.Fatalf("g after exit: %q, want an error", got)
	}
}

func TestSignalTables(t *testing.T) {
	for sig := 1; sig <= 64; sig++ {
		if sig == 16 {
			continue // SIGSTKFLT has no GDB number
		}
		g := HostToGDBSignal(sig)
		back, ok := GDBToHostSignal(g)
		if !ok || back != sig {
			t.Errorf("signal %d → gdb %d → %d (%v)", sig, g, back, ok)
		}
	}
	if HostToGDBSignal(10) != 30 || HostToGDBSignal(17) != 20 {
		t.Error("SIGUSR1/SIGCHLD mapping wrong")
	}
}

func TestMain(m *testing.M) {
	os.Exit(m.Run())
}

type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	if os.Getenv("GOTPSTUB_TEST_LOG") != "" {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLog(t *testing.T) tlog { return tlog{t} }

// TestDebugLogReportsJIT: with --debug, every agent expression gdb
// downloads is reported as compiled or as falling back, with the reason.
func TestDebugLogReportsJIT(t *testing.T) {
	var log bytes.Buffer
	srv := New(Config{Progress: &bytes.Buffer{}, Log: &log})
	// A condition ($rax < 3), a collection (reg 0 via trace_quick-free
	// expression) and a printf action, which the JIT leaves to the
	// interpreter.
	printf, err := agentexpr.Assemble(`const8 5; const8 0; const8 0; printf 1 "%d"; end`)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkt := range []string{
		"QTinit",
		"QTDP:1:401000:E:0:0:X7,26000022031427-",
		"QTDP:-1:401000:X7,26000022031427-",
		fmt.Sprintf("QTDP:-1:401000:X%x,%x", len(printf), printf),
	} {
		if reply := srv.tracePacket([]byte(pkt)); string(reply) != "OK" {
			t.Fatalf("%s → %q", pkt, reply)
		}
	}
	out := log.String()
	for _, want := range []string{
		"jit: tracepoint 1 at 0x401000 condition: compiled to",
		"jit: tracepoint 1 at 0x401000 action 0: compiled to",
		"falls back to the interpreter: printf",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("debug log lacks %q:\n%s", want, out)
		}
	}
}
