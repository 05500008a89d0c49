package export

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gotpstub/frames"
	"gotpstub/tdesc"
)

// CTF event ids: a frame without registers, a frame with them.
const (
	ctfFrame     = 0
	ctfFrameRegs = 1
)

// ctfMagic starts every CTF packet.
const ctfMagic = 0xc1fc1fc1

// WriteCTF writes the trace as a CTF 1.8 trace in directory dir (created
// if needed): "metadata" (TSDL) and one stream, "stream_0", in one packet.
// Events are ordered by time (CTF readers want a stream's timestamps not
// to go back; frames of different tracepoints reach the buffer in drain
// order), each carrying its frame number; a frame without a known time
// has timestamp 0. Event "frame" holds the tracepoint, frame, pc and
// location, the memory blocks and the trace state variables; "frame_regs"
// adds the general registers (rax … gs, fs_base, gs_base) by name.
func (t *Trace) WriteCTF(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	regs := t.ctfRegs()
	if err := os.WriteFile(filepath.Join(dir, "metadata"), []byte(ctfMetadata(regs)), 0o644); err != nil {
		return err
	}
	fs := append([]*frames.Frame(nil), t.File.Frames...)
	sort.SliceStable(fs, func(i, j int) bool {
		a, _ := timeOf(fs[i])
		b, _ := timeOf(fs[j])
		return a < b
	})
	var events bytes.Buffer
	var first, last uint64
	for i, f := range fs {
		ts, _ := timeOf(f)
		if i == 0 {
			first = uint64(ts)
		}
		last = uint64(ts)
		t.ctfEvent(&events, f, uint64(ts), regs)
	}
	const headerBytes = 4 + 4 + 8*4
	size := uint64(headerBytes+events.Len()) * 8
	var pkt bytes.Buffer
	le := binary.LittleEndian
	pkt.Write(le.AppendUint32(nil, ctfMagic))
	pkt.Write(le.AppendUint32(nil, 0)) // stream id
	for _, v := range []uint64{first, last, size, size} {
		pkt.Write(le.AppendUint64(nil, v))
	}
	pkt.Write(events.Bytes())
	return os.WriteFile(filepath.Join(dir, "stream_0"), pkt.Bytes(), 0o644)
}

// ctfRegs returns the registers "frame_regs" carries: the general ones
// and the segment bases, when the layout is known.
func (t *Trace) ctfRegs() []tdesc.Reg {
	if t.Layout == nil {
		return nil
	}
	var out []tdesc.Reg
	for _, r := range t.Layout.Regs {
		if r.Num <= tdesc.GS || r.Num == tdesc.FSBASE || r.Num == tdesc.GSBASE {
			out = append(out, r)
		}
	}
	return out
}

// ctfEvent appends f's event: header (id, timestamp), then the fields in
// the metadata's order.
func (t *Trace) ctfEvent(w *bytes.Buffer, f *frames.Frame, ts uint64, regs []tdesc.Reg) {
	le := binary.LittleEndian
	block := f.Registers()
	id := uint32(ctfFrame)
	if block != nil && t.Layout != nil && len(block) == t.Layout.Size && len(regs) > 0 {
		id = ctfFrameRegs
	}
	w.Write(le.AppendUint32(nil, id))
	w.Write(le.AppendUint64(nil, ts))
	w.Write(le.AppendUint16(nil, uint16(f.TPNum)))
	w.Write(le.AppendUint32(nil, uint32(f.Num)))
	w.Write(le.AppendUint64(nil, t.pc(f)))
	loc := ""
	if tp := t.Tracepoints[f.TPNum]; tp != nil {
		loc = tp.Location
	}
	w.WriteString(strings.ReplaceAll(loc, "\x00", ""))
	w.WriteByte(0)
	mem := f.Memory()
	w.Write(le.AppendUint32(nil, uint32(len(mem))))
	for _, m := range mem {
		w.Write(le.AppendUint64(nil, m.Addr))
		w.Write(le.AppendUint32(nil, uint32(len(m.Data))))
		w.Write(m.Data)
	}
	tsvs := f.TSVs()
	w.Write(le.AppendUint32(nil, uint32(len(tsvs))))
	for _, v := range tsvs {
		w.Write(le.AppendUint32(nil, uint32(v.Num)))
		w.Write(le.AppendUint64(nil, uint64(v.Value)))
	}
	if id == ctfFrameRegs {
		for _, r := range regs {
			var v [8]byte
			copy(v[:], block[r.Offset:r.Offset+r.Size])
			w.Write(v[:])
		}
	}
}

// ctfMetadata is the TSDL description of WriteCTF's stream.
func ctfMetadata(regs []tdesc.Reg) string {
	var b strings.Builder
	b.WriteString(`/* CTF 1.8 */
typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 16; align = 8; signed = false; } := uint16_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := uint64_t;
typealias integer { size = 64; align = 8; signed = true; } := int64_t;
typealias integer { size = 64; align = 8; signed = false; base = hex; } := hex64_t;

trace {
	major = 1;
	minor = 8;
	byte_order = le;
	packet.header := struct {
		uint32_t magic;
		uint32_t stream_id;
	};
};

env {
	tracer_name = "gotpstub";
	domain = "gdb-tracepoints";
};

clock {
	name = realtime;
	description = "nanoseconds since the Unix epoch";
	freq = 1000000000;
	offset_s = 0;
	offset = 0;
	absolute = TRUE;
};

typealias integer { size = 64; align = 8; signed = false; map = clock.realtime.value; } := clock_t;

stream {
	id = 0;
	packet.context := struct {
		clock_t timestamp_begin;
		clock_t timestamp_end;
		uint64_t content_size;
		uint64_t packet_size;
	};
	event.header := struct {
		uint32_t id;
		clock_t timestamp;
	};
};
`)
	fields := `		uint16_t tracepoint;
		uint32_t frame;
		hex64_t pc;
		string location;
		uint32_t n_memory;
		struct {
			hex64_t addr;
			uint32_t length;
			uint8_t bytes[length];
		} memory[n_memory];
		uint32_t n_tsvs;
		struct {
			uint32_t num;
			int64_t value;
		} tsvs[n_tsvs];
`
	fmt.Fprintf(&b, "\nevent {\n\tname = \"frame\";\n\tid = %d;\n\tstream_id = 0;\n\tfields := struct {\n%s\t};\n};\n", ctfFrame, fields)
	var rf strings.Builder
	for _, r := range regs {
		fmt.Fprintf(&rf, "\t\thex64_t %s;\n", r.Name)
	}
	fmt.Fprintf(&b, "\nevent {\n\tname = \"frame_regs\";\n\tid = %d;\n\tstream_id = 0;\n\tfields := struct {\n%s%s\t};\n};\n", ctfFrameRegs, fields, rf.String())
	return b.String()
}
