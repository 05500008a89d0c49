package rsp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// testPeer is the gdb side of an in-memory connection.
type testPeer struct {
	conn net.Conn
	mu   sync.Mutex
	got  []byte
	cond *sync.Cond
	eof  bool
}

// newTestPair returns a Conn and the peer at the other end of a net.Pipe.
func newTestPair(t *testing.T) (*Conn, *testPeer) {
	t.Helper()
	stubSide, peerSide := net.Pipe()
	p := &testPeer{conn: peerSide}
	p.cond = sync.NewCond(&p.mu)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := peerSide.Read(buf)
			p.mu.Lock()
			p.got = append(p.got, buf[:n]...)
			if err != nil {
				p.eof = true
			}
			p.cond.Broadcast()
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	c := NewConn(stubSide)
	t.Cleanup(func() {
		c.Close()
		peerSide.Close()
	})
	return c, p
}

// write sends raw bytes from the peer, failing the test on error.
func (p *testPeer) write(t *testing.T, s string) {
	t.Helper()
	if _, err := p.conn.Write([]byte(s)); err != nil {
		t.Fatalf("peer write %q: %v", s, err)
	}
}

// expect waits until the peer has received exactly want (as the next bytes)
// and consumes them.
func (p *testPeer) expect(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	timer := time.AfterFunc(5*time.Second, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer timer.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.got) < len(want) && !p.eof && time.Now().Before(deadline) {
		p.cond.Wait()
	}
	if len(p.got) < len(want) {
		t.Fatalf("peer received %q, want %q", p.got, want)
	}
	if string(p.got[:len(want)]) != want {
		t.Fatalf("peer received %q, want prefix %q", p.got, want)
	}
	p.got = p.got[len(want):]
}

// expectNothing checks that the peer received nothing more within a short
// time.
func (p *testPeer) expectNothing(t *testing.T) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.got) != 0 {
		t.Fatalf("peer received unexpected %q", p.got)
	}
}

// framed returns "$payload#cs".
func framed(payload string) string { return string(frame('$', []byte(payload))) }

// receive waits for the next item on Incoming.
func receive(t *testing.T, c *Conn) Packet {
	t.Helper()
	select {
	case p, ok := <-c.Incoming():
		if !ok {
			t.Fatalf("Incoming closed: %v", c.Err())
		}
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for a packet")
	}
	return Packet{}
}

// expectNoPacket checks that nothing is delivered within a short time.
func expectNoPacket(t *testing.T, c *Conn) {
	t.Helper()
	select {
	case p, ok := <-c.Incoming():
		if ok {
			t.Fatalf("unexpected packet %+v (%q)", p, p.Data)
		}
	case <-time.After(50 * time.Millisecond):
	}
}

func TestChecksum(t *testing.T) {
	tests := []struct {
		in   string
		want byte
	}{
		{"", 0},
		{"OK", 0x9a},
		{"qSupported", 0x37},
		{"g", 0x67},
		{strings.Repeat("\xff", 2), 0xfe},
	}
	for _, tt := range tests {
		if got := Checksum([]byte(tt.in)); got != tt.want {
			t.Errorf("Checksum(%q) = %#x, want %#x", tt.in, got, tt.want)
		}
	}
}

func TestReceivePackets(t *testing.T) {
	tests := []struct {
		name     string
		stream   string
		wantAcks string
		want     []Packet
	}{
		{"simple", "$g#67", "+", []Packet{{Data: []byte("g")}}},
		{"empty payload", "$#00", "+", []Packet{{Data: []byte{}}}},
		{"upper-case checksum", "$OK#9A", "+", []Packet{{Data: []byte("OK")}}},
		{"garbage skipped", "xyz\r\n$g#67", "+", []Packet{{Data: []byte("g")}}},
		{"bad checksum dropped", "$g#68$m0,4#fd", "-+", []Packet{{Data: []byte("m0,4")}}},
		{"non-hex checksum dropped", "$g#zz$g#67", "-+", []Packet{{Data: []byte("g")}}},
		{"interrupt outside packet", "\x03$g#67", "+", []Packet{{Interrupt: true}, {Data: []byte("g")}}},
		{"0x03 inside packet is data", framed("X0,1:\x03"), "+", []Packet{{Data: []byte("X0,1:\x03")}}},
		{"dollar restarts packet", "$abc$g#67", "+", []Packet{{Data: []byte("g")}}},
		{"stray acks are not packets", "++-$g#67", "+", []Packet{{Data: []byte("g")}}},
		{"two packets", "$g#67$?#3f", "++", []Packet{{Data: []byte("g")}, {Data: []byte("?")}}},
		{"rle not expanded", framed("0*\""), "+", []Packet{{Data: []byte("0*\"")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, p := newTestPair(t)
			p.write(t, tt.stream)
			for _, want := range tt.want {
				got := receive(t, c)
				if got.Interrupt != want.Interrupt || !bytes.Equal(got.Data, want.Data) {
					t.Fatalf("got %+v (%q), want %+v (%q)", got, got.Data, want, want.Data)
				}
			}
			expectNoPacket(t, c)
			p.expect(t, tt.wantAcks)
			p.expectNothing(t)
		})
	}
}

func TestOversizedPacket(t *testing.T) {
	c, p := newTestPair(t)
	big := strings.Repeat("a", MaxPacketSize+1)
	p.write(t, framed(big))
	p.expect(t, "-")
	expectNoPacket(t, c)

	limit := strings.Repeat("b", MaxPacketSize)
	p.write(t, framed(limit))
	got := receive(t, c)
	if len(got.Data) != MaxPacketSize || string(got.Data) != limit {
		t.Fatalf("packet of exactly MaxPacketSize: got %d bytes", len(got.Data))
	}
	p.expect(t, "+")

	c.SetNoAck(true)
	p.write(t, framed(big))
	expectNoPacket(t, c)
	p.expectNothing(t)
}

func TestNoAckMode(t *testing.T) {
	c, p := newTestPair(t)
	c.SetNoAck(true)
	if !c.NoAck() {
		t.Fatal("NoAck() = false after SetNoAck(true)")
	}
	// Good and bad checksums are both delivered, nothing is acknowledged.
	p.write(t, "$g#67$m0,4#00")
	if got := receive(t, c); string(got.Data) != "g" {
		t.Fatalf("got %q, want g", got.Data)
	}
	if got := receive(t, c); string(got.Data) != "m0,4" {
		t.Fatalf("got %q, want m0,4", got.Data)
	}
	p.expectNothing(t)

	// Send does not wait for an acknowledgment.
	errc := make(chan error, 1)
	go func() { errc <- c.Send([]byte("OK")) }()
	p.expect(t, "$OK#9a")
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Send waited for an ack in no-ack mode")
	}
}

// sendAsync runs c.Send(payload) in a goroutine and returns its result channel.
func sendAsync(c *Conn, payload string) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- c.Send([]byte(payload)) }()
	return errc
}

// result waits for an error from errc.
func result(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Send did not return")
	}
	return nil
}

func TestSendAckNakRetransmit(t *testing.T) {
	t.Run("ack", func(t *testing.T) {
		c, p := newTestPair(t)
		errc := sendAsync(c, "OK")
		p.expect(t, "$OK#9a")
		p.write(t, "+")
		if err := result(t, errc); err != nil {
			t.Fatalf("Send: %v", err)
		}
	})
	t.Run("nak then ack", func(t *testing.T) {
		c, p := newTestPair(t)
		errc := sendAsync(c, "S05")
		p.expect(t, "$S05#b8")
		p.write(t, "-")
		p.expect(t, "$S05#b8")
		p.write(t, "+")
		if err := result(t, errc); err != nil {
			t.Fatalf("Send: %v", err)
		}
		p.expectNothing(t)
	})
	t.Run("always nak", func(t *testing.T) {
		c, p := newTestPair(t)
		errc := sendAsync(c, "S05")
		for i := 0; i <= maxRetransmits; i++ {
			p.expect(t, "$S05#b8")
			p.write(t, "-")
		}
		if err := result(t, errc); !errors.Is(err, ErrNoAck) {
			t.Fatalf("Send error = %v, want ErrNoAck", err)
		}
		p.expectNothing(t)
	})
	t.Run("packet arrives while waiting for ack", func(t *testing.T) {
		c, p := newTestPair(t)
		errc := sendAsync(c, "OK")
		p.expect(t, "$OK#9a")
		p.write(t, "$g#67")
		p.expect(t, "+")
		p.write(t, "+")
		if err := result(t, errc); err != nil {
			t.Fatalf("Send: %v", err)
		}
		if got := receive(t, c); string(got.Data) != "g" {
			t.Fatalf("got %q, want g", got.Data)
		}
	})
	t.Run("peer gone", func(t *testing.T) {
		c, p := newTestPair(t)
		errc := sendAsync(c, "OK")
		p.expect(t, "$OK#9a")
		p.conn.Close()
		if err := result(t, errc); err == nil {
			t.Fatal("Send succeeded after the peer closed")
		}
	})
	t.Run("ack timeout", func(t *testing.T) {
		c, p := newTestPair(t)
		c.SetAckTimeout(20 * time.Millisecond)
		errc := sendAsync(c, "OK")
		p.expect(t, "$OK#9a")
		if err := result(t, errc); !errors.Is(err, ErrAckTimeout) {
			t.Fatalf("Send error = %v, want ErrAckTimeout", err)
		}
	})
	t.Run("unframeable payload", func(t *testing.T) {
		c, p := newTestPair(t)
		for _, bad := range []string{"a$b", "a#b"} {
			if err := c.Send([]byte(bad)); !errors.Is(err, ErrUnframeable) {
				t.Errorf("Send(%q) error = %v, want ErrUnframeable", bad, err)
			}
		}
		p.expectNothing(t)
	})
}

func TestSendRunLengthEncodes(t *testing.T) {
	c, p := newTestPair(t)
	errc := sendAsync(c, "00000000")
	p.expect(t, framed("0*\"00"))
	p.write(t, "+")
	if err := result(t, errc); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

func TestSendNotification(t *testing.T) {
	c, p := newTestPair(t)
	errc := make(chan error, 1)
	go func() { errc <- c.SendNotification([]byte("Stop:T05")) }()
	p.expect(t, "%Stop:T05#"+fmt.Sprintf("%02x", Checksum([]byte("Stop:T05"))))
	if err := result(t, errc); err != nil {
		t.Fatalf("SendNotification: %v", err)
	}
}

func TestEOFAndClose(t *testing.T) {
	t.Run("peer closes", func(t *testing.T) {
		c, p := newTestPair(t)
		p.write(t, "$g#67")
		p.expect(t, "+")
		p.conn.Close()
		if got := receive(t, c); string(got.Data) != "g" {
			t.Fatalf("got %q, want g", got.Data)
		}
		select {
		case _, ok := <-c.Incoming():
			if ok {
				t.Fatal("unexpected packet after EOF")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Incoming not closed after EOF")
		}
		if !errors.Is(c.Err(), io.EOF) {
			t.Fatalf("Err() = %v, want io.EOF", c.Err())
		}
	})
	t.Run("local close", func(t *testing.T) {
		c, _ := newTestPair(t)
		if c.Err() != nil {
			t.Fatalf("Err() = %v before close", c.Err())
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for range c.Incoming() {
		}
		if !errors.Is(c.Err(), ErrClosed) {
			t.Fatalf("Err() = %v, want ErrClosed", c.Err())
		}
		if err := c.Send([]byte("OK")); err == nil {
			t.Fatal("Send succeeded after Close")
		}
	})
}

func TestLog(t *testing.T) {
	c, p := newTestPair(t)
	var mu sync.Mutex
	var logBuf bytes.Buffer
	c.SetLog(lockedWriter{&mu, &logBuf})
	p.write(t, "$qSupported#37")
	receive(t, c)
	p.expect(t, "+")
	errc := sendAsync(c, "PacketSize=4000")
	p.expect(t, framed("PacketSize=4000"))
	p.write(t, "+")
	if err := result(t, errc); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := logBuf.String()
	mu.Unlock()
	for _, want := range []string{`getpkt ("qSupported");`, `putpkt ("$PacketSize=4000#`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q does not contain %q", out, want)
		}
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
