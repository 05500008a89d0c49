package hostio

import (
	"bytes"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"gotpstub/rsp"
)

// serveGDB answers one gdb connection on ln: a target without a process
// whose only real service is host I/O through s.
func serveGDB(ln net.Listener, s *Server) {
	nc, err := ln.Accept()
	if err != nil {
		return
	}
	c := rsp.NewConn(nc)
	defer c.Close()
	m := rsp.NewMux()
	m.Handle("qSupported", func([]byte) []byte { return []byte("PacketSize=4000;QStartNoAckMode+") })
	m.Handle("!", func([]byte) []byte { return rsp.OK })
	m.Handle("?", func([]byte) []byte { return []byte("W00") })
	m.Handle("vFile:", s.Handle)
	for p := range c.Incoming() {
		if p.Interrupt {
			continue
		}
		if string(p.Data) == "QStartNoAckMode" {
			if c.Send(rsp.OK) != nil {
				return
			}
			c.SetNoAck(true)
			continue
		}
		reply, _ := m.Dispatch(p.Data)
		if c.Send(reply) != nil {
			return
		}
	}
}

// TestWithRealGDB has gdb copy a file to the "remote" side, back, and
// delete it, through vFile packets served by Server.
func TestWithRealGDB(t *testing.T) {
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		t.Skip("gdb not available")
	}
	dir := t.TempDir()
	local := filepath.Join(dir, "local")
	remote := filepath.Join(dir, "remote")
	back := filepath.Join(dir, "back")
	// Larger than a packet, with every byte value (escaping included).
	content := make([]byte, 3*rsp.MaxPacketSize+123)
	rand.New(rand.NewSource(1)).Read(content)
	if err := os.WriteFile(local, content, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := NewServer()
	defer s.CloseAll()
	go serveGDB(ln, s)
	cmd := exec.Command(gdb, "-nx", "-batch",
		"-ex", "set remotetimeout 5",
		"-ex", "target extended-remote "+ln.Addr().String(),
		"-ex", "remote put "+local+" "+remote,
		"-ex", "remote get "+remote+" "+back,
		"-ex", "remote delete "+remote,
		"-ex", "disconnect")
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	out, err := cmd.CombinedOutput()
	timer.Stop()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	got, err := os.ReadFile(back)
	if err != nil {
		t.Fatalf("gdb did not fetch the file: %v\n%s", err, out)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("round trip through gdb changed the file (%d bytes, want %d)\n%s", len(got), len(content), out)
	}
	if _, err := os.Stat(remote); !os.IsNotExist(err) {
		t.Fatalf("remote delete did not delete the file: %v\n%s", err, out)
	}
}
