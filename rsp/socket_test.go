package rsp

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return server, client
}

func TestBlockingSocketTransfers(t *testing.T) {
	server, client := tcpPair(t)
	s, err := NewBlockingSocket(server)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The net.Conn is closed: only the blocking socket speaks now.
	if _, err := server.Write([]byte("x")); err == nil {
		t.Error("the taken-over net.Conn still writes")
	}
	big := make([]byte, 1<<20) // more than a socket buffer: partial writes
	for i := range big {
		big[i] = byte(i * 7)
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(big))))
		got <- b
	}()
	if n, err := s.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if b := <-got; string(b) != string(big) {
		t.Errorf("the peer read %d bytes, not what was written", len(b))
	}
	if _, err := client.Write([]byte("$g#67")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := io.ReadFull(s, buf[:5]); n != 5 || err != nil || string(buf[:5]) != "$g#67" {
		t.Errorf("Read: %q, %v", buf[:n], err)
	}
	client.Close()
	if n, err := s.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("Read after the peer closed: %d, %v; want io.EOF", n, err)
	}
}

func TestBlockingSocketCloseEndsRead(t *testing.T) {
	server, _ := tcpPair(t)
	s, err := NewBlockingSocket(server)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 16))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let Read block in read(2)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Read ended without an error by Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocked Read")
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestBlockingSocketNeedsADescriptor(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := NewBlockingSocket(a); err == nil {
		t.Error("net.Pipe accepted")
	}
}

// TestBlockingSocketCarriesAConn runs a Conn over a BlockingSocket, as the
// stub does on a TCP connection.
func TestBlockingSocketCarriesAConn(t *testing.T) {
	server, client := tcpPair(t)
	s, err := NewBlockingSocket(server)
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(s)
	defer c.Close()
	if _, err := client.Write([]byte("$qC#b4")); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-c.Incoming():
		if string(p.Data) != "qC" {
			t.Errorf("received %q", p.Data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no packet")
	}
	ack := make([]byte, 1)
	if _, err := io.ReadFull(client, ack); err != nil || ack[0] != '+' {
		t.Errorf("ack %q, %v", ack, err)
	}
}
