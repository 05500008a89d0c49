package server

import (
	"bytes"
	"sync"

	"gotpstub/rsp"
)

// Packets are handled on the connection's reader goroutine when that is
// safe (inlineDispatch), and otherwise on Serve's goroutine, which gets
// them through rsp.Conn.Incoming: a hand-off between the two costs more
// than the rest of a simple packet's round trip on a VM (about 45 of 80
// µs). Exactly one goroutine handles packets at any time, in the order
// they came: once a packet goes to Serve (a resumption, or anything that
// may end the session or wait for gdb), every later packet follows it
// there until Serve has handled all it was given.
type dispatchState struct {
	mu sync.Mutex
	// pending counts the packets given to Serve and not yet handled;
	// while it is not 0 every packet goes to Serve.
	pending int
	err     error // why an inline packet's handling ended the connection
}

// inlineDispatch is the rsp.Conn dispatch function: it handles p on the
// reader goroutine and reports true, or leaves it to Serve.
func (s *Server) inlineDispatch(p rsp.Packet) bool {
	// In non-stop mode Serve's goroutine also handles the process's
	// events: every packet goes there, so that one goroutine does all.
	if !s.disp.inline(p, s.conn.NoAck() && !s.ns.on.Load()) {
		return false
	}
	if err := s.handle(p.Data); err != nil {
		s.disp.mu.Lock()
		s.disp.err = err
		s.disp.mu.Unlock()
		s.conn.Close()
	}
	return true
}

// inline decides where p is handled: true, on the reader goroutine;
// false, by Serve, counted in pending (and so is every later packet
// until Serve has handled them all).
func (d *dispatchState) inline(p rsp.Packet, noAck bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending > 0 || p.Interrupt || !noAck || !inlineSafe(p.Data) {
		d.pending++
		return false
	}
	return true
}

// handledOne tells the dispatcher that Serve's goroutine has handled a
// packet it was given (Serve's loop, and runOnce for those that come
// while the program runs); once it has handled them all, packets are
// handled on the reader goroutine again.
func (s *Server) handledOne() {
	d := &s.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending > 0 {
		d.pending--
	}
}

// inlinePrefixes lists the packets handled on the reader goroutine: they
// never resume the program, end the session or wait for gdb.
var inlinePrefixes = [][]byte{
	[]byte("m"), []byte("M"), []byte("X"), []byte("g"), []byte("G"), []byte("p"), []byte("P"),
	[]byte("H"), []byte("T"), []byte("z"), []byte("Z"), []byte("qT"), []byte("QT"), []byte("qXfer:"),
	[]byte("qfThreadInfo"), []byte("qsThreadInfo"), []byte("qC"), []byte("vFile:"),
}

// inlineSafe reports whether pkt may be handled on the reader goroutine.
func inlineSafe(pkt []byte) bool {
	for _, p := range inlinePrefixes {
		if bytes.HasPrefix(pkt, p) {
			return true
		}
	}
	return false
}
