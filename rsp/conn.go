package rsp

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Packet is one item received from the peer: either a packet payload (already
// acknowledged unless in no-ack mode) or an interrupt request.
type Packet struct {
	// Data is the payload between '$' and '#', exactly as received.
	Data []byte
	// Interrupt is set when a raw 0x03 byte arrived outside a packet; Data is
	// then nil.
	Interrupt bool
}

// ErrClosed is the reason reported by Err after Close was called.
var ErrClosed = errors.New("rsp: connection closed")

// ErrNoAck is returned by Send when the peer kept answering '-'.
var ErrNoAck = errors.New("rsp: peer rejected the packet too many times")

// ErrAckTimeout is returned by Send when no acknowledgment came in time.
var ErrAckTimeout = errors.New("rsp: timed out waiting for acknowledgment")

// ErrUnframeable is returned by Send for payloads with a raw '$' or '#'.
var ErrUnframeable = errors.New("rsp: payload contains '$' or '#'")

// maxRetransmits bounds how many times Send resends after a '-'.
const maxRetransmits = 5

// incomingQueue is the capacity of the Incoming channel. It lets the reader
// keep consuming acknowledgments while the consumer is busy in Send.
const incomingQueue = 1024

// Conn is one RSP connection. One reader goroutine parses the incoming byte
// stream, acknowledges packets, delivers packets and interrupts on Incoming
// and passes acknowledgments to Send. Send, SendNotification, SetNoAck,
// SetLog and Close may be called from any goroutine.
type Conn struct {
	rw       io.ReadWriteCloser
	incoming chan Packet
	acks     chan byte
	closing  chan struct{} // closed by Close
	done     chan struct{} // closed when the reader goroutine exits

	err       error // guarded by errMu; set before done is closed
	errMu     sync.Mutex
	closeOnce sync.Once
	closeErr  error

	writeMu sync.Mutex // serialises raw writes
	sendMu  sync.Mutex // serialises whole send/acknowledge cycles

	noAck      atomic.Bool
	ackTimeout atomic.Int64 // nanoseconds; 0 waits until the peer goes away

	logMu sync.Mutex
	log   io.Writer

	// dispatch, when set (NewConnDispatch), is offered every packet
	// on the reader goroutine before it is queued on Incoming.
	dispatch func(Packet) bool
}

// NewConn wraps rw and starts the reader goroutine.
func NewConn(rw io.ReadWriteCloser) *Conn {
	c := NewConnDispatch(rw, nil)
	c.Start()
	return c
}

// NewConnDispatch is NewConn with a dispatch function, not started yet
// (Start): the reader goroutine offers dispatch every packet and
// interrupt first, and queues on Incoming only those it returns false
// for. A packet dispatch handles costs no hand-off between goroutines
// (tens of µs on a VM, more than the rest of a simple packet's round
// trip). dispatch runs on the reader goroutine: while it runs nothing
// more is read, so it must not wait for an acknowledgment (Send outside
// no-ack mode) or for another packet.
func NewConnDispatch(rw io.ReadWriteCloser, dispatch func(Packet) bool) *Conn {
	return &Conn{
		rw:       rw,
		incoming: make(chan Packet, incomingQueue),
		acks:     make(chan byte, 16),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		dispatch: dispatch,
	}
}

// Start starts the reader goroutine of a NewConnDispatch connection
// (once).
func (c *Conn) Start() { go c.readLoop() }

// Incoming returns the channel of received packets and interrupts. It is
// closed when the peer goes away, on a read error or after Close; Err then
// says why.
func (c *Conn) Incoming() <-chan Packet { return c.incoming }

// Err returns why Incoming was closed: io.EOF when the peer closed the
// connection, ErrClosed after Close, or the read error. It returns nil while
// the connection is up.
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// SetNoAck turns no-acknowledgment mode on or off. Call it with true after
// the OK reply to QStartNoAckMode has been sent (and acknowledged).
func (c *Conn) SetNoAck(on bool) { c.noAck.Store(on) }

// NoAck reports whether no-acknowledgment mode is on.
func (c *Conn) NoAck() bool { return c.noAck.Load() }

// SetAckTimeout bounds how long Send waits for each acknowledgment; after it
// Send fails with ErrAckTimeout. Zero (the default) waits until the peer goes
// away, as gdbserver does.
func (c *Conn) SetAckTimeout(d time.Duration) { c.ackTimeout.Store(int64(d)) }

// SetLog makes the connection log every packet received and sent to w, in
// the style of gdbserver --remote-debug. A nil w turns logging off.
func (c *Conn) SetLog(w io.Writer) {
	c.logMu.Lock()
	c.log = w
	c.logMu.Unlock()
}

// logf writes one log line when logging is on.
func (c *Conn) logf(format string, args ...any) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	if c.log != nil {
		fmt.Fprintf(c.log, format+"\n", args...)
	}
}

// printable renders b for the log, escaping non-printable bytes, when
// the log formats it (String): a Conn without a log never renders it.
type printable []byte

func (b printable) String() string {
	var sb strings.Builder
	for _, ch := range b {
		switch {
		case ch == '\\':
			sb.WriteString(`\\`)
		case ch == '"':
			sb.WriteString(`\"`)
		case ch >= 0x20 && ch < 0x7f:
			sb.WriteByte(ch)
		default:
			fmt.Fprintf(&sb, `\x%02x`, ch)
		}
	}
	return sb.String()
}

// Close closes the transport; the reader goroutine exits, Incoming is closed
// and pending or later Sends fail.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		if err := c.rw.Close(); err != nil {
			c.closeErr = fmt.Errorf("rsp: close transport: %w", err)
		}
	})
	return c.closeErr
}

// writeRaw writes b to the transport under the write lock.
func (c *Conn) writeRaw(b []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if _, err := c.rw.Write(b); err != nil {
		return fmt.Errorf("rsp: write: %w", err)
	}
	return nil
}

// frame builds "<start>payload#cs".
func frame(start byte, payload []byte) []byte {
	out := make([]byte, 0, len(payload)+4)
	out = append(out, start)
	out = append(out, payload...)
	sum := Checksum(payload)
	return append(out, '#', hexDigits[sum>>4], hexDigits[sum&0xf])
}

// checkFramable rejects payloads that would corrupt the framing.
func checkFramable(payload []byte) error {
	for i, ch := range payload {
		if ch == '$' || ch == '#' {
			return fmt.Errorf("%w (byte %d of %q)", ErrUnframeable, i, truncateForError(string(payload)))
		}
	}
	return nil
}

// Send sends payload as a run-length encoded packet and, unless in no-ack
// mode, waits for the peer's '+'. On '-' it retransmits, up to a bounded
// number of times. It fails when the peer goes away, the connection is
// closed, or the payload contains a raw '$' or '#'. The payload is not
// escaped: binary parts must already be escaped with EscapeBinary (a raw '*'
// would be read by gdb as a run-length marker).
func (c *Conn) Send(payload []byte) error {
	if err := checkFramable(payload); err != nil {
		return err
	}
	pkt := frame('$', encodeRLE(payload))
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	for attempt := 0; ; attempt++ {
		// Forget acknowledgments that arrived when nobody was waiting.
		c.drainAcks()
		noAck := c.noAck.Load()
		if noAck {
			c.logf("putpkt (\"%s\"); [noack mode]", printable(pkt))
		} else {
			c.logf("putpkt (\"%s\"); [looking for ack]", printable(pkt))
		}
		if err := c.writeRaw(pkt); err != nil {
			return fmt.Errorf("rsp: send packet: %w", err)
		}
		if noAck {
			return nil
		}
		ack, err := c.waitAck()
		if err != nil {
			return fmt.Errorf("rsp: send packet: %w", err)
		}
		if ack == '+' {
			c.logf("[received '+']")
			return nil
		}
		c.logf("[received '-', retransmitting]")
		if attempt >= maxRetransmits {
			return fmt.Errorf("rsp: send packet after %d attempts: %w", attempt+1, ErrNoAck)
		}
	}
}

// drainAcks discards queued acknowledgments.
func (c *Conn) drainAcks() {
	for {
		select {
		case <-c.acks:
		default:
			return
		}
	}
}

// waitAck waits for '+' or '-', the end of the connection, or the timeout.
func (c *Conn) waitAck() (byte, error) {
	var timeout <-chan time.Time
	if d := time.Duration(c.ackTimeout.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case ack := <-c.acks:
		return ack, nil
	case <-c.done:
		// An acknowledgment may have arrived just before the reader exited.
		select {
		case ack := <-c.acks:
			return ack, nil
		default:
		}
		return 0, fmt.Errorf("peer gone: %w", c.Err())
	case <-c.closing:
		return 0, ErrClosed
	case <-timeout:
		return 0, ErrAckTimeout
	}
}

// SendNotification sends payload as an asynchronous notification
// "%payload#cs". Notifications are never acknowledged.
func (c *Conn) SendNotification(payload []byte) error {
	if err := checkFramable(payload); err != nil {
		return err
	}
	pkt := frame('%', encodeRLE(payload))
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.logf("putpkt (\"%s\"); [notification]", printable(pkt))
	if err := c.writeRaw(pkt); err != nil {
		return fmt.Errorf("rsp: send notification: %w", err)
	}
	return nil
}

// readLoop is the reader goroutine.
func (c *Conn) readLoop() {
	err := c.parseStream()
	select {
	case <-c.closing:
		err = ErrClosed
	default:
	}
	c.errMu.Lock()
	c.err = err
	c.errMu.Unlock()
	close(c.done)
	close(c.incoming)
}

// parseStream reads and handles the byte stream until an error.
func (c *Conn) parseStream() error {
	parser := newFrameParser(MaxPacketSize)
	buf := make([]byte, 4096)
	for {
		n, err := c.rw.Read(buf)
		for _, ch := range buf[:n] {
			ev, ok := parser.feed(ch)
			if !ok {
				continue
			}
			if herr := c.handleEvent(ev); herr != nil {
				return herr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.EOF
			}
			return fmt.Errorf("rsp: read: %w", err)
		}
	}
}

// handleEvent acts on one parsed event.
func (c *Conn) handleEvent(ev frameEvent) error {
	noAck := c.noAck.Load()
	switch ev.kind {
	case eventAck, eventNak:
		ack := byte('+')
		if ev.kind == eventNak {
			ack = '-'
		}
		select {
		case c.acks <- ack:
		default: // nobody is waiting for that many; drop it
		}
		return nil
	case eventInterrupt:
		c.logf("getpkt: interrupt (\\x03)")
		return c.deliver(Packet{Interrupt: true})
	case eventOversized:
		c.logf("getpkt: packet longer than %d bytes discarded", MaxPacketSize)
		if !noAck {
			return c.writeRaw([]byte{'-'})
		}
		return nil
	case eventPacket:
		switch {
		case noAck && !ev.checksumOK:
			c.logf("getpkt (\"%s\");  [bad checksum, no-ack mode: accepted]", printable(ev.payload))
		case noAck:
			c.logf("getpkt (\"%s\");  [no ack sent]", printable(ev.payload))
		case !ev.checksumOK:
			c.logf("getpkt (\"%s\");  [bad checksum, sending nak]", printable(ev.payload))
			return c.writeRaw([]byte{'-'})
		default:
			c.logf("getpkt (\"%s\");  [sending ack]", printable(ev.payload))
			if err := c.writeRaw([]byte{'+'}); err != nil {
				return err
			}
		}
		return c.deliver(Packet{Data: ev.payload})
	}
	return nil
}

// deliver offers p to the dispatch function, then queues it on Incoming,
// giving up when the connection is closed.
func (c *Conn) deliver(p Packet) error {
	if c.dispatch != nil && c.dispatch(p) {
		return nil
	}
	select {
	case c.incoming <- p:
		return nil
	case <-c.closing:
		return ErrClosed
	}
}
