package fasttp

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"gotpstub/jit"
)

// putHeader writes a record header at lane offset off (size last, as the
// pads do).
func putHeader(lane []byte, off uint64, size, tp, used, flags uint32, time uint64) {
	h := lane[off:]
	binary.LittleEndian.PutUint32(h[jit.RecTPIndex:], tp)
	binary.LittleEndian.PutUint32(h[jit.RecUsed:], used)
	binary.LittleEndian.PutUint32(h[jit.RecFlags:], flags)
	binary.LittleEndian.PutUint64(h[jit.RecTime:], time)
	binary.LittleEndian.PutUint64(h[jit.RecThread:], 0x7f0000+uint64(tp))
	binary.LittleEndian.PutUint32(h[jit.RecSize:], size)
}

// putFiller writes the filler word at off: the rest of the lane is unused.
func putFiller(lane []byte, off uint64) {
	binary.LittleEndian.PutUint64(lane[off:], jit.RecCompactBit|jit.RecCompactSkip<<jit.RecCompactTPShift)
}

// putCompact writes a compact record at off and returns its size.
func putCompact(lane []byte, off uint64, tp uint32, time uint64) uint64 {
	binary.LittleEndian.PutUint64(lane[off:], jit.RecCompactBit|uint64(tp)<<jit.RecCompactTPShift|time&(1<<jit.RecCompactTimeBits-1))
	return jit.RecCompactSize
}

// putRecord writes a committed record at off: registers regBase+i when
// regs, then blocks. It returns its size.
func putRecord(lane []byte, off uint64, tp uint32, regs bool, regBase uint64, blocks []byte, time uint64) uint64 {
	size := padRecordSize(regs, uint32(len(blocks)))
	body := lane[off+jit.RecHeaderSize:]
	flags := uint32(0)
	if regs {
		flags = jit.RecRegs
		for i := range jit.PadRegs {
			binary.LittleEndian.PutUint64(body[8*i:], regBase+uint64(i))
		}
		body = body[ringRegBytes:]
	}
	copy(body, blocks)
	putHeader(lane, off, uint32(size), tp, uint32(len(blocks)), flags, time)
	return size
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

func TestParseLane(t *testing.T) {
	blocks := append(memBlock(0x1000, []byte("abcdef")), tsvBlock(7, -3)...)
	type want struct {
		tps     []uint32 // TPIndex of the returned records
		tail    uint64
		errText string // substring of the error, "" for none
	}
	cases := []struct {
		name  string
		size  uint64
		build func(lane []byte) (tail, head uint64)
		want  want
	}{
		{"empty", 1024, func([]byte) (uint64, uint64) { return 0, 0 }, want{tail: 0}},
		{"no-action records", 1024, func(l []byte) (uint64, uint64) {
			n := putRecord(l, 0, 1, false, 0, nil, 10)
			n += putRecord(l, n, 2, false, 0, nil, 11)
			return 0, n
		}, want{tps: []uint32{1, 2}, tail: 64}},
		{"registers and blocks", 1024, func(l []byte) (uint64, uint64) {
			return 0, putRecord(l, 0, 3, true, 100, blocks, 1)
		}, want{tps: []uint32{3}, tail: padRecordSize(true, uint32(len(blocks)))}},
		{"uncommitted record stops the pass", 1024, func(l []byte) (uint64, uint64) {
			n := putRecord(l, 0, 1, false, 0, nil, 1)
			return 0, n + 32 // reserved, size still 0
		}, want{tps: []uint32{1}, tail: 32}},
		{"error record", 1024, func(l []byte) (uint64, uint64) {
			putHeader(l, 0, 32, 4, jit.ErrDivZero, jit.RecError, 5)
			return 0, 32
		}, want{tps: []uint32{4}, tail: 32}},
		{"filler at the lane end", 1024, func(l []byte) (uint64, uint64) {
			putFiller(l, 1008)
			putRecord(l, 0, 5, false, 0, nil, 9)
			return 1008, 1024 + 32
		}, want{tps: []uint32{5}, tail: 1024 + 32}},
		{"8-byte filler", 1024, func(l []byte) (uint64, uint64) {
			putFiller(l, 1016)
			putRecord(l, 0, 5, false, 0, nil, 9)
			return 1016, 1024 + 32
		}, want{tps: []uint32{5}, tail: 1024 + 32}},
		{"compact and full records", 1024, func(l []byte) (uint64, uint64) {
			n := putCompact(l, 0, 1, 100)
			n += putRecord(l, n, 2, false, 0, nil, 101) // 8 bytes past a 16-byte boundary
			n += putCompact(l, n, 3, 102)
			return 0, n
		}, want{tps: []uint32{1, 2, 3}, tail: 8 + 32 + 8}},
		{"uncommitted word after compact records", 1024, func(l []byte) (uint64, uint64) {
			n := putCompact(l, 0, 1, 100)
			return 0, n + 8
		}, want{tps: []uint32{1}, tail: 8}},
		{"wrapped cursors", 1024, func(l []byte) (uint64, uint64) {
			putRecord(l, 64, 6, false, 0, nil, 1)
			return 5*1024 + 64, 5*1024 + 96
		}, want{tps: []uint32{6}, tail: 5*1024 + 96}},
		{"full header in the lane's last 8 bytes", 1024, func(l []byte) (uint64, uint64) {
			binary.LittleEndian.PutUint32(l[1016:], 32)
			return 1016, 1024 + 16
		}, want{errText: "past the lane end"}},
		{"filler past head", 1024, func(l []byte) (uint64, uint64) {
			putFiller(l, 1008)
			return 1008, 1021
		}, want{errText: "past head"}},
		{"filler word with time bits", 1024, func(l []byte) (uint64, uint64) {
			putFiller(l, 0)
			l[0] = 1
			return 0, 1024
		}, want{errText: "filler word"}},
		{"the old filler record", 1024, func(l []byte) (uint64, uint64) {
			putHeader(l, 0, 1024, 0, 0, jit.RecSkip, 0)
			return 0, 1024
		}, want{errText: "unknown flags"}},
		{"size past head", 1024, func(l []byte) (uint64, uint64) {
			putRecord(l, 0, 1, false, 0, nil, 1)
			return 0, 16
		}, want{errText: "past head"}},
		{"unknown flags", 1024, func(l []byte) (uint64, uint64) {
			putHeader(l, 0, 32, 1, 0, 0x40, 0)
			return 0, 32
		}, want{errText: "unknown flags"}},
		{"unknown error code", 1024, func(l []byte) (uint64, uint64) {
			putHeader(l, 0, 32, 1, 99, jit.RecError, 0)
			return 0, 32
		}, want{errText: "unknown error code"}},
		{"malformed blocks", 1024, func(l []byte) (uint64, uint64) {
			return 0, putRecord(l, 0, 1, false, 0, []byte{'Q', 1, 2}, 0)
		}, want{errText: "unknown tag"}},
		{"used larger than the record", 1024, func(l []byte) (uint64, uint64) {
			putHeader(l, 0, 48, 1, 40, 0, 0)
			return 0, 48
		}, want{errText: "cannot hold"}},
		{"record too small for registers", 1024, func(l []byte) (uint64, uint64) {
			putHeader(l, 0, 48, 1, 0, jit.RecRegs, 0)
			return 0, 48
		}, want{errText: "registers"}},
		{"records before a corrupt one are kept", 1024, func(l []byte) (uint64, uint64) {
			n := putRecord(l, 0, 7, false, 0, nil, 1)
			putHeader(l, n, 40, 1, 0, 0, 0)
			return 0, n + 48
		}, want{tps: []uint32{7}, tail: 32, errText: "multiple of 16"}},
		{"head too far from tail", 1024, func([]byte) (uint64, uint64) { return 0, 2048 }, want{errText: "apart"}},
		{"size not a power of two", 1000, func([]byte) (uint64, uint64) { return 0, 0 }, want{errText: "power of two"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lane := make([]byte, c.size)
			tail, head := c.build(lane)
			recs, newTail, err := ParseLane(lane, tail, head, nil)
			if c.want.errText == "" && err != nil || c.want.errText != "" && (err == nil || !strings.Contains(err.Error(), c.want.errText)) {
				t.Fatalf("error %v, want %q", err, c.want.errText)
			}
			var tps []uint32
			for _, r := range recs {
				tps = append(tps, r.TPIndex)
			}
			if len(tps) != len(c.want.tps) || (len(tps) > 0 && string(u32s(tps)) != string(u32s(c.want.tps))) {
				t.Errorf("records %v, want %v", tps, c.want.tps)
			}
			if c.want.errText == "" || c.want.tail != 0 {
				if newTail != tail+c.want.tail && newTail != c.want.tail {
					t.Errorf("tail %d, want %d", newTail, c.want.tail)
				}
			}
		})
	}
}

func u32s(v []uint32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

func TestParseLaneContents(t *testing.T) {
	lane := make([]byte, 4096)
	blocks := append(memBlock(0xdead, []byte{1, 2, 3}), tsvBlock(2, 42)...)
	n := putRecord(lane, 0, 9, true, 1000, blocks, 77)
	putHeader(lane, n, 32, 9, jit.ErrSteps, jit.RecError, 78)
	recs, tail, err := ParseLane(lane, 0, n+32, nil)
	if err != nil || tail != n+32 || len(recs) != 2 {
		t.Fatalf("ParseLane: %d records, tail %d, %v", len(recs), tail, err)
	}
	r := recs[0]
	if !r.HasRegs() || r.Reg(0) != 1000 || r.Reg(jit.PadRegs-1) != 1000+jit.PadRegs-1 {
		t.Errorf("registers %v", r.Regs)
	}
	if string(r.Blocks) != string(blocks) || r.Time != 77 || r.Thread != 0x7f0009 || r.Cursor != 0 {
		t.Errorf("record %+v", r)
	}
	// The payloads are the lane's bytes (no copy), capped so that an
	// append cannot write into the lane.
	if &r.Blocks[0] != &lane[jit.RecHeaderSize+ringRegBytes] || cap(r.Blocks) != len(r.Blocks) || cap(r.Regs) != len(r.Regs) {
		t.Errorf("blocks at %p (cap %d), lane at %p", r.Blocks, cap(r.Blocks), lane)
	}
	if e := recs[1]; e.Flags != jit.RecError || e.ErrCode != jit.ErrSteps || e.Cursor != n {
		t.Errorf("error record %+v", e)
	}
}

func TestMergeByTime(t *testing.T) {
	rec := func(lane int, time uint64) RingRecord { return RingRecord{Lane: lane, Time: time} }
	lanes := [][]RingRecord{
		{rec(0, 5), rec(0, 1), rec(0, 9)}, // a lane whose clock went back keeps its order
		{},
		{rec(2, 2), rec(2, 6)},
	}
	got := mergeByTime(lanes, nil)
	single := mergeByTime([][]RingRecord{nil, {rec(1, 3), rec(1, 2)}}, nil)
	if len(single) != 2 || single[0].Time != 3 || single[1].Time != 2 {
		t.Errorf("one lane: %v", single)
	}
	want := []RingRecord{rec(2, 2), rec(0, 5), rec(0, 1), rec(2, 6), rec(0, 9)}
	if len(got) != len(want) {
		t.Fatalf("merged %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Lane != want[i].Lane || got[i].Time != want[i].Time {
			t.Errorf("record %d: lane %d time %d, want lane %d time %d", i, got[i].Lane, got[i].Time, want[i].Lane, want[i].Time)
		}
	}
}

func TestConsumedRanges(t *testing.T) {
	cases := []struct {
		size, old, new uint64
		want           string
	}{
		{1024, 0, 0, "[]"},
		{1024, 0, 512, "[[0 512]]"},
		{1024, 1000, 1040, "[[1000 1024] [0 16]]"},
		{1024, 2048, 3072, "[[0 1024]]"},
		{1024, 10, 5, "error"},
		{1024, 0, 2000, "error"},
	}
	for _, c := range cases {
		got, err := ConsumedRanges(c.size, c.old, c.new)
		s := "error"
		if err == nil {
			s = fmt.Sprint(got)
		}
		if s != c.want {
			t.Errorf("ConsumedRanges(%d, %d, %d) = %s, want %s", c.size, c.old, c.new, s, c.want)
		}
	}
}

// FuzzParseLane: any lane contents and cursors give records or an error,
// never a panic, and the new tail stays within [tail, head].
func FuzzParseLane(f *testing.F) {
	lane := make([]byte, 1024)
	n := putRecord(lane, 0, 1, true, 0, memBlock(5, []byte("xy")), 1)
	putHeader(lane, n, 32, 2, jit.ErrMemory, jit.RecError, 2)
	putFiller(lane, 1008)
	putCompact(lane, n+32, 3, 7)
	f.Add(lane, uint64(0), n+40)
	f.Add(lane, uint64(1008), uint64(1024+32))
	f.Add([]byte{32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0}, uint64(0), uint64(16))
	f.Add([]byte{}, uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, tail, head uint64) {
		size := uint64(1)
		for size < uint64(len(data)) && size < 1<<16 {
			size <<= 1
		}
		lane := make([]byte, size)
		copy(lane, data)
		recs, newTail, err := ParseLane(lane, tail, head, nil)
		if newTail < tail || (err == nil && newTail > head) {
			t.Fatalf("tail %d -> %d, head %d", tail, newTail, head)
		}
		for _, r := range recs {
			if r.Cursor < tail || r.Cursor >= newTail && err == nil {
				t.Fatalf("record cursor %d outside [%d, %d)", r.Cursor, tail, newTail)
			}
			if r.Flags == jit.RecError && r.ErrCode == 0 {
				t.Fatalf("error record without a code")
			}
			if r.Compact && (r.Flags != 0 || r.TPIndex >= jit.RecCompactSkip || r.Time >= 1<<jit.RecCompactTimeBits) {
				t.Fatalf("compact record %+v", r)
			}
			if err := checkBlocks(r.Blocks); err != nil {
				t.Fatalf("returned malformed blocks: %v", err)
			}
		}
	})
}

func TestMaskHasFPRegs(t *testing.T) {
	cases := []struct {
		mask string
		want bool
	}{
		{"", false},
		{"ff", false},                              // rax..rdi, rbp, rsp
		{"300c0", false},                           // rbp, rsp, rip, eflags
		{"1000000", true},                          // st0 (24)
		{"100000000000000", true},                  // mxcsr (56)
		{"1000000000000000", true},                 // ymm0h (60)
		{"800000000000000", false},                 // 59, gs_base
		{"ffffffffffffffffffffffffffffffff", true}, // $regs
		{"zz", true},                               // malformed: everything
	}
	for _, c := range cases {
		if got := maskHasFPRegs(c.mask); got != c.want {
			t.Errorf("maskHasFPRegs(%q) = %v, want %v", c.mask, got, c.want)
		}
	}
}

// completeCompact gives compact records the lane's owner and their whole
// time stamp: the latest one not after the clock with the record's low
// bits; full records keep theirs.
func TestCompleteCompact(t *testing.T) {
	const mask = 1<<jit.RecCompactTimeBits - 1
	cases := []struct {
		name      string
		now, time uint64 // the clock; the record's whole time stamp
	}{
		{"same high bits", 0x1234_5678_9abc_def0, 0x1234_5678_9abc_de00},
		{"equal", 0x1234_5678_9abc_def0, 0x1234_5678_9abc_def0},
		{"across a wrap of the low bits", 0x0001_0000_0000_0010, 0x0000_ffff_ffff_fff0},
		{"small clock", 100, 7},
	}
	for _, c := range cases {
		recs := []RingRecord{
			{TPIndex: 1, Time: c.time & mask, Compact: true},
			{TPIndex: 2, Time: 55, Thread: 9},
		}
		completeCompact(recs, 0x7f00_1000, c.now)
		if recs[0].Time != c.time || recs[0].Thread != 0x7f00_1000 {
			t.Errorf("%s: time %#x thread %#x, want %#x and the owner", c.name, recs[0].Time, recs[0].Thread, c.time)
		}
		if recs[1].Time != 55 || recs[1].Thread != 9 {
			t.Errorf("%s: a full record changed: %+v", c.name, recs[1])
		}
	}
}
