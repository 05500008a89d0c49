// Package export turns a trace file (gdb's tfile format, from tsave or
// QTSave) into the formats trace viewers and scripts read:
//
//   - JSON Lines (WriteJSON): one object per frame with its tracepoint,
//     the tracepoint's location as gdb gave it, the time, the pc, the
//     registers by name, the memory and the trace state variables;
//   - CTF 1.8 (WriteCTF): a directory with TSDL metadata and one binary
//     stream, readable by babeltrace2 and Trace Compass, with a clock in
//     nanoseconds since the Unix epoch;
//   - Perfetto's protobuf trace (WritePerfetto) for the Perfetto UI: a
//     track per tracepoint with an instant event per frame (annotated
//     with the pc, general registers, memory and variables) and a counter
//     track per trace state variable. It is encoded with protowire of
//     google.golang.org/protobuf against Perfetto's field numbers; the
//     tests decode it with that library against a transcription of the
//     schema's part used (perfetto_test.go).
//
// Frame times come from gotpstub's frame-times section (frames.TimesMagic,
// written by QTSave, i.e. gdb's `tsave -r`), or else from a collected
// $trace_timestamp (microseconds); a frame with neither has no time
// (JSON null, CTF 0). Files written by gdb's own `tsave` carry only the
// latter.
//
// Registers are named after the amd64 GNU/Linux layout of package tdesc
// whose size matches the file's register blocks. A trace file does not
// say which registers a fast tracepoint's pad left out: they read 0 here
// as in gdb's `target tfile`.
package export
