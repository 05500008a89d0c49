package fasttp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"gotpstub/jit"
)

// putHeader writes a record header at ring offset off.
func putHeader(ring []byte, off uint64, size, tp, used, flags uint32) {
	h := ring[off:]
	binary.LittleEndian.PutUint32(h[jit.RecTPIndex:], tp)
	binary.LittleEndian.PutUint32(h[jit.RecUsed:], used)
	binary.LittleEndian.PutUint32(h[jit.RecFlags:], flags)
	binary.LittleEndian.PutUint32(h[jit.RecSize:], size)
}

// putRecord writes a committed normal record of recSize bytes at off whose
// registers are regBase+i and whose blocks are blocks; it returns recSize.
func putRecord(ring []byte, off uint64, recSize, tp uint32, regBase uint64, blocks []byte) uint64 {
	for i := 0; i < jit.PadRegs; i++ {
		binary.LittleEndian.PutUint64(ring[off+jit.RecHeaderSize+uint64(8*i):], regBase+uint64(i))
	}
	copy(ring[off+jit.RecHeaderSize+ringRegBytes:], blocks)
	putHeader(ring, off, recSize, tp, uint32(len(blocks)), 0)
	return uint64(recSize)
}

// memBlock and tsvBlock build collection blocks.
func memBlock(addr uint64, data []byte) []byte {
	b := []byte{jit.BlockMemory}
	b = binary.LittleEndian.AppendUint64(b, addr)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

func tsvBlock(num uint32, v int64) []byte {
	b := []byte{jit.BlockTSV}
	b = binary.LittleEndian.AppendUint32(b, num)
	return binary.LittleEndian.AppendUint64(b, uint64(v))
}

const testRecSize = 16 + ringRegBytes + 48 // 256

func TestParseRing(t *testing.T) {
	blocks := append(memBlock(0x1000, []byte("abcdef")), tsvBlock(7, -3)...)
	type want struct {
		tps     []uint32 // TPIndex of the returned records
		errs    []uint32 // ErrCode of the returned records
		tail    uint64
		errText string // substring of the error, "" for none
	}
	cases := []struct {
		name     string
		ringSize uint64
		build    func(ring []byte) (tail, head uint64)
		want     want
	}{
		{"empty", 1024, func(r []byte) (uint64, uint64) { return 32, 32 }, want{tail: 32}},
		{"one record", 1024, func(r []byte) (uint64, uint64) {
			return 0, putRecord(r, 0, testRecSize, 4, 100, blocks)
		}, want{tps: []uint32{4}, errs: []uint32{0}, tail: testRecSize}},
		{"stops at the uncommitted one", 1024, func(r []byte) (uint64, uint64) {
			n := putRecord(r, 0, testRecSize, 1, 0, blocks)
			n += putRecord(r, n, testRecSize, 2, 0, nil)
			putHeader(r, n, 0, 3, 0, 0) // reserved, not committed
			return 0, n + testRecSize
		}, want{tps: []uint32{1, 2}, errs: []uint32{0, 0}, tail: 2 * testRecSize}},
		{"error records", 1024, func(r []byte) (uint64, uint64) {
			putHeader(r, 0, 16, 9, jit.ErrDivZero, jit.RecError)
			putHeader(r, 16, testRecSize, 8, jit.ErrCollect, jit.RecError)
			return 0, 16 + testRecSize
		}, want{tps: []uint32{9, 8}, errs: []uint32{jit.ErrDivZero, jit.ErrCollect}, tail: 16 + testRecSize}},
		{"filler then wrap", 640, func(r []byte) (uint64, uint64) {
			// tail at cursor 1280+512: offset 512, 128 bytes to the end.
			putHeader(r, 512, 128, 0, 0, jit.RecSkip)
			putRecord(r, 0, testRecSize, 5, 0, blocks)
			return 1280 + 512, 1280 + 640 + testRecSize
		}, want{tps: []uint32{5}, errs: []uint32{0}, tail: 1280 + 640 + testRecSize}},
		{"size not aligned", 1024, func(r []byte) (uint64, uint64) {
			putHeader(r, 0, 40, 0, 0, jit.RecError)
			return 0, 256
		}, want{errText: "offset 0"}},
		{"size past the end", 1024, func(r []byte) (uint64, uint64) {
			putHeader(r, 768, 512, 0, 0, 0)
			return 768, 768 + 512
		}, want{tail: 768, errText: "past the ring end"}},
		{"size past head", 1024, func(r []byte) (uint64, uint64) {
			n := putRecord(r, 0, testRecSize, 1, 0, nil)
			putHeader(r, n, testRecSize, 0, 0, 0)
			return 0, n + 64
		}, want{tps: []uint32{1}, errs: []uint32{0}, tail: testRecSize, errText: "offset 256"}},
		{"unknown flags", 1024, func(r []byte) (uint64, uint64) {
			putHeader(r, 0, testRecSize, 0, 0, 4)
			return 0, testRecSize
		}, want{errText: "flags"}},
		{"unknown error code", 1024, func(r []byte) (uint64, uint64) {
			putHeader(r, 0, 16, 0, 99, jit.RecError)
			return 0, 16
		}, want{errText: "error code 99"}},
		{"used too large", 1024, func(r []byte) (uint64, uint64) {
			putHeader(r, 0, testRecSize, 0, 49, 0)
			return 0, testRecSize
		}, want{errText: "cannot hold"}},
		{"too small for registers", 1024, func(r []byte) (uint64, uint64) {
			putHeader(r, 0, 32, 0, 0, 0)
			return 0, 32
		}, want{errText: "cannot hold"}},
		{"filler short of the end", 1024, func(r []byte) (uint64, uint64) {
			putHeader(r, 0, 512, 0, 0, jit.RecSkip)
			return 0, 1024
		}, want{errText: "filler"}},
		{"bad block tag", 1024, func(r []byte) (uint64, uint64) {
			return 0, putRecord(r, 0, testRecSize, 0, 0, []byte{'X', 1, 2})
		}, want{errText: "unknown tag"}},
		{"truncated M block", 1024, func(r []byte) (uint64, uint64) {
			return 0, putRecord(r, 0, testRecSize, 0, 0, memBlock(1, []byte("abcdef"))[:14])
		}, want{errText: "truncated"}},
		{"truncated V block", 1024, func(r []byte) (uint64, uint64) {
			return 0, putRecord(r, 0, testRecSize, 0, 0, tsvBlock(1, 2)[:12])
		}, want{errText: "truncated"}},
		{"tail not aligned", 1024, func(r []byte) (uint64, uint64) { return 8, 264 }, want{tail: 8, errText: "aligned"}},
		{"head behind tail", 1024, func(r []byte) (uint64, uint64) { return 256, 0 }, want{tail: 256, errText: "apart"}},
		{"more than a ring", 1024, func(r []byte) (uint64, uint64) { return 0, 2048 }, want{errText: "apart"}},
		{"bad ring size", 1000, func(r []byte) (uint64, uint64) { return 0, 0 }, want{errText: "multiple"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ring := make([]byte, tc.ringSize)
			tail, head := tc.build(ring)
			recs, newTail, err := ParseRing(tc.ringSize, tail, head, RingSnapshot(ring))
			if tc.want.errText == "" && err != nil {
				t.Fatalf("error %v", err)
			}
			if tc.want.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.want.errText)) {
				t.Fatalf("error %v, want one containing %q", err, tc.want.errText)
			}
			if newTail != tc.want.tail {
				t.Errorf("new tail %d, want %d", newTail, tc.want.tail)
			}
			if len(recs) != len(tc.want.tps) {
				t.Fatalf("%d records, want %d", len(recs), len(tc.want.tps))
			}
			for i, r := range recs {
				if r.TPIndex != tc.want.tps[i] || r.ErrCode != tc.want.errs[i] {
					t.Errorf("record %d: tp %d err %d, want %d %d", i, r.TPIndex, r.ErrCode, tc.want.tps[i], tc.want.errs[i])
				}
				if r.ErrCode != 0 {
					if r.Flags != jit.RecError || r.Blocks != nil {
						t.Errorf("record %d: error record %+v", i, r)
					}
					continue
				}
				if r.Regs[3] != r.Regs[0]+3 || string(r.Blocks) != string(blocks) && len(r.Blocks) != 0 {
					t.Errorf("record %d: regs %v blocks % x", i, r.Regs[:4], r.Blocks)
				}
			}
		})
	}
}

// TestParseRingContents checks registers, blocks and cursors exactly.
func TestParseRingContents(t *testing.T) {
	ring := make([]byte, 2048)
	b1 := memBlock(0xdead0000, []byte{1, 2, 3})
	b2 := append(tsvBlock(2, 42), memBlock(0xbeef, nil)...)
	n := putRecord(ring, 0, testRecSize, 3, 1000, b1)
	putRecord(ring, n, testRecSize, 4, 2000, b2)
	recs, tail, err := ParseRing(2048, 0, 2*testRecSize, RingSnapshot(ring))
	if err != nil || tail != 2*testRecSize || len(recs) != 2 {
		t.Fatalf("%d records, tail %d, %v", len(recs), tail, err)
	}
	for i, want := range []struct {
		cursor, regBase uint64
		tp              uint32
		blocks          []byte
	}{{0, 1000, 3, b1}, {testRecSize, 2000, 4, b2}} {
		r := recs[i]
		if r.Cursor != want.cursor || r.TPIndex != want.tp || string(r.Blocks) != string(want.blocks) {
			t.Errorf("record %d: cursor %d tp %d blocks % x", i, r.Cursor, r.TPIndex, r.Blocks)
		}
		for j, v := range r.Regs {
			if v != want.regBase+uint64(j) {
				t.Errorf("record %d reg %d = %d", i, j, v)
			}
		}
	}
	// The blocks are a copy: the ring can be zeroed afterwards.
	clear(ring)
	if string(recs[0].Blocks) != string(b1) {
		t.Errorf("blocks alias the ring")
	}
}

// TestParseRingReadsHeaderFirst: the body of a record is read only after
// its header said it is committed, and read errors are reported.
func TestParseRingReadsHeaderFirst(t *testing.T) {
	ring := make([]byte, 1024)
	n := putRecord(ring, 0, testRecSize, 1, 0, nil)
	var reads []string
	read := func(off uint64, k int) ([]byte, error) {
		reads = append(reads, fmt.Sprintf("%d+%d", off, k))
		return RingSnapshot(ring)(off, k)
	}
	// The second record is reserved but not committed.
	if _, tail, err := ParseRing(1024, 0, 2*n, read); err != nil || tail != n {
		t.Fatalf("tail %d, %v", tail, err)
	}
	if want := []string{"0+16", "16+192", "256+16"}; fmt.Sprint(reads) != fmt.Sprint(want) {
		t.Errorf("reads %v, want %v", reads, want)
	}
	boom := errors.New("boom")
	_, tail, err := ParseRing(1024, 0, n, func(off uint64, k int) ([]byte, error) {
		if off > 0 {
			return nil, boom
		}
		return RingSnapshot(ring)(off, k)
	})
	if !errors.Is(err, boom) || tail != 0 {
		t.Errorf("body read error: tail %d, %v", tail, err)
	}
	_, _, err = ParseRing(1024, 0, n, func(off uint64, k int) ([]byte, error) { return make([]byte, k-1), nil })
	if err == nil {
		t.Errorf("short read accepted")
	}
}

func TestConsumedRanges(t *testing.T) {
	cases := []struct {
		size, old, new uint64
		want           string
		bad            bool
	}{
		{1024, 0, 0, "[]", false},
		{1024, 0, 256, "[[0 256]]", false},
		{1024, 2048 + 768, 2048 + 1024, "[[768 1024]]", false},
		{1024, 768, 1280, "[[768 1024] [0 256]]", false},
		{1024, 0, 1024, "[[0 1024]]", false},
		{1024, 256, 0, "", true},
		{1024, 0, 2048, "", true},
		{0, 0, 0, "", true},
	}
	for _, c := range cases {
		got, err := ConsumedRanges(c.size, c.old, c.new)
		if (err != nil) != c.bad || !c.bad && fmt.Sprint(got) != c.want {
			t.Errorf("ConsumedRanges(%d, %d, %d) = %v, %v; want %s", c.size, c.old, c.new, got, err, c.want)
		}
	}
}

// FuzzParseRing: any ring contents and cursors give records or an error,
// never a panic, and the new tail stays within [tail, head].
func FuzzParseRing(f *testing.F) {
	ring := make([]byte, 1024)
	n := putRecord(ring, 0, testRecSize, 1, 0, memBlock(5, []byte("xy")))
	putHeader(ring, n, 16, 2, jit.ErrMemory, jit.RecError)
	putHeader(ring, 768, 256, 0, 0, jit.RecSkip)
	f.Add(ring, uint64(1024), uint64(0), n+16)
	f.Add(ring, uint64(1024), uint64(768), uint64(1024+256))
	f.Add([]byte{16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0}, uint64(16), uint64(0), uint64(16))
	f.Add([]byte{}, uint64(0), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, ringSize, tail, head uint64) {
		if ringSize > 1<<16 {
			ringSize %= 1 << 16
		}
		ring := make([]byte, ringSize)
		copy(ring, data)
		recs, newTail, err := ParseRing(ringSize, tail, head, RingSnapshot(ring))
		if newTail < tail || (err == nil && newTail > head) {
			t.Fatalf("tail %d -> %d, head %d", tail, newTail, head)
		}
		for _, r := range recs {
			if r.Cursor < tail || r.Cursor >= newTail {
				t.Fatalf("record cursor %d outside [%d, %d)", r.Cursor, tail, newTail)
			}
			if r.Flags == jit.RecError && r.ErrCode == 0 {
				t.Fatalf("error record without a code")
			}
			if err := checkBlocks(r.Blocks); err != nil {
				t.Fatalf("returned malformed blocks: %v", err)
			}
		}
	})
}
