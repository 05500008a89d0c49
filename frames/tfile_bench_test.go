package frames

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// BenchmarkWriteTFile writes the tfile of a full default-size linear
// buffer (5 MiB) whose frames are a fast tracepoint's `collect $rdi,
// $rsi` (an 'r' block of two registers and the pc, expanded to an
// 800-byte 'R' block in the file) and, as many, hits that collect
// nothing: what QTSave does after a busy run (e2e
// TestNonStopTraceWhileRunning's cycles). ns/op is per file.
func BenchmarkWriteTFile(b *testing.B) {
	buf := NewBuffer(DefaultSize)
	var block [800]byte
	runs := [][2]int{{40, 48}, {32, 40}, {128, 136}}
	runs[0], runs[1] = runs[1], runs[0]
	var fb FrameBuilder
	for i := 0; ; i++ {
		fb.Reset(1 + i%2)
		fb.SetFallbackPC(0x401000)
		fb.SetTime(int64(i))
		if i%2 == 0 {
			fb.AddRegisterRuns(block[:], runs)
		}
		if err := buf.Commit(&fb); errors.Is(err, ErrFull) {
			break
		} else if err != nil {
			b.Fatal(err)
		}
	}
	h := TFileHeader{RegBlockSize: len(block), Status: "0;tstop::0"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := WriteTFile(io.Discard, h, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Count()), "frames")
	b.ReportMetric(float64(buf.GDBUsed())/(1<<20), "MiB")
}

// TestWriteGDBFramesMatchesSnapshot: the frames QTSave streams (stored
// bytes expanded one frame at a time) are byte for byte what qTBuffer
// serves (the gdb-layout snapshot), for a circular buffer that has
// wrapped, with frames that hold 'r' blocks, 'R' blocks, memory, or
// nothing.
func TestWriteGDBFramesMatchesSnapshot(t *testing.T) {
	buf := NewBuffer(64 << 10)
	buf.SetCircular(true)
	var block [96]byte
	for i := range block {
		block[i] = byte(i)
	}
	var fb FrameBuilder
	for i := range 5000 {
		fb.Reset(1 + i%4)
		fb.SetFallbackPC(0x401000)
		switch i % 4 {
		case 0:
			fb.AddRegisterRuns(block[:], [][2]int{{8, 16}, {40, 48 + i%8}})
		case 1:
			fb.AddRegisters(block[:])
		case 2:
			fb.AddMemory(0x601000+uint64(i), block[:1+i%13])
		}
		if err := buf.Commit(&fb); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := buf.snapshot()
	raw, sizes, _, regSize := buf.storedSnapshot()
	var got bytes.Buffer
	if err := writeGDBFrames(&got, raw, sizes, regSize); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("streamed frames (%d bytes) differ from the snapshot (%d bytes)", got.Len(), len(want))
	}
	if len(want) <= len(raw) {
		t.Fatalf("gdb layout %d bytes, stored %d: no 'r' block was expanded", len(want), len(raw))
	}
	if err := writeGDBFrames(io.Discard, raw[:len(raw)-1], sizes, regSize); err == nil {
		t.Error("frames longer than the bytes given: no error")
	}
}
