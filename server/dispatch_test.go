package server

import (
	"testing"

	"gotpstub/rsp"
)

// Packets that may resume the program, end the session or wait for gdb
// are left to Serve's goroutine; reads, writes, breakpoints and trace
// packets are handled where they are read.
func TestInlineSafe(t *testing.T) {
	cases := []struct {
		pkt  string
		want bool
	}{
		{"m401000,4", true}, {"M401000,1:00", true}, {"X401000,0:", true}, {"g", true}, {"G00", true},
		{"p10", true}, {"P10=00", true}, {"Hg0", true}, {"T1", true}, {"Z0,401000,1", true},
		{"z0,401000,1", true}, {"qTStatus", true}, {"QTStart", true}, {"qXfer:features:read:target.xml:0,fff", true},
		{"qfThreadInfo", true}, {"qC", true}, {"vFile:close:3", true},
		{"c", false}, {"s", false}, {"vCont;c", false}, {"C05", false}, {"k", false}, {"D", false},
		{"vKill;1", false}, {"vRun;70726f67", false}, {"vAttach;10", false}, {"R00", false},
		{"qRcmd,65786974", false}, {"QStartNoAckMode", false}, {"?", false}, {"", false},
	}
	for _, c := range cases {
		if got := inlineSafe([]byte(c.pkt)); got != c.want {
			t.Errorf("inlineSafe(%q) = %v, want %v", c.pkt, got, c.want)
		}
	}
}

// Once a packet goes to Serve, later ones follow it until Serve has
// handled every packet it was given.
func TestDispatchForwardsUntilServeCatchesUp(t *testing.T) {
	s := &Server{}
	d := &s.disp
	mem := rsp.Packet{Data: []byte("m1000,4")}
	if !d.inline(mem, true) {
		t.Fatal("a memory read at rest is not handled inline")
	}
	if d.inline(mem, false) {
		t.Fatal("a memory read in ack mode is handled inline")
	}
	s.handledOne()
	if d.inline(rsp.Packet{Data: []byte("vCont;c")}, true) {
		t.Fatal("a resumption is handled inline")
	}
	if d.inline(mem, true) {
		t.Fatal("a memory read after a resumption Serve has not handled is handled inline")
	}
	if d.inline(rsp.Packet{Interrupt: true}, true) {
		t.Fatal("an interrupt is handled inline")
	}
	s.handledOne()
	s.handledOne()
	if d.pending != 1 {
		t.Fatalf("after two of three: pending %d", d.pending)
	}
	s.handledOne()
	if d.pending != 0 {
		t.Fatalf("after all: pending %d", d.pending)
	}
	if !d.inline(mem, true) {
		t.Fatal("a memory read after Serve caught up is not handled inline")
	}
	s.handledOne() // a packet queued before dispatching began: no underflow
	if d.pending != 0 {
		t.Fatalf("extra: pending %d", d.pending)
	}
}
