package export

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"

	"gotpstub/frames"
	"gotpstub/tdesc"
)

// Field numbers of Perfetto's trace format (protos/perfetto/trace in
// Perfetto's repository: trace.proto, trace_packet.proto,
// track_event/track_event.proto, track_descriptor.proto,
// debug_annotation.proto, counter_descriptor.proto).
const (
	pfTracePacket = 1 // Trace.packet

	pfPacketTimestamp  = 8  // TracePacket.timestamp
	pfPacketSequenceID = 10 // TracePacket.trusted_packet_sequence_id
	pfPacketTrackEvent = 11 // TracePacket.track_event
	pfPacketSeqFlags   = 13 // TracePacket.sequence_flags
	pfPacketTrackDesc  = 60 // TracePacket.track_descriptor

	pfDescUUID    = 1 // TrackDescriptor.uuid
	pfDescName    = 2 // TrackDescriptor.name
	pfDescCounter = 8 // TrackDescriptor.counter (CounterDescriptor)

	pfEventAnnotation = 4  // TrackEvent.debug_annotations
	pfEventType       = 9  // TrackEvent.type
	pfEventTrackUUID  = 11 // TrackEvent.track_uuid
	pfEventCategories = 22 // TrackEvent.categories
	pfEventName       = 23 // TrackEvent.name
	pfEventCounter    = 30 // TrackEvent.counter_value

	pfAnnotUint    = 3  // DebugAnnotation.uint_value
	pfAnnotInt     = 4  // DebugAnnotation.int_value
	pfAnnotString  = 6  // DebugAnnotation.string_value
	pfAnnotPointer = 7  // DebugAnnotation.pointer_value
	pfAnnotName    = 10 // DebugAnnotation.name

	pfTypeInstant = 3 // TrackEvent.TYPE_INSTANT
	pfTypeCounter = 4 // TrackEvent.TYPE_COUNTER

	pfSeqIncrementalCleared = 1 // TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
)

// Track uuids: one track of instant events per tracepoint, one counter
// track per trace state variable.
const (
	tpTrackBase  = 1 << 32
	tsvTrackBase = 2 << 32
	sequenceID   = 1
)

// WritePerfetto writes the trace in Perfetto's protobuf trace format: a
// track per tracepoint ("tracepoint N: LOCATION") with an instant event
// per frame at its time, annotated with the frame number, pc, general
// registers, memory and trace state variables, and a counter track per
// trace state variable with its collected values. Frames without a known
// time are left out (Perfetto places events by time); it returns how many.
func (t *Trace) WritePerfetto(w io.Writer) (skipped int, err error) {
	bw := bufio.NewWriter(w)
	packet := func(p []byte) {
		if err == nil {
			_, err = bw.Write(protowire.AppendBytes(protowire.AppendTag(nil, pfTracePacket, protowire.BytesType), p))
		}
	}
	nums := make([]int, 0, len(t.Tracepoints))
	for n := range t.Tracepoints {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	first := true
	for _, n := range nums {
		tp := t.Tracepoints[n]
		name := fmt.Sprintf("tracepoint %d", n)
		if tp.Location != "" {
			name += ": " + tp.Location
		}
		packet(trackDescriptor(tpTrackBase+uint64(n), name, false, first))
		first = false
	}
	counters := map[int]bool{}
	for _, f := range t.File.Frames {
		ns, ok := timeOf(f)
		if !ok {
			skipped++
			continue
		}
		if _, known := t.Tracepoints[f.TPNum]; !known {
			t.Tracepoints[f.TPNum] = &Tracepoint{Num: f.TPNum}
			packet(trackDescriptor(tpTrackBase+uint64(f.TPNum), fmt.Sprintf("tracepoint %d", f.TPNum), false, first))
			first = false
		}
		packet(t.frameEvent(f, uint64(ns), first))
		first = false
		for _, v := range f.TSVs() {
			if !counters[v.Num] {
				counters[v.Num] = true
				packet(trackDescriptor(tsvTrackBase+uint64(v.Num), t.tsvName(v.Num), true, false))
			}
			ev := protowire.AppendTag(nil, pfEventType, protowire.VarintType)
			ev = protowire.AppendVarint(ev, pfTypeCounter)
			ev = appendUint(ev, pfEventTrackUUID, tsvTrackBase+uint64(v.Num))
			ev = protowire.AppendTag(ev, pfEventCounter, protowire.VarintType)
			ev = protowire.AppendVarint(ev, uint64(v.Value))
			packet(timedPacket(uint64(ns), ev, false))
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	return skipped, err
}

// tsvName is "$name" or "$N" for a trace state variable.
func (t *Trace) tsvName(num int) string {
	if name := t.TSVNames[num]; name != "" {
		return "$" + name
	}
	return fmt.Sprintf("$%d", num)
}

// trackDescriptor returns a TracePacket holding a TrackDescriptor.
func trackDescriptor(uuid uint64, name string, counter, firstPacket bool) []byte {
	d := appendUint(nil, pfDescUUID, uuid)
	d = protowire.AppendTag(d, pfDescName, protowire.BytesType)
	d = protowire.AppendString(d, name)
	if counter {
		d = protowire.AppendTag(d, pfDescCounter, protowire.BytesType)
		d = protowire.AppendBytes(d, nil)
	}
	p := sequencePacket(firstPacket)
	p = protowire.AppendTag(p, pfPacketTrackDesc, protowire.BytesType)
	return protowire.AppendBytes(p, d)
}

// sequencePacket starts a TracePacket of this writer's sequence; the
// first one says the sequence's (empty) incremental state starts there.
func sequencePacket(first bool) []byte {
	p := appendUint(nil, pfPacketSequenceID, sequenceID)
	if first {
		p = appendUint(p, pfPacketSeqFlags, pfSeqIncrementalCleared)
	}
	return p
}

// timedPacket returns a TracePacket at ns holding the TrackEvent ev.
func timedPacket(ns uint64, ev []byte, first bool) []byte {
	p := appendUint(sequencePacket(first), pfPacketTimestamp, ns)
	p = protowire.AppendTag(p, pfPacketTrackEvent, protowire.BytesType)
	return protowire.AppendBytes(p, ev)
}

// frameEvent returns the TracePacket of f's instant event.
func (t *Trace) frameEvent(f *frames.Frame, ns uint64, first bool) []byte {
	ev := protowire.AppendTag(nil, pfEventType, protowire.VarintType)
	ev = protowire.AppendVarint(ev, pfTypeInstant)
	ev = appendUint(ev, pfEventTrackUUID, tpTrackBase+uint64(f.TPNum))
	ev = protowire.AppendTag(ev, pfEventCategories, protowire.BytesType)
	ev = protowire.AppendString(ev, "gdb-tracepoint")
	ev = protowire.AppendTag(ev, pfEventName, protowire.BytesType)
	ev = protowire.AppendString(ev, fmt.Sprintf("tracepoint %d", f.TPNum))
	annot := func(a []byte) {
		ev = protowire.AppendTag(ev, pfEventAnnotation, protowire.BytesType)
		ev = protowire.AppendBytes(ev, a)
	}
	annot(annotation("frame", pfAnnotUint, uint64(f.Num), ""))
	annot(annotation("pc", pfAnnotPointer, t.pc(f), ""))
	if regs := f.Registers(); regs != nil && t.Layout != nil && len(regs) == t.Layout.Size {
		for _, r := range t.Layout.Regs {
			if r.Num >= tdesc.RIP { // the general registers (rip is "pc")
				continue
			}
			var v uint64
			for i := r.Size - 1; i >= 0; i-- {
				v = v<<8 | uint64(regs[r.Offset+i])
			}
			annot(annotation(r.Name, pfAnnotPointer, v, ""))
		}
	}
	for _, m := range f.Memory() {
		annot(annotation(fmt.Sprintf("memory %#x", m.Addr), pfAnnotString, 0, hex.EncodeToString(m.Data)))
	}
	for _, v := range f.TSVs() {
		annot(annotation(t.tsvName(v.Num), pfAnnotInt, uint64(v.Value), ""))
	}
	return timedPacket(ns, ev, first)
}

// annotation returns a DebugAnnotation named name holding an integer
// (field kind, value v) or a string s.
func annotation(name string, kind protowire.Number, v uint64, s string) []byte {
	a := protowire.AppendTag(nil, pfAnnotName, protowire.BytesType)
	a = protowire.AppendString(a, name)
	if kind == pfAnnotString {
		a = protowire.AppendTag(a, kind, protowire.BytesType)
		return protowire.AppendString(a, s)
	}
	a = protowire.AppendTag(a, kind, protowire.VarintType)
	return protowire.AppendVarint(a, v)
}

// appendUint appends a varint field.
func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}
