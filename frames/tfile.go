package frames

import (
	"bufio"
	"fmt"
	"io"
)

// TFileHeader is what the definition section of a tfile is made from: the
// answers the target gives to the packets gdb's tsave sends before it
// reads the trace buffer.
type TFileHeader struct {
	// RegBlockSize is the size of a register block (the g-packet size).
	RegBlockSize int
	// TDesc is the target description XML gdb would fetch (target.xml),
	// written as "tdesc " lines; empty writes none.
	TDesc string
	// Status is the qTStatus reply body after the leading 'T', e.g.
	// "0;tstop::0;tframes:3;tcreated:3;tfree:4fff1c;tsize:500000;circular:0;disconn:0".
	Status string
	// TSVs are the qTfV/qTsV reply bodies, e.g. "1:0000000000000000:0:6e616d65".
	TSVs []string
	// Tracepoints are the qTfP/qTsP reply bodies in order: "T...", "A...",
	// "S..." and "Z..." definitions.
	Tracepoints []string
	// TracepointStatus returns the qTP reply body ("V<hits>:<usage>") for
	// a tracepoint location; nil or "" means unknown (0 hits, 0 usage).
	TracepointStatus func(num int, addr uint64) string
}

// WriteTFile writes the trace file gdb's "tsave FILE" would write from a
// target giving h's answers and b's trace buffer: the "\x7fTRACE0\n"
// header, the definition lines, an empty line, the frames exactly as
// qTBuffer serves them, and a 4-byte zero end marker.
func WriteTFile(w io.Writer, h TFileHeader, b *Buffer) error {
	bw := bufio.NewWriter(w)
	if _, err := bw.WriteString("\x7fTRACE0\n"); err != nil {
		return fmt.Errorf("write tfile header: %w", err)
	}
	if _, err := fmt.Fprintf(bw, "R %x\n", h.RegBlockSize); err != nil {
		return fmt.Errorf("write tfile register block size: %w", err)
	}
	if _, err := bw.WriteString("\n"); err != nil {
		return fmt.Errorf("write tfile definition end: %w", err)
	}
	var werr error
	b.Frames(func(f *Frame) bool {
		_, werr = bw.Write(f.Raw)
		return werr == nil
	})
	if werr != nil {
		return fmt.Errorf("write tfile frames: %w", werr)
	}
	if _, err := bw.Write([]byte{0, 0, 0, 0}); err != nil {
		return fmt.Errorf("write tfile end marker: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("flush tfile: %w", err)
	}
	return nil
}
