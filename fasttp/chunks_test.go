package fasttp

import (
	"bytes"
	"slices"
	"testing"
)

// TestReuseChunk: the memory of removed pads serves new ones, first fit,
// within a jump's reach of the site and where no stopped thread is.
func TestReuseChunk(t *testing.T) {
	const base = 0x7000_0000
	for _, tc := range []struct {
		name       string
		chunks     []Range
		pcs        []uint64
		addr, size uint64
		want       uint64 // 0: none taken
		left       []Range
	}{
		{"first fit", []Range{{base, base + 0x100}, {base + 0x1000, base + 0x2000}}, nil, base, 0x200, base + 0x1000,
			[]Range{{base, base + 0x100}, {base + 0x1200, base + 0x2000}}},
		{"exact fit", []Range{{base, base + 0x200}}, nil, base, 0x1f8, base, nil},
		{"a thread inside", []Range{{base, base + 0x1000}, {base + 0x2000, base + 0x3000}}, []uint64{base + 0x10}, base, 0x100, base + 0x2000,
			[]Range{{base, base + 0x1000}, {base + 0x2100, base + 0x3000}}},
		{"out of reach", []Range{{base, base + 0x1000}}, nil, base + padReach, 0x100, 0, []Range{{base, base + 0x1000}}},
		{"none free", nil, nil, base, 0x100, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &Installer{chunks: slices.Clone(tc.chunks), pcs: append([]uint64{}, tc.pcs...)}
			got, ok := in.reuseChunkLocked(tc.addr, tc.size)
			if ok != (tc.want != 0) || got != tc.want {
				t.Fatalf("reuseChunkLocked = %#x, %v; want %#x", got, ok, tc.want)
			}
			if !slices.Equal(in.chunks, tc.left) {
				t.Errorf("chunks left %v, want %v", in.chunks, tc.left)
			}
		})
	}
}

// TestAppendPadRest: after a pad's code come fill up to the tail, the
// tail, and fill to the end of the pad's room, so that the pad covers its
// room without a gap.
func TestAppendPadRest(t *testing.T) {
	f := len(padFill)
	tail := bytes.Repeat([]byte{0x90}, 3*f)
	for _, c := range []struct {
		name            string
		codeLen, padLen int
		room            uint64
	}{
		{"fill on both sides", 5 * f, 8 * f, uint64(16 * f)},
		{"code fills padLen", 8 * f, 8 * f, uint64(16 * f)},
		{"tail fills the room", 5 * f, 8 * f, uint64(11 * f)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := appendPadRest([]byte("x"), c.codeLen, uint64(c.padLen), tail, c.room)
			want := append([]byte("x"), bytes.Repeat(padFill, (c.padLen-c.codeLen)/f)...)
			want = append(want, tail...)
			want = append(want, bytes.Repeat(padFill, (int(c.room)-c.padLen-len(tail))/f)...)
			if !bytes.Equal(got, want) {
				t.Fatalf("got % x\nwant % x", got, want)
			}
			if n := len(got) - 1 + c.codeLen; n != int(c.room) {
				t.Fatalf("code and rest take %d bytes, want the room's %d", n, c.room)
			}
		})
	}
}
