package rsp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxPacketSize is the largest payload, in bytes, accepted from the peer. It
// is the value the stub announces as PacketSize in qSupported.
const MaxPacketSize = 0x4000

// OK is the standard success reply.
var OK = []byte("OK")

// escapeByte is the RSP escape character for binary data.
const escapeByte = '}'

// Checksum returns the RSP checksum of b: the sum of its bytes modulo 256.
func Checksum(b []byte) byte {
	var sum byte
	for _, c := range b {
		sum += c
	}
	return sum
}

// needsEscape reports whether c must be escaped in binary data sent by the
// stub: '$', '#', '}' always, and '*' so that gdb does not take it for a
// run-length marker.
func needsEscape(c byte) bool {
	return c == '$' || c == '#' || c == escapeByte || c == '*'
}

// EscapeBinary escapes the bytes '$', '#', '}' and '*' of b as '}' followed by
// the byte XOR 0x20, for binary payloads such as qXfer data or vFile:pread
// replies.
func EscapeBinary(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/8)
	for _, c := range b {
		if needsEscape(c) {
			out = append(out, escapeByte, c^0x20)
		} else {
			out = append(out, c)
		}
	}
	return out
}

// ErrTrailingEscape is returned by UnescapeBinary when the data ends with a
// lone escape character.
var ErrTrailingEscape = errors.New("rsp: binary data ends with an escape character")

// UnescapeBinary reverses EscapeBinary for binary packet bodies sent by gdb
// (X, vFile:pwrite): '}' followed by c stands for c XOR 0x20.
func UnescapeBinary(b []byte) ([]byte, error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != escapeByte {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(b) {
			return nil, ErrTrailingEscape
		}
		out = append(out, b[i]^0x20)
	}
	return out, nil
}

const hexDigits = "0123456789abcdef"

// EncodeHex returns b as lower-case hex, two digits per byte.
func EncodeHex(b []byte) string {
	var sb strings.Builder
	sb.Grow(2 * len(b))
	for _, c := range b {
		sb.WriteByte(hexDigits[c>>4])
		sb.WriteByte(hexDigits[c&0xf])
	}
	return sb.String()
}

// hexValue returns the value of the hex digit c.
func hexValue(c byte) (byte, bool) {
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

// DecodeHex decodes a string of hex digit pairs (either case).
func DecodeHex(s string) ([]byte, error) {
	if len(s)%2 != 0 {
		return nil, fmt.Errorf("rsp: decode hex %q: odd length %d", truncateForError(s), len(s))
	}
	out := make([]byte, len(s)/2)
	for i := 0; i < len(out); i++ {
		hi, ok1 := hexValue(s[2*i])
		lo, ok2 := hexValue(s[2*i+1])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("rsp: decode hex %q: invalid digit at offset %d", truncateForError(s), 2*i)
		}
		out[i] = hi<<4 | lo
	}
	return out, nil
}

// truncateForError shortens s for inclusion in an error message.
func truncateForError(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// ParseHexUint parses a non-empty string of hex digits (no "0x" prefix, no
// sign) as an unsigned 64-bit value.
func ParseHexUint(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("rsp: parse hex number: empty string")
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		d, ok := hexValue(s[i])
		if !ok {
			return 0, fmt.Errorf("rsp: parse hex number %q: invalid digit %q", truncateForError(s), s[i])
		}
		if v>>60 != 0 {
			return 0, fmt.Errorf("rsp: parse hex number %q: overflows 64 bits", truncateForError(s))
		}
		v = v<<4 | uint64(d)
	}
	return v, nil
}

// ErrorReply returns the standard error reply "Exx" for code (its low 8 bits).
func ErrorReply(code int) []byte {
	return []byte(fmt.Sprintf("E%02x", byte(code)))
}

// ErrorMessage returns the textual error reply "E.msg". Characters that could
// break framing or run-length decoding ('$', '#', '*', '}') and non-printable
// bytes are replaced with '?'. The message is truncated to fit in a packet.
func ErrorMessage(msg string) []byte {
	const maxMsg = 512
	out := make([]byte, 0, 2+len(msg))
	out = append(out, 'E', '.')
	for i := 0; i < len(msg) && i < maxMsg; i++ {
		c := msg[i]
		if c < 0x20 || c > 0x7e || c == '$' || c == '#' || c == '*' || c == escapeByte {
			c = '?'
		}
		out = append(out, c)
	}
	return out
}

// parseThreadPart parses one component of a thread-id: "-1" or hex digits.
func parseThreadPart(s string) (int64, error) {
	if s == "-1" {
		return -1, nil
	}
	v, err := ParseHexUint(s)
	if err != nil {
		return 0, err
	}
	if v > 1<<62 {
		return 0, fmt.Errorf("rsp: thread-id component %q out of range", s)
	}
	return int64(v), nil
}

// ParseThreadID parses an RSP thread-id: "p<pid>.<tid>", "p<pid>" (all
// threads of pid, tid -1), "<tid>", "-1" (all) or "0" (any); numbers are hex
// and either component may be -1. When the pid is omitted, pid is 0 (which,
// like an explicit 0, means "any process": the current one).
func ParseThreadID(s string) (pid, tid int64, err error) {
	if rest, ok := strings.CutPrefix(s, "p"); ok {
		pidStr, tidStr, hasTid := strings.Cut(rest, ".")
		pid, err = parseThreadPart(pidStr)
		if err != nil {
			return 0, 0, fmt.Errorf("rsp: parse thread-id %q: pid: %w", truncateForError(s), err)
		}
		if !hasTid {
			return pid, -1, nil
		}
		tid, err = parseThreadPart(tidStr)
		if err != nil {
			return 0, 0, fmt.Errorf("rsp: parse thread-id %q: tid: %w", truncateForError(s), err)
		}
		return pid, tid, nil
	}
	tid, err = parseThreadPart(s)
	if err != nil {
		return 0, 0, fmt.Errorf("rsp: parse thread-id %q: %w", truncateForError(s), err)
	}
	return 0, tid, nil
}

// formatThreadPart formats one thread-id component: -1 as "-1", others hex.
func formatThreadPart(v int) string {
	if v < 0 {
		return "-1"
	}
	return strconv.FormatUint(uint64(v), 16)
}

// FormatThreadID formats a thread-id as "p<pid>.<tid>" when multiprocess is
// set, "<tid>" otherwise. Numbers are hex; negative values are written "-1".
func FormatThreadID(pid, tid int, multiprocess bool) string {
	if multiprocess {
		return "p" + formatThreadPart(pid) + "." + formatThreadPart(tid)
	}
	return formatThreadPart(tid)
}

// minRun is the shortest run (counting the first character) worth encoding.
const minRun = 4

// maxRepeat is the largest repeat count: n+29 must stay printable (<= '~').
const maxRepeat = '~' - 29

// encodeRLE run-length encodes payload for sending: a run of the same
// character c of length L >= 4 becomes c '*' (L-1+29). Counts that would give
// '#' (6) or '$' (7) are lowered to 5 and the rest is sent separately.
func encodeRLE(payload []byte) []byte {
	out := make([]byte, 0, len(payload))
	for i := 0; i < len(payload); {
		c := payload[i]
		run := 1
		for i+run < len(payload) && payload[i+run] == c {
			run++
		}
		i += run
		if c == '*' {
			out = append(out, payload[i-run:i]...)
			continue
		}
		for run > 0 {
			if run < minRun {
				for ; run > 0; run-- {
					out = append(out, c)
				}
				break
			}
			repeat := run - 1
			if repeat > maxRepeat {
				repeat = maxRepeat
			}
			if repeat+29 == '#' || repeat+29 == '$' {
				repeat = '"' - 29
			}
			out = append(out, c, '*', byte(repeat+29))
			run -= repeat + 1
		}
	}
	return out
}
