package rsp

// frameEventKind says what the frame parser recognised.
type frameEventKind int

const (
	// eventAck is a '+' outside a packet.
	eventAck frameEventKind = iota + 1
	// eventNak is a '-' outside a packet.
	eventNak
	// eventInterrupt is a 0x03 byte outside a packet.
	eventInterrupt
	// eventPacket is a complete packet; checksumOK says whether it matched.
	eventPacket
	// eventOversized is a complete packet whose payload exceeded the limit.
	eventOversized
)

// frameEvent is one thing recognised in the incoming byte stream.
type frameEvent struct {
	kind       frameEventKind
	payload    []byte // eventPacket only; owned by the receiver
	checksumOK bool   // eventPacket only
}

// parserState is where the frame parser is inside the byte stream.
type parserState int

const (
	stateIdle parserState = iota
	stateData
	stateChecksumHigh
	stateChecksumLow
)

// frameParser is the incremental incoming-stream state machine. It never
// expands run-length encoding and never unescapes: payloads are delivered
// exactly as framed.
type frameParser struct {
	state     parserState
	maxSize   int
	buf       []byte
	sum       byte
	oversized bool
	sentSum   byte
	sentOK    bool // both checksum characters were hex digits
}

// newFrameParser returns a parser accepting payloads up to maxSize bytes.
func newFrameParser(maxSize int) *frameParser {
	return &frameParser{maxSize: maxSize}
}

// feed consumes one byte and reports an event when one completes.
func (p *frameParser) feed(c byte) (frameEvent, bool) {
	switch p.state {
	case stateIdle:
		switch c {
		case '$':
			p.startPacket()
		case '+':
			return frameEvent{kind: eventAck}, true
		case '-':
			return frameEvent{kind: eventNak}, true
		case 0x03:
			return frameEvent{kind: eventInterrupt}, true
		}
		// Anything else between packets is garbage and skipped.
	case stateData:
		switch c {
		case '$':
			// A packet start inside a packet: resynchronise on it.
			p.startPacket()
		case '#':
			p.state = stateChecksumHigh
		default:
			p.sum += c
			if len(p.buf) < p.maxSize {
				p.buf = append(p.buf, c)
			} else {
				p.oversized = true
			}
		}
	case stateChecksumHigh:
		v, ok := hexValue(c)
		p.sentSum = v << 4
		p.sentOK = ok
		p.state = stateChecksumLow
	case stateChecksumLow:
		v, ok := hexValue(c)
		p.sentSum |= v
		p.sentOK = p.sentOK && ok
		p.state = stateIdle
		if p.oversized {
			p.buf = nil
			return frameEvent{kind: eventOversized}, true
		}
		ev := frameEvent{kind: eventPacket, payload: p.buf, checksumOK: p.sentOK && p.sentSum == p.sum}
		p.buf = nil
		return ev, true
	}
	return frameEvent{}, false
}

// startPacket resets the parser to collect a new payload.
func (p *frameParser) startPacket() {
	p.state = stateData
	p.buf = make([]byte, 0, 64)
	p.sum = 0
	p.oversized = false
}
