package frames

import (
	"errors"
	"fmt"
	"strings"
)

// This file reproduces, for the tfile writer, how gdb parses the target's
// textual replies (qTStatus, qTfV, qTfP, qTP) into its own structures and
// prints them back: gdb's tsave writes its parsed copies, not the replies,
// so a byte-identical file needs the same parse and the same printf.

var errBadHex = errors.New("invalid hex digit")

// unpackHex consumes hex digits from the start of s like gdb's
// unpack_varlen_hex (wrapping on overflow) and returns the value and the
// rest of s.
func unpackHex(s string) (uint64, string) {
	var v uint64
	i := 0
	for ; i < len(s); i++ {
		n, ok := hexNibble(s[i])
		if !ok {
			break
		}
		v = v<<4 | uint64(n)
	}
	return v, s[i:]
}

func hexNibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// skip1 drops one separator character, as gdb's "p++", without running
// past the end.
func skip1(s string) string {
	if s == "" {
		return s
	}
	return s[1:]
}

// hexToCString decodes up to count bytes of hex like gdb's hex2bin
// (stopping early at the end of the string) and cuts the result at the
// first NUL, as gdb then treats it as a C string. Invalid digits are an
// error (gdb's fromhex throws).
func hexToCString(hex string, count int) (string, error) {
	out := make([]byte, 0, count)
	for i := 0; i < count; i++ {
		if len(hex) < 2 {
			break
		}
		hi, ok1 := hexNibble(hex[0])
		lo, ok2 := hexNibble(hex[1])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("decode hex %q: %w", hex[:2], errBadHex)
		}
		out = append(out, hi<<4|lo)
		hex = hex[2:]
	}
	if i := strings.IndexByte(string(out), 0); i >= 0 {
		out = out[:i]
	}
	return string(out), nil
}

func bin2hex(s string) string { return fmt.Sprintf("%x", s) }

// gdb's enum trace_stop_reason, in order, and stop_reason_names.
const (
	stopUnknown = iota
	stopNeverRun
	stopCommand
	stopBufferFull
	stopDisconnected
	stopPasscount
	stopError
)

var stopReasonNames = []string{"tunknown", "tnotrun", "tstop", "tfull", "tdisconnected", "tpasscount", "terror"}

// traceStatus mirrors the fields of gdb's struct trace_status that the
// tfile writer prints, with gdb's C types.
type traceStatus struct {
	running             bool
	stopReason          int
	stoppingTracepoint  int32
	stopDesc            *string
	traceframeCount     int32
	traceframesCreated  int32
	bufferFree          int32
	bufferSize          int32
	disconnectedTracing int32
	circularBuffer      int32
	userName            *string
	notes               *string
	startTime           int64
	stopTime            int64
}

// parseTraceStatus follows gdb's parse_trace_status on body, the qTStatus
// reply after 'T'. stopping_tracepoint is not reset by gdb; this assumes
// it was 0 before.
func parseTraceStatus(body string) (*traceStatus, error) {
	if body == "" {
		return nil, errors.New("parse trace status: empty status")
	}
	ts := &traceStatus{
		running:            body[0] == '1',
		traceframeCount:    -1,
		traceframesCreated: -1,
		bufferFree:         -1,
		bufferSize:         -1,
	}
	p := body[1:]
	// gdb: while (*p++) — test the separator and step over it.
	for len(p) > 0 {
		p = p[1:]
		p1 := strings.IndexByte(p, ':')
		if p1 < 0 {
			return nil, fmt.Errorf("parse trace status: malformed at %q", p)
		}
		p3 := strings.IndexByte(p, ';')
		if p3 < 0 {
			p3 = len(p)
		}
		key := p[:p1]
		is := func(name string) bool { return strings.HasPrefix(name, key) }
		val := p[p1+1:]
		var v uint64
		switch {
		case is(stopReasonNames[stopBufferFull]):
			_, p = unpackHex(val)
			ts.stopReason = stopBufferFull
		case is(stopReasonNames[stopNeverRun]):
			_, p = unpackHex(val)
			ts.stopReason = stopNeverRun
		case is(stopReasonNames[stopPasscount]):
			v, p = unpackHex(val)
			ts.stopReason = stopPasscount
			ts.stoppingTracepoint = int32(v)
		case is(stopReasonNames[stopCommand]):
			// p1 now indexes the text after "tstop:".
			start := p1 + 1
			p2 := strings.IndexByte(p[start:], ':')
			if p2 >= 0 {
				p2 += start
			}
			if p2 < 0 || p2 > p3 {
				// Older style: no description.
				p2 = start
				ts.stopDesc = nil
			} else if p2 != start {
				d, err := hexToCString(p[start:], (p2-start)/2)
				if err != nil {
					return nil, fmt.Errorf("parse trace status stop description: %w", err)
				}
				ts.stopDesc = &d
			} else {
				empty := ""
				ts.stopDesc = &empty
			}
			_, p = unpackHex(skip1(p[p2:]))
			ts.stopReason = stopCommand
		case is(stopReasonNames[stopDisconnected]):
			_, p = unpackHex(val)
			ts.stopReason = stopDisconnected
		case is(stopReasonNames[stopError]):
			start := p1 + 1
			p2 := strings.IndexByte(p[start:], ':')
			if p2 < 0 {
				return nil, fmt.Errorf("parse trace status: terror without tracepoint number in %q", p)
			}
			p2 += start
			d, err := hexToCString(p[start:], (p2-start)/2)
			if err != nil {
				return nil, fmt.Errorf("parse trace status error description: %w", err)
			}
			ts.stopDesc = &d
			v, p = unpackHex(p[p2+1:])
			ts.stoppingTracepoint = int32(v)
			ts.stopReason = stopError
		case is("tframes"):
			v, p = unpackHex(val)
			ts.traceframeCount = int32(v)
		case is("tcreated"):
			v, p = unpackHex(val)
			ts.traceframesCreated = int32(v)
		case is("tfree"):
			v, p = unpackHex(val)
			ts.bufferFree = int32(v)
		case is("tsize"):
			v, p = unpackHex(val)
			ts.bufferSize = int32(v)
		case is("disconn"):
			v, p = unpackHex(val)
			ts.disconnectedTracing = int32(v)
		case is("circular"):
			v, p = unpackHex(val)
			ts.circularBuffer = int32(v)
		case is("starttime"):
			v, p = unpackHex(val)
			ts.startTime = int64(v)
		case is("stoptime"):
			v, p = unpackHex(val)
			ts.stopTime = int64(v)
		case is("username"), is("notes"):
			text := ""
			if p1+1 <= p3 {
				var err error
				text, err = hexToCString(p[p1+1:], (p3-p1-1)/2)
				if err != nil {
					return nil, fmt.Errorf("parse trace status %s: %w", key, err)
				}
			}
			if is("username") {
				ts.userName = &text
			} else {
				ts.notes = &text
			}
			p = p[p3:]
		default:
			// Unknown optional field: skip to the next ';'.
			next := strings.IndexByte(p[p1+1:], ';')
			if next < 0 {
				return ts, nil
			}
			p = p[p1+1+next:]
		}
	}
	return ts, nil
}

// statusLine prints ts as gdb's tfile_write_status does (without the
// trailing newline).
func (ts *traceStatus) statusLine() string {
	var sb strings.Builder
	running := '0'
	if ts.running {
		running = '1'
	}
	fmt.Fprintf(&sb, "status %c;%s", running, stopReasonNames[ts.stopReason])
	if ts.stopReason == stopError || ts.stopReason == stopCommand {
		desc := ""
		if ts.stopDesc != nil {
			desc = *ts.stopDesc
		}
		sb.WriteString(":" + bin2hex(desc))
	}
	fmt.Fprintf(&sb, ":%x", uint32(ts.stoppingTracepoint))
	if ts.traceframeCount >= 0 {
		fmt.Fprintf(&sb, ";tframes:%x", ts.traceframeCount)
	}
	if ts.traceframesCreated >= 0 {
		fmt.Fprintf(&sb, ";tcreated:%x", ts.traceframesCreated)
	}
	if ts.bufferFree >= 0 {
		fmt.Fprintf(&sb, ";tfree:%x", ts.bufferFree)
	}
	if ts.bufferSize >= 0 {
		fmt.Fprintf(&sb, ";tsize:%x", ts.bufferSize)
	}
	if ts.disconnectedTracing != 0 {
		fmt.Fprintf(&sb, ";disconn:%x", uint32(ts.disconnectedTracing))
	}
	if ts.circularBuffer != 0 {
		fmt.Fprintf(&sb, ";circular:%x", uint32(ts.circularBuffer))
	}
	if ts.startTime != 0 {
		fmt.Fprintf(&sb, ";starttime:%x", uint64(ts.startTime))
	}
	if ts.stopTime != 0 {
		fmt.Fprintf(&sb, ";stoptime:%x", uint64(ts.stopTime))
	}
	if ts.notes != nil {
		sb.WriteString(";notes:" + bin2hex(*ts.notes))
	}
	if ts.userName != nil {
		sb.WriteString(";username:" + bin2hex(*ts.userName))
	}
	return sb.String()
}

// uploadedTSV mirrors gdb's struct uploaded_tsv.
type uploadedTSV struct {
	number       int32
	initialValue int64
	builtin      int32
	name         string
}

// parseTSVs follows gdb's parse_tsv_definition over the qTfV/qTsV replies
// and returns the variables in the order gdb keeps them (newest number
// first: gdb prepends to its list).
func parseTSVs(replies []string) ([]*uploadedTSV, error) {
	var list []*uploadedTSV // oldest first; reversed at the end
	for _, line := range replies {
		if line == "" || line[0] == 'l' {
			break // gdb's upload loop ends here
		}
		num, p := unpackHex(line)
		initval, p := unpackHex(skip1(p))
		builtin, p := unpackHex(skip1(p))
		p = skip1(p)
		name, err := hexToCString(p, len(p)/2)
		if err != nil {
			return nil, fmt.Errorf("parse trace state variable %q: %w", line, err)
		}
		var tsv *uploadedTSV
		for _, t := range list {
			if t.number == int32(num) {
				tsv = t
				break
			}
		}
		if tsv == nil {
			tsv = &uploadedTSV{number: int32(num)}
			list = append(list, tsv)
		}
		tsv.initialValue = int64(initval)
		tsv.builtin = int32(builtin)
		tsv.name = name
	}
	reverse(list)
	return list, nil
}

func (t *uploadedTSV) line() string {
	return fmt.Sprintf("tsv %x:%x:%x:%s", uint32(t.number), uint64(t.initialValue), uint32(t.builtin), bin2hex(t.name))
}

// uploadedTP mirrors the parts of gdb's struct uploaded_tp that the tfile
// writer prints.
type uploadedTP struct {
	number      int32
	addr        uint64
	fast        bool
	enabled     bool
	step        int32
	pass        int32
	cond        *string
	actions     []string
	stepActions []string
	atString    *string
	condString  *string
	cmdStrings  []string
	hitCount    int32
	usage       uint64
}

// parseTracepoints follows gdb's parse_tracepoint_definition over the
// qTfP/qTsP replies and returns the tracepoints in gdb's list order (most
// recently first seen first).
func parseTracepoints(replies []string) ([]*uploadedTP, error) {
	var list []*uploadedTP
	get := func(num int32, addr uint64) *uploadedTP {
		for _, t := range list {
			if t.number == num && t.addr == addr {
				return t
			}
		}
		t := &uploadedTP{number: num, addr: addr}
		list = append(list, t)
		return t
	}
	for _, line := range replies {
		if line == "" || line[0] == 'l' {
			break // gdb's upload loop ends here
		}
		piece := line[0]
		num64, p := unpackHex(line[1:])
		addr, p := unpackHex(skip1(p))
		p = skip1(p)
		num := int32(num64)
		switch piece {
		case 'T':
			enabled := len(p) > 0 && p[0] == 'E'
			p = skip1(skip1(p))
			step, rest := unpackHex(p)
			pass, rest := unpackHex(skip1(rest))
			p = rest
			fast := false
			var cond *string
			for len(p) > 0 && p[0] == ':' {
				p = p[1:]
				if p == "" {
					break
				}
				switch p[0] {
				case 'F':
					fast = true
					_, p = unpackHex(p[1:]) // gdb drops orig_size
				case 'S':
					fast = false
					p = p[1:]
				case 'X':
					xlen, rest := unpackHex(p[1:])
					rest = skip1(rest)
					n := uint64(len(rest))
					if 2*xlen < n && xlen < 1<<62 {
						n = 2 * xlen
					}
					c := rest[:n]
					if i := strings.IndexByte(c, 0); i >= 0 {
						c = c[:i]
					}
					cond = &c
					p = rest[n:]
				}
			}
			t := get(num, addr)
			t.fast = fast
			t.enabled = enabled
			t.step = int32(step)
			t.pass = int32(pass)
			t.cond = cond
		case 'A':
			t := get(num, addr)
			t.actions = append(t.actions, cString(p))
		case 'S':
			t := get(num, addr)
			t.stepActions = append(t.stepActions, cString(p))
		case 'Z':
			t := get(num, addr)
			srctype := p
			colon := strings.IndexByte(p, ':')
			if colon < 0 {
				return nil, fmt.Errorf("parse tracepoint source piece %q: no type separator", line)
			}
			_, p = unpackHex(p[colon+1:])
			_, p = unpackHex(skip1(p))
			p = skip1(p)
			src, err := hexToCString(p, len(p)/2)
			if err != nil {
				return nil, fmt.Errorf("parse tracepoint source piece %q: %w", line, err)
			}
			switch {
			case strings.HasPrefix(srctype, "at:"):
				t.atString = &src
			case strings.HasPrefix(srctype, "cond:"):
				t.condString = &src
			case strings.HasPrefix(srctype, "cmd:"):
				t.cmdStrings = append(t.cmdStrings, src)
			}
		case 'V':
			// Status pieces are overwritten by the qTP query tsave makes.
			get(num, addr)
		}
	}
	reverse(list)
	return list, nil
}

// cString cuts s at its first NUL, as C string copies do.
func cString(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// setStatus applies a qTP reply as gdb's get_tracepoint_status does.
func (t *uploadedTP) setStatus(reply string) {
	t.hitCount = 0
	t.usage = 0
	if reply == "" || reply[0] != 'V' {
		return
	}
	hits, p := unpackHex(reply[1:])
	usage, _ := unpackHex(skip1(p))
	t.hitCount = int32(hits)
	t.usage = usage
}

// maxSourceLine is gdb's MAX_TRACE_UPLOAD, the buffer encode_source_string
// fills.
const maxSourceLine = 2000

// encodeSource formats one "tp Z" body as gdb's encode_source_string.
func (t *uploadedTP) encodeSource(srctype, src string) (string, error) {
	prefix := fmt.Sprintf("%x:%x:%s:%x:%x:", uint32(t.number), t.addr, srctype, 0, uint32(int32(len(src))))
	if 80+len(srctype) > maxSourceLine || len(prefix)+2*len(src) >= maxSourceLine {
		return "", fmt.Errorf("encode %s source of tracepoint %d: source string too long for gdb's buffer", srctype, t.number)
	}
	return prefix + bin2hex(src), nil
}

// lines prints t as gdb's tfile_write_uploaded_tp does.
func (t *uploadedTP) lines() ([]string, error) {
	var out []string
	enabled := 'D'
	if t.enabled {
		enabled = 'E'
	}
	head := fmt.Sprintf("tp T%x:%x:%c:%x:%x", uint32(t.number), t.addr, enabled, uint32(t.step), uint32(t.pass))
	if t.fast {
		head += ":F0"
	}
	if t.cond != nil {
		head += fmt.Sprintf(":X%x,%s", uint32(len(*t.cond)/2), *t.cond)
	}
	out = append(out, head)
	for _, a := range t.actions {
		out = append(out, fmt.Sprintf("tp A%x:%x:%s", uint32(t.number), t.addr, a))
	}
	for _, a := range t.stepActions {
		out = append(out, fmt.Sprintf("tp S%x:%x:%s", uint32(t.number), t.addr, a))
	}
	add := func(srctype, src string) error {
		enc, err := t.encodeSource(srctype, src)
		if err != nil {
			return err
		}
		out = append(out, "tp Z"+enc)
		return nil
	}
	if t.atString != nil {
		if err := add("at", *t.atString); err != nil {
			return nil, err
		}
	}
	if t.condString != nil {
		if err := add("cond", *t.condString); err != nil {
			return nil, err
		}
	}
	for _, c := range t.cmdStrings {
		if err := add("cmd", c); err != nil {
			return nil, err
		}
	}
	out = append(out, fmt.Sprintf("tp V%x:%x:%x:%x", uint32(t.number), t.addr, uint32(t.hitCount), t.usage))
	return out, nil
}

func reverse[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}
