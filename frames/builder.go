package frames

import "encoding/binary"

// FrameBuilder accumulates the blocks of one frame before Commit. It is not
// safe for concurrent use.
type FrameBuilder struct {
	tpnum       int
	raw         []byte // header (size patched at Commit) + blocks
	regSize     int    // size of the R blocks added, 0 when none
	regMismatch bool
	fallbackPC  uint64
	hasFallback bool
	time        int64
	regsFrom    RegsSource
	spent       bool // committed: Reset makes it usable again
	// growth is how many bytes the frame gains in gdb's layout (its 'r'
	// blocks expanded).
	growth int
}

// NewFrame starts a frame for tracepoint tpnum. Nothing is stored until
// Commit.
func (b *Buffer) NewFrame(tpnum int) *FrameBuilder {
	raw := make([]byte, HeaderSize, max(64, int(b.sizeHint.Load())))
	binary.LittleEndian.PutUint16(raw[0:2], uint16(tpnum))
	return &FrameBuilder{tpnum: tpnum, raw: raw}
}

// Reset makes f a new, empty frame for tracepoint tpnum, reusing its
// memory (Commit copies the frame into the buffer): a caller that builds
// many frames keeps one builder instead of allocating one per frame, and
// then commits without allocating. A zero FrameBuilder is ready to use
// after Reset.
func (f *FrameBuilder) Reset(tpnum int) {
	if cap(f.raw) < HeaderSize {
		f.raw = make([]byte, HeaderSize, 64)
	}
	f.raw = f.raw[:HeaderSize]
	binary.LittleEndian.PutUint16(f.raw[0:2], uint16(tpnum))
	binary.LittleEndian.PutUint32(f.raw[2:6], 0)
	f.tpnum = tpnum
	f.regSize, f.regMismatch = 0, false
	f.fallbackPC, f.hasFallback = 0, false
	f.time = 0
	f.regsFrom = RegsAll
	f.spent = false
	f.growth = 0
}

// TPNum returns the tracepoint number the frame is for.
func (f *FrameBuilder) TPNum() int { return f.tpnum }

// grow extends f.raw by n bytes and returns them (their previous contents
// are garbage: the caller overwrites them all).
func (f *FrameBuilder) grow(n int) []byte {
	l := len(f.raw)
	if cap(f.raw)-l < n {
		f.raw = append(f.raw[:cap(f.raw)], make([]byte, l+n-cap(f.raw))...)
	}
	f.raw = f.raw[:l+n]
	return f.raw[l:]
}

// AddRegisters appends an 'R' block holding a copy of block (the whole
// register file in g-packet layout).
func (f *FrameBuilder) AddRegisters(block []byte) {
	if f.spent {
		return
	}
	if f.regSize != 0 && f.regSize != len(block) {
		f.regMismatch = true
	}
	f.regSize = len(block)
	d := f.grow(1 + len(block))
	d[0] = BlockRegisters
	copy(d[1:], block)
}

// AddMemory appends 'M' blocks holding a copy of data collected at addr,
// split into blocks of at most MaxMemoryBlock bytes. Empty data adds one
// empty block.
func (f *FrameBuilder) AddMemory(addr uint64, data []byte) {
	if f.spent {
		return
	}
	for first := true; first || len(data) > 0; first = false {
		chunk := data
		if len(chunk) > MaxMemoryBlock {
			chunk = chunk[:MaxMemoryBlock]
		}
		d := f.grow(11 + len(chunk))
		d[0] = BlockMemory
		binary.LittleEndian.PutUint64(d[1:9], addr)
		binary.LittleEndian.PutUint16(d[9:11], uint16(len(chunk)))
		copy(d[11:], chunk)
		addr += uint64(len(chunk))
		data = data[len(chunk):]
	}
}

// AddTSV appends a 'V' block recording trace state variable num's value.
func (f *FrameBuilder) AddTSV(num int, v int64) {
	if f.spent {
		return
	}
	d := f.grow(13)
	d[0] = BlockTSV
	binary.LittleEndian.PutUint32(d[1:5], uint32(int32(num)))
	binary.LittleEndian.PutUint64(d[5:13], uint64(v))
}

// AddStatic appends an 'S' block of static tracepoint data (at most
// 65535 bytes are kept).
func (f *FrameBuilder) AddStatic(data []byte) {
	if f.spent {
		return
	}
	data = data[:min(len(data), 0xffff)]
	d := f.grow(StaticBlockHeader + len(data))
	d[0] = BlockStatic
	binary.LittleEndian.PutUint16(d[1:3], uint16(len(data)))
	copy(d[StaticBlockHeader:], data)
}

// SetFallbackPC records the address tfind uses for this frame when it has
// no register block (or its PC is 0): normally the tracepoint's address.
// It is not part of the frame's bytes.
func (f *FrameBuilder) SetFallbackPC(pc uint64) {
	f.fallbackPC = pc
	f.hasFallback = true
}

// SetTime records when the frame was taken, in nanoseconds since the
// Unix epoch (0: unknown). It is not part of the frame's bytes: the
// stub's index keeps it (Frame.Time) and WriteTFile writes it after the
// frames, where gdb does not look.
func (f *FrameBuilder) SetTime(ns int64) { f.time = ns }

// SetRegsFrom says which registers the frame's R block holds (RegsAll
// when not called). It is not part of the frame's bytes.
func (f *FrameBuilder) SetRegsFrom(s RegsSource) { f.regsFrom = s }

// Size returns the frame's size in bytes, header included: what it will
// take from the buffer's budget (plus the end-of-buffer marker).
func (f *FrameBuilder) Size() int { return len(f.raw) }
