package rsp

import (
	"bytes"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// runFakeStub serves one gdb connection on ln with a minimal target that
// has no process, answering the packets gdb sends while connecting and the
// test packets below. It returns the packets it received and its packet log.
func runFakeStub(t *testing.T, ln net.Listener, noAck bool) <-chan fakeStubResult {
	t.Helper()
	got := make(chan fakeStubResult, 1)
	go func() {
		var seen []string
		var logMu sync.Mutex
		var logBuf bytes.Buffer
		defer func() {
			logMu.Lock()
			got <- fakeStubResult{packets: seen, log: logBuf.String()}
			logMu.Unlock()
		}()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		c := NewConn(nc)
		defer c.Close()
		c.SetLog(lockedWriter{&logMu, &logBuf})
		m := NewMux()
		supported := "PacketSize=4000"
		if noAck {
			supported += ";QStartNoAckMode+"
		}
		m.Handle("qSupported", func([]byte) []byte { return []byte(supported) })
		m.Handle("!", func([]byte) []byte { return OK })
		m.Handle("?", func([]byte) []byte { return []byte("W00") })
		m.Handle("qRunLength", func([]byte) []byte {
			return []byte(strings.Repeat("0", 200) + "abc" + strings.Repeat("f", 7) + "x" + strings.Repeat("9", 8))
		})
		m.Handle("qError", func([]byte) []byte { return ErrorMessage("bad $thing# here") })
		for p := range c.Incoming() {
			if p.Interrupt {
				continue
			}
			seen = append(seen, string(p.Data))
			if string(p.Data) == "QStartNoAckMode" {
				if err := c.Send(OK); err != nil {
					return
				}
				c.SetNoAck(true)
				continue
			}
			reply, found := m.Dispatch(p.Data)
			if !found {
				reply = nil
			}
			if err := c.Send(reply); err != nil {
				return
			}
		}
	}()
	return got
}

// fakeStubResult is what runFakeStub observed.
type fakeStubResult struct {
	packets []string
	log     string
}

// TestWithRealGDB connects gdb to a fake stub built on Conn and Mux and
// checks that gdb decodes run-length encoded replies, with and without
// acknowledgments.
func TestWithRealGDB(t *testing.T) {
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		t.Skip("gdb not available")
	}
	for _, noAck := range []bool{false, true} {
		name := "ack"
		if noAck {
			name = "noack"
		}
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			seen := runFakeStub(t, ln, noAck)
			cmd := exec.Command(gdb, "-nx", "-batch",
				"-ex", "set remotetimeout 5",
				"-ex", "target extended-remote "+ln.Addr().String(),
				"-ex", "maint packet qRunLength",
				"-ex", "maint packet qError",
				"-ex", "disconnect")
			done := make(chan struct{})
			var out []byte
			var runErr error
			go func() {
				out, runErr = cmd.CombinedOutput()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("gdb did not finish:\n%s", out)
			}
			if runErr != nil {
				t.Fatalf("gdb: %v\n%s", runErr, out)
			}
			wantRLE := `received: "` + strings.Repeat("0", 200) + "abc" + strings.Repeat("f", 7) + "x" + strings.Repeat("9", 8) + `"`
			if !strings.Contains(string(out), wantRLE) {
				t.Errorf("gdb output lacks %s:\n%s", wantRLE, out)
			}
			if !strings.Contains(string(out), `received: "E.bad ?thing? here"`) {
				t.Errorf("gdb output lacks the sanitised error:\n%s", out)
			}
			res := <-seen
			packets := res.packets
			if !strings.Contains(res.log, `putpkt ("$0*~0*~0* abcf*\"fx9*\"99#`) {
				t.Errorf("reply was not run-length encoded on the wire; log:\n%s", res.log)
			}
			joined := strings.Join(packets, "\n")
			if !strings.Contains(joined, "qSupported") || !strings.Contains(joined, "qRunLength") {
				t.Errorf("stub saw %q", packets)
			}
			if gotNoAck := strings.Contains(joined, "QStartNoAckMode"); gotNoAck != noAck {
				t.Errorf("QStartNoAckMode sent = %v, want %v", gotNoAck, noAck)
			}
		})
	}
}
