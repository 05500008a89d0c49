package frames

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// TFileMagic is the 8-byte header every tfile starts with.
const TFileMagic = "\x7fTRACE0\n"

// maxTFileLine is the longest definition line gdb's tfile reader accepts
// (its line buffer is 1000 bytes, terminator included).
const maxTFileLine = 999

// TFileHeader is what the definition section of a tfile is made from: the
// answers the target gives to the packets gdb's tsave sends before it
// reads the trace buffer.
type TFileHeader struct {
	// RegBlockSize is the size of a register block (the g-packet size).
	RegBlockSize int
	// TDesc is the target description as gdb would fetch it (target.xml
	// with its xi:includes expanded), written as "tdesc " lines; empty
	// writes none.
	TDesc string
	// Status is the qTStatus reply body after the leading 'T', e.g.
	// "0;tstop::0;tframes:3;tcreated:3;tfree:4fff1c;tsize:500000;circular:0;disconn:0".
	Status string
	// TSVs are the qTfV/qTsV reply bodies in order, e.g.
	// "1:0:0:6e616d65". The list ends at an empty or "l" entry, like
	// gdb's upload loop.
	TSVs []string
	// Tracepoints are the qTfP/qTsP reply bodies in order: "T...", "A...",
	// "S...", "Z..." and "V..." pieces. The list ends at an empty or "l"
	// entry.
	Tracepoints []string
	// TracepointStatus returns the qTP reply body ("V<hits>:<usage>") for
	// a tracepoint location. nil, or a reply not starting with 'V', means
	// 0 hits and 0 bytes used.
	TracepointStatus func(num int, addr uint64) string
}

// WriteTFile writes the trace file gdb's "tsave FILE" would write when
// connected to a target giving h's answers and b's trace buffer (tsave -r
// asks the target to do exactly that with QTSave). Like gdb, it does not
// write raw replies but gdb's parsed-and-reprinted form of them:
//
//	"\x7fTRACE0\n"
//	"R <regblock size hex>\n"
//	"tdesc <line>\n"...           target description, line by line
//	"status <...>\n"              from the qTStatus reply
//	"tsv <...>\n"...              variables, in gdb's (reversed) list order
//	"tp T/A/S/Z/V<...>\n"...      tracepoints, in gdb's (reversed) list order
//	"\n"                          end of definitions
//	frames                        exactly as qTBuffer serves them
//	"\0\0\0\0"                    end marker
//	frame times                   gotpstub's (see TimesMagic); gdb stops reading before
//
// One difference is unavoidable: gdb prints a stale stopping-tracepoint
// number for stop reasons that carry none; this assumes 0.
func WriteTFile(w io.Writer, h TFileHeader, b *Buffer) error {
	if b == nil {
		return errors.New("write tfile: nil trace buffer")
	}
	if h.RegBlockSize < 0 {
		return fmt.Errorf("write tfile: negative register block size %d", h.RegBlockSize)
	}
	status, err := parseTraceStatus(h.Status)
	if err != nil {
		return fmt.Errorf("write tfile: %w", err)
	}
	tsvs, err := parseTSVs(h.TSVs)
	if err != nil {
		return fmt.Errorf("write tfile: %w", err)
	}
	tps, err := parseTracepoints(h.Tracepoints)
	if err != nil {
		return fmt.Errorf("write tfile: %w", err)
	}
	var defs bytes.Buffer
	defs.WriteString(TFileMagic)
	fmt.Fprintf(&defs, "R %x\n", h.RegBlockSize)
	writeTDescLines(&defs, h.TDesc)
	defs.WriteString(status.statusLine() + "\n")
	for _, t := range tsvs {
		defs.WriteString(t.line() + "\n")
	}
	for _, t := range tps {
		if h.TracepointStatus != nil {
			t.setStatus(h.TracepointStatus(int(t.number), t.addr))
		}
		lines, err := t.lines()
		if err != nil {
			return fmt.Errorf("write tfile: %w", err)
		}
		for _, l := range lines {
			defs.WriteString(l + "\n")
		}
	}
	defs.WriteString("\n")

	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.Write(defs.Bytes()); err != nil {
		return fmt.Errorf("write tfile definitions: %w", err)
	}
	// Copy the stored frames under the lock, expand and write them
	// without it, so that a slow writer does not hold up tracepoint hits.
	raw, sizes, times, regSize := b.storedSnapshot()
	if err := writeGDBFrames(bw, raw, sizes, regSize); err != nil {
		return fmt.Errorf("write tfile frames: %w", err)
	}
	if _, err := bw.Write([]byte{0, 0, 0, 0}); err != nil {
		return fmt.Errorf("write tfile end marker: %w", err)
	}
	if slices.ContainsFunc(times, func(t int64) bool { return t != 0 }) {
		if _, err := bw.Write(appendTimes(nil, times)); err != nil {
			return fmt.Errorf("write tfile frame times: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("flush tfile: %w", err)
	}
	return nil
}

// writeGDBFrames writes the stored frames raw (consecutive frames of
// the given sizes) in gdb's layout, each 'r' block expanded to an 'R'
// block of regSize bytes, one frame at a time into a reused buffer: a
// full buffer of such frames can make tens of megabytes, which QTSave
// must write before gdb's remote timeout.
func writeGDBFrames(w io.Writer, raw []byte, sizes []int32, regSize int) error {
	var fb []byte
	for _, n := range sizes {
		if int(n) > len(raw) {
			return fmt.Errorf("frame of %d bytes, %d left", n, len(raw))
		}
		frame := raw[:n]
		raw = raw[n:]
		out := frame
		if hasRegisterRuns(frame, regSize) {
			var err error
			if fb, err = gdbLayout(fb[:0], frame, regSize); err != nil {
				return err
			}
			out = fb
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
	}
	return nil
}

// hasRegisterRuns reports whether the stored frame raw holds an 'r'
// block.
func hasRegisterRuns(raw []byte, regSize int) bool {
	found := false
	f := Frame{Raw: raw, RegBlockSize: regSize}
	_ = f.walk(func(bl block) bool {
		found = bl.kind == BlockRegisterRuns
		return !found
	})
	return found
}

// writeTDescLines writes xml as gdb's tfile_write_tdesc: every line
// prefixed with "tdesc ", a last unterminated line only when non-empty.
func writeTDescLines(w *bytes.Buffer, xml string) {
	for xml != "" {
		line, rest, found := strings.Cut(xml, "\n")
		if !found && line == "" {
			break
		}
		w.WriteString("tdesc " + line + "\n")
		xml = rest
	}
}

// TFile is a parsed trace file.
type TFile struct {
	// RegBlockSize is from the "R" line (0 when missing).
	RegBlockSize int
	// TDesc is the "tdesc" lines joined with "\n" (each line ends in
	// "\n"), empty when there are none.
	TDesc string
	// Status is the text after "status " (the last such line).
	Status string
	// TSVs and Tracepoints are the texts after "tsv " and "tp ".
	TSVs        []string
	Tracepoints []string
	// Unknown holds definition lines of any other kind (gdb warns and
	// ignores them).
	Unknown []string
	// Frames are the trace frames in file order, numbered from 0, with
	// RegBlockSize set.
	Frames []*Frame
}

// ReadTFile parses a trace file the way gdb's "target tfile" reads it:
// the magic header, newline-terminated definition lines up to an empty
// line (each shorter than gdb's 1000-byte line buffer), then frames until
// one with tracepoint number 0. It returns an error on a bad header, a
// missing register block size, an over-long line or a truncated frame.
// It does not validate the blocks inside frames (Frame.Validate does).
func ReadTFile(r io.Reader) (*TFile, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(TFileMagic))
	if _, err := io.ReadFull(br, magic); err != nil {
		return nil, fmt.Errorf("read tfile header: %w", err)
	}
	if string(magic) != TFileMagic {
		return nil, errors.New("read tfile header: not a trace file")
	}
	tf := &TFile{}
	var tdesc strings.Builder
	var line []byte
	for {
		c, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("read tfile definitions: %w", noEOF(err))
		}
		if c == '\n' {
			if len(line) == 0 {
				break
			}
			if err := tf.interpLine(string(line), &tdesc); err != nil {
				return nil, err
			}
			line = line[:0]
			continue
		}
		line = append(line, c)
		if len(line) > maxTFileLine {
			return nil, errors.New("read tfile definitions: excessively long line")
		}
	}
	tf.TDesc = tdesc.String()
	if tf.RegBlockSize == 0 {
		return nil, errors.New("read tfile: no register block size recorded")
	}
	for num := 0; ; num++ {
		var hdr [HeaderSize]byte
		if _, err := io.ReadFull(br, hdr[:2]); err != nil {
			return nil, fmt.Errorf("read tfile frame %d: %w", num, noEOF(err))
		}
		if binary.LittleEndian.Uint16(hdr[:2]) == 0 {
			break
		}
		if _, err := io.ReadFull(br, hdr[2:]); err != nil {
			return nil, fmt.Errorf("read tfile frame %d header: %w", num, noEOF(err))
		}
		size := int64(binary.LittleEndian.Uint32(hdr[2:]))
		var raw bytes.Buffer
		raw.Write(hdr[:])
		// CopyN grows the buffer only as data arrives, so a lying size
		// field cannot make us allocate gigabytes.
		if _, err := io.CopyN(&raw, br, size); err != nil {
			return nil, fmt.Errorf("read tfile frame %d data (%d bytes): %w", num, size, noEOF(err))
		}
		tf.Frames = append(tf.Frames, &Frame{
			Num:          num,
			TPNum:        int(binary.LittleEndian.Uint16(hdr[:2])),
			Raw:          raw.Bytes(),
			RegBlockSize: tf.RegBlockSize,
		})
	}
	readTimes(br, tf.Frames)
	return tf, nil
}

// TimesMagic starts the section of frame times WriteTFile adds after the
// end marker when any frame's time is known: the magic, a u32 count, then count little-endian i64s, the
// frames' Time in order. gdb's reader stops at the end marker; a file
// without the section (gdb's own tsave) has frames of unknown time.
const TimesMagic = "gotpstub frame times\n"

// appendTimes appends the frame-times section for times to dst.
func appendTimes(dst []byte, times []int64) []byte {
	dst = append(dst, TimesMagic...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(times)))
	for _, t := range times {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(t))
	}
	return dst
}

// readTimes sets the frames' Time from a frame-times section after the
// end marker (whose first two bytes were read), when there is one for
// exactly these frames; anything else after the frames is ignored, as
// gdb ignores it.
func readTimes(br *bufio.Reader, fs []*Frame) {
	rest, _ := io.ReadAll(io.LimitReader(br, int64(2+len(TimesMagic)+4+8*len(fs))))
	rest = bytes.TrimPrefix(rest, []byte{0, 0}) // the end marker's second half
	if !bytes.HasPrefix(rest, []byte(TimesMagic)) {
		return
	}
	rest = rest[len(TimesMagic):]
	if len(rest) < 4 || binary.LittleEndian.Uint32(rest) != uint32(len(fs)) || len(rest) != 4+8*len(fs) {
		return
	}
	for i, f := range fs {
		f.Time = int64(binary.LittleEndian.Uint64(rest[4+8*i:]))
	}
}

// interpLine handles one definition line like gdb's tfile_interp_line.
func (tf *TFile) interpLine(line string, tdesc *strings.Builder) error {
	switch {
	case strings.HasPrefix(line, "R "):
		// gdb uses strtol(p, &p, 16): optional blanks and "0x", then
		// hex digits; 0 when there are none.
		digits := strings.TrimLeft(line[2:], " \t")
		if len(digits) > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X') {
			if _, ok := hexNibble(digits[2]); ok {
				digits = digits[2:]
			}
		}
		end := 0
		for end < len(digits) {
			if _, ok := hexNibble(digits[end]); !ok {
				break
			}
			end++
		}
		n := 0
		if end > 0 {
			v, err := strconv.ParseInt(digits[:end], 16, 32)
			if err != nil {
				return fmt.Errorf("read tfile register block size %q: %w", line, err)
			}
			n = int(v)
		}
		tf.RegBlockSize = n
	case strings.HasPrefix(line, "status "):
		tf.Status = line[len("status "):]
	case strings.HasPrefix(line, "tp "):
		tf.Tracepoints = append(tf.Tracepoints, line[len("tp "):])
	case strings.HasPrefix(line, "tsv "):
		tf.TSVs = append(tf.TSVs, line[len("tsv "):])
	case strings.HasPrefix(line, "tdesc "):
		tdesc.WriteString(line[len("tdesc "):])
		tdesc.WriteByte('\n')
	default:
		tf.Unknown = append(tf.Unknown, line)
	}
	return nil
}

// noEOF turns a bare io.EOF into io.ErrUnexpectedEOF: every read here
// happens where more data is required.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
