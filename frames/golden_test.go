package frames

import (
	"bytes"
	"os"
	"testing"
)

// TestWriteTFileMatchesGDB rebuilds the trace buffer of a real gdbserver
// run (frames taken from the tfile gdb's tsave wrote, re-encoded by the
// FrameBuilder) and the replies gdbserver gave during that tsave, and
// checks WriteTFile produces gdb's file byte for byte.
func TestWriteTFileMatchesGDB(t *testing.T) {
	want, err := os.ReadFile("testdata/gdbserver-tsave.tf")
	if err != nil {
		t.Fatalf("read golden tfile: %v", err)
	}
	tf, err := ReadTFile(bytes.NewReader(want))
	if err != nil {
		t.Fatalf("ReadTFile(golden): %v", err)
	}
	if len(tf.Frames) != 6 {
		t.Fatalf("golden file has %d frames, want 6", len(tf.Frames))
	}
	h := repliesHeader(t, "testdata/gdbserver-tsave.replies", tf.RegBlockSize)
	h.TDesc = tf.TDesc
	b := rebuild(t, tf.Frames, DefaultSize)
	if got, want := b.Free(), 0x4fee91; got != want {
		t.Errorf("Free() = %#x, gdbserver reported tfree %#x", got, want)
	}
	var got bytes.Buffer
	if err := WriteTFile(&got, h, b); err != nil {
		t.Fatalf("WriteTFile: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		g, w := got.Bytes(), want
		i := 0
		for i < len(g) && i < len(w) && g[i] == w[i] {
			i++
		}
		lo := max(0, i-80)
		t.Fatalf("WriteTFile differs from gdb's tsave at byte %d (len %d vs %d):\n got: %q\nwant: %q",
			i, len(g), len(w), g[lo:min(len(g), i+80)], w[lo:min(len(w), i+80)])
	}
}
