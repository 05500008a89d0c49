package frames

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Frames of the collected size: a tracepoint that collects some registers
// (`collect $rdi`: gdb's R action with a mask of a few registers) stores
// only their bytes, in an 'r' block, instead of the whole register block
// of an 'R' block (about 800 bytes on x86-64 with AVX):
//
//	'r' + u16 length + runs, each u16 offset + u16 length + bytes
//
// A run is a byte range of the register block (g-packet layout) with its
// contents; the ranges ascend and do not overlap. Readers of a Frame see a
// whole register block (Registers) whose bytes outside the runs are
// unavailable (RegisterCollected). gdb's layout has no such block: what
// gdb reads (qTBuffer, and so gdb's tsave, and QTSave's tfile) has each
// 'r' block expanded to an 'R' block, zeros outside the runs. Used(),
// the budget and tstatus count the stored (smaller) frames.

// BlockRegisterRuns is the type of an 'r' block.
const BlockRegisterRuns = 'r'

// runHeader is the bytes of a run before its contents.
const runHeader = 4

// AddRegisterRuns appends the byte ranges runs ([start, end), ascending,
// not overlapping, within block) of block, the whole register file in
// g-packet layout, as an 'r' block; with no run, or when the runs
// would take more room than the block, it appends an 'R' block instead.
func (f *FrameBuilder) AddRegisterRuns(block []byte, runs [][2]int) {
	if f.spent {
		return
	}
	if RegisterBlockBytes(len(block), runs) == 1+len(block) {
		f.AddRegisters(block)
		return
	}
	body := 0
	for _, r := range runs {
		body += runHeader + r[1] - r[0]
	}
	if f.regSize != 0 && f.regSize != len(block) {
		f.regMismatch = true
	}
	f.regSize = len(block)
	d := f.grow(3 + body)
	d[0] = BlockRegisterRuns
	binary.LittleEndian.PutUint16(d[1:3], uint16(body))
	d = d[3:]
	for _, r := range runs {
		binary.LittleEndian.PutUint16(d[0:2], uint16(r[0]))
		binary.LittleEndian.PutUint16(d[2:4], uint16(r[1]-r[0]))
		n := copy(d[runHeader:], block[r[0]:r[1]])
		d = d[runHeader+n:]
	}
	f.growth += 1 + len(block) - (3 + body)
}

// RegisterBlockBytes returns the bytes AddRegisterRuns adds to a frame
// for a register block of size bytes and runs: an 'r' block when it is
// smaller than the 'R' block (1+size bytes), which it is otherwise.
func RegisterBlockBytes(size int, runs [][2]int) int {
	body := 0
	for _, r := range runs {
		body += runHeader + r[1] - r[0]
	}
	if len(runs) == 0 || 3+body >= 1+size || body > 0xffff || !validRuns(runs, size) {
		return 1 + size
	}
	return 3 + body
}

// validRuns reports whether runs ascend, do not overlap, are not empty
// and lie within a block of size bytes.
func validRuns(runs [][2]int, size int) bool {
	end := 0
	for _, r := range runs {
		if r[0] < end || r[1] <= r[0] || r[1] > size || r[0] > 0xffff {
			return false
		}
		end = r[1]
	}
	return true
}

// errBadRuns says an 'r' block's runs do not parse.
var errBadRuns = errors.New("malformed register runs")

// eachRun calls fn for each run of an 'r' block's body (after its
// length): its offset and bytes. It fails when the runs do not fill the
// body exactly.
func eachRun(body []byte, fn func(off int, data []byte)) error {
	for len(body) > 0 {
		if len(body) < runHeader {
			return errBadRuns
		}
		off := int(binary.LittleEndian.Uint16(body[0:2]))
		n := int(binary.LittleEndian.Uint16(body[2:4]))
		if len(body) < runHeader+n {
			return errBadRuns
		}
		fn(off, body[runHeader:runHeader+n])
		body = body[runHeader+n:]
	}
	return nil
}

// expandRuns writes an 'r' block's runs (its body after the length) into
// a zeroed register block of size bytes; bytes beyond size are dropped.
func expandRuns(runs []byte, size int) []byte {
	return appendExpandedRuns(nil, runs, size)
}

// appendExpandedRuns appends the size-byte register block runs make
// (zeros outside them) to dst.
func appendExpandedRuns(dst, runs []byte, size int) []byte {
	start := len(dst)
	dst = slices.Grow(dst, size)[:start+size]
	block := dst[start:]
	clear(block)
	_ = eachRun(runs, func(off int, data []byte) {
		if off < size {
			copy(block[off:], data)
		}
	})
	return dst
}

// RegisterCollected reports whether the frame's register block holds
// the size bytes at offset off: with an 'R' block always, with an 'r'
// block when a run covers them; false without a register block.
func (f *Frame) RegisterCollected(off, size int) bool {
	found := false
	_ = f.walk(func(bl block) bool {
		switch bl.kind {
		case BlockRegisters:
			found = true
			return false
		case BlockRegisterRuns:
			_ = eachRun(bl.body[2:], func(o int, data []byte) {
				found = found || off >= o && off+size <= o+len(data)
			})
			return false
		}
		return true
	})
	return found
}

// gdbLayout appends the frame in gdb's layout to dst: its bytes, with
// each 'r' block expanded to an 'R' block of regSize bytes.
func gdbLayout(dst, raw []byte, regSize int) ([]byte, error) {
	if len(raw) < HeaderSize {
		return dst, fmt.Errorf("trace frame shorter than its %d-byte header", HeaderSize)
	}
	start := len(dst)
	dst = append(dst, raw[:HeaderSize]...)
	f := Frame{Raw: raw, RegBlockSize: regSize}
	err := f.walk(func(bl block) bool {
		if bl.kind == BlockRegisterRuns {
			dst = append(dst, BlockRegisters)
			dst = appendExpandedRuns(dst, bl.body[2:], regSize)
			return true
		}
		dst = append(dst, bl.kind)
		dst = append(dst, bl.body...)
		return true
	})
	binary.LittleEndian.PutUint32(dst[start+2:start+HeaderSize], uint32(len(dst)-start-HeaderSize))
	return dst, err
}

// growthOf returns how many bytes the stored frame raw gains in gdb's
// layout (each 'r' block becoming an 'R' block of regSize bytes).
func growthOf(raw []byte, regSize int) int {
	g := 0
	f := Frame{Raw: raw, RegBlockSize: regSize}
	_ = f.walk(func(bl block) bool {
		if bl.kind == BlockRegisterRuns {
			g += 1 + regSize - (1 + len(bl.body))
		}
		return true
	})
	return g
}

// gdbCursor remembers where the last read of the gdb-layout stream
// ended, so that gdb's sequential qTBuffer reads cost the frames they
// return, not a walk from the oldest frame each time.
type gdbCursor struct {
	valid bool
	seq   int64 // a present frame
	off   int   // its offset in the gdb-layout stream
}

// gdbUsedLocked is the length of the present frames in gdb's layout.
func (b *Buffer) gdbUsedLocked() int { return b.used + b.growth }

// readGDBLocked returns up to n bytes at offset of the present frames in
// gdb's layout (the stored bytes when no frame has an 'r' block).
func (b *Buffer) readGDBLocked(offset, n int) []byte {
	if b.runFrames == 0 {
		return b.readRawLocked(offset, n)
	}
	total := b.gdbUsedLocked()
	if offset < 0 || n <= 0 || offset >= total {
		return nil
	}
	n = min(n, total-offset)
	seq, s := b.headSeq, 0
	if c := b.cursor; c.valid && c.seq >= b.headSeq && c.off <= offset {
		seq, s = c.seq, c.off
	}
	out := make([]byte, 0, n)
	var fb []byte
	end := b.headSeq + int64(b.count)
	for ; seq < end && len(out) < n; seq++ {
		fb, _ = gdbLayout(fb[:0], b.view(seq), b.regSize)
		if s+len(fb) > offset+len(out) {
			from := offset + len(out) - s
			out = append(out, fb[from:min(len(fb), from+n-len(out))]...)
			if s+len(fb) > offset+len(out) {
				break // the next read goes on in this frame
			}
		}
		s += len(fb)
	}
	b.cursor = gdbCursor{valid: seq < end, seq: seq, off: s}
	return out
}
