package export

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"gotpstub/frames"
	"gotpstub/tdesc"
)

// Tracepoint is what a trace file says about one tracepoint.
type Tracepoint struct {
	Num      int
	Addr     uint64
	Fast     bool
	Location string // the "at" source string gdb gave (e.g. "*(f+12)", "demo.c:30"), "" if none
}

// Trace is a trace file read for export.
type Trace struct {
	File        *frames.TFile
	Tracepoints map[int]*Tracepoint
	TSVNames    map[int]string
	Layout      *tdesc.Layout // nil when no amd64 layout has the file's register block size
}

// Read parses a trace file.
func Read(r io.Reader) (*Trace, error) {
	tf, err := frames.ReadTFile(r)
	if err != nil {
		return nil, err
	}
	t := &Trace{File: tf, Tracepoints: map[int]*Tracepoint{}, TSVNames: map[int]string{}}
	for _, l := range []*tdesc.Layout{tdesc.AMD64Linux(true), tdesc.AMD64Linux(false)} {
		if l.Size == tf.RegBlockSize {
			t.Layout = l
		}
	}
	for _, line := range tf.Tracepoints {
		t.tracepointLine(line)
	}
	for _, line := range tf.TSVs {
		// num:initial:builtin:namehex
		f := strings.SplitN(line, ":", 4)
		if len(f) == 4 {
			num, err1 := strconv.ParseUint(f[0], 16, 32)
			name, err2 := unhex(f[3])
			if err1 == nil && err2 == nil {
				t.TSVNames[int(num)] = name
			}
		}
	}
	return t, nil
}

// tracepointLine takes a "tp" line's T (definition) and Z (source) parts.
func (t *Trace) tracepointLine(line string) {
	if len(line) < 2 || (line[0] != 'T' && line[0] != 'Z') {
		return
	}
	f := strings.Split(line[1:], ":")
	if len(f) < 2 {
		return
	}
	num, err1 := strconv.ParseUint(f[0], 16, 32)
	addr, err2 := strconv.ParseUint(f[1], 16, 64)
	if err1 != nil || err2 != nil {
		return
	}
	tp := t.Tracepoints[int(num)]
	if tp == nil {
		tp = &Tracepoint{Num: int(num), Addr: addr}
		t.Tracepoints[int(num)] = tp
	}
	switch line[0] {
	case 'T':
		for _, x := range f[2:] {
			if strings.HasPrefix(x, "F") {
				tp.Fast = true
			}
		}
	case 'Z': // num:addr:srctype:start:len:hex
		if len(f) >= 6 && f[2] == "at" {
			if s, err := unhex(f[5]); err == nil {
				tp.Location = s
			}
		}
	}
}

// unhex decodes gdb's hex-encoded strings.
func unhex(h string) (string, error) {
	if len(h)%2 != 0 {
		return "", fmt.Errorf("odd hex string %q", h)
	}
	b := make([]byte, len(h)/2)
	for i := range b {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return "", err
		}
		b[i] = byte(v)
	}
	return string(b), nil
}

// timeOf returns a frame's time in nanoseconds since the Unix epoch: the
// file's frame-times section, else a collected $trace_timestamp
// (microseconds); ok is false when neither is there.
func timeOf(f *frames.Frame) (int64, bool) {
	if f.Time != 0 {
		return f.Time, true
	}
	for _, v := range f.TSVs() {
		if v.Num == 1 {
			return v.Value * 1000, true
		}
	}
	return 0, false
}

// pc returns a frame's pc: its rip when it has registers, else its
// tracepoint's address.
func (t *Trace) pc(f *frames.Frame) uint64 {
	if t.Layout != nil {
		if pc, ok := f.PC(t.Layout.Regs[tdesc.RIP].Offset); ok && pc != 0 {
			return pc
		}
	}
	if tp := t.Tracepoints[f.TPNum]; tp != nil {
		return tp.Addr
	}
	return 0
}
