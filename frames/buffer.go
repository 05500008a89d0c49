package frames

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
)

// DefaultSize is the byte budget of a new buffer and the size that
// "QTBuffer:size:-1" restores: gdbserver's DEFAULT_TRACE_BUFFER_SIZE (5 MiB).
const DefaultSize = 5 * 1024 * 1024

// MaxSize is the largest budget SetSize accepts. The budget is not
// allocated up front, so this only bounds nonsense requests.
const MaxSize = 1 << 40

// HeaderSize is the size of a frame header: u16 tpnum + u32 data size.
const HeaderSize = 6

// EOBMarkerSize is the space gdbserver keeps free after the last frame for
// its end-of-buffer marker (a zeroed frame header).
const EOBMarkerSize = HeaderSize

// MaxMemoryBlock is the largest number of bytes one 'M' block can hold (its
// length field is a u16). AddMemory splits longer ranges.
const MaxMemoryBlock = 0xffff

// Errors returned by Commit, SetSize and ReadTraceData. Test with errors.Is.
var (
	// ErrFull: the frame does not fit (linear buffer full, or the frame is
	// larger than the whole buffer). The frame was not stored.
	ErrFull = errors.New("trace buffer full")
	// ErrBadTracepoint: the tracepoint number cannot be stored in a frame
	// header (it must be 1..65535; 0 marks the end of the buffer).
	ErrBadTracepoint = errors.New("tracepoint number out of range")
	// ErrRegBlockSize: a register block's size differs from the size of the
	// register blocks already in the buffer.
	ErrRegBlockSize = errors.New("register block size mismatch")
	// ErrCommitted: the FrameBuilder was already committed.
	ErrCommitted = errors.New("frame already committed")
	// ErrBadSize: SetSize got a negative or absurd size.
	ErrBadSize = errors.New("bad trace buffer size")
	// ErrBadOffset: ReadTraceData got an offset beyond the trace data.
	ErrBadOffset = errors.New("offset beyond trace data")
)

// Stats is a consistent snapshot of a buffer's counters, for qTStatus.
type Stats struct {
	Size     int  // byte budget (tsize)
	Used     int  // frame bytes stored
	Free     int  // Size-Used (tfree)
	Count    int  // frames present (tframes)
	Created  int  // frames created since Clear (tcreated)
	Circular bool // circular mode (circular)
}

// record is one stored frame plus what the indexes need about it. It
// holds no pointer (the bytes are in the buffer's slabs: Buffer.raw), so
// a buffer of a million frames costs the garbage collector nothing.
type record struct {
	slab        int64  // the slab holding the bytes (absolute index, see Buffer.slabBase)
	off, n      int32  // the bytes: slab[off:off+n]
	start       int64  // absolute byte offset of the frame since Clear
	fallbackPC  uint64 // from FrameBuilder.SetFallbackPC
	tpnum       uint16
	hasFallback bool
}

// Buffer is the trace buffer: a byte budget holding frames oldest first.
// It is safe for concurrent use (one mutex guards everything).
type Buffer struct {
	mu       sync.Mutex
	size     int
	circular bool

	frames  []record // frames[head:] are present, oldest first
	head    int
	headSeq int64 // sequence number (0-based since Clear) of frames[head]
	used    int
	end     int64 // absolute offset just past the last committed frame
	created int
	regSize int // size of R blocks in the buffer; 0 until the first one
	// slabs hold the frames' bytes, oldest first; slabs[0] has absolute
	// index slabBase (older ones were freed when their frames went).
	slabs    [][]byte
	slabBase int64

	// byTP maps a tracepoint number to the sequence numbers of its frames,
	// ascending. Entries below headSeq are stale (dropped frames).
	byTP map[uint16][]int64
	// Address index, built lazily for one PC offset. addrs and addrKnown
	// run parallel to frames (dense, so FindRange scans fast).
	addrValid    bool
	addrPCOffset int
	addrs        []uint64
	addrKnown    []bool
	byPC         map[uint64][]int64
	// sizeHint is the size of the last committed frame: the capacity
	// NewFrame preallocates (read without the lock).
	sizeHint atomic.Int64
	// stale counts address index entries referring to dropped frames;
	// when it exceeds twice the number of present frames the maps are
	// rebuilt. (byTP drops its entries as the frames go.)
	stale int
}

// NewBuffer returns an empty linear buffer with a budget of size bytes
// (DefaultSize when size is negative).
func NewBuffer(size int) *Buffer {
	if size < 0 {
		size = DefaultSize
	}
	if size > MaxSize {
		size = MaxSize
	}
	b := &Buffer{size: size}
	b.clearLocked()
	return b
}

// SetSize sets the byte budget and clears the buffer, as gdbserver's
// QTBuffer:size does. n == -1 restores DefaultSize.
func (b *Buffer) SetSize(n int) error {
	if n == -1 {
		n = DefaultSize
	}
	if n < 0 || n > MaxSize {
		return fmt.Errorf("set trace buffer size to %d: %w", n, ErrBadSize)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.size = n
	b.clearLocked()
	return nil
}

// SetCircular selects circular (drop oldest frames when full) or linear
// (refuse new frames when full) behaviour. Stored frames are kept.
func (b *Buffer) SetCircular(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.circular = on
}

// Clear discards every frame and resets Created (QTinit / QTStart).
func (b *Buffer) Clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.clearLocked()
}

func (b *Buffer) clearLocked() {
	b.frames = nil
	b.slabs = nil
	b.slabBase = 0
	b.head = 0
	b.headSeq = 0
	b.used = 0
	b.end = 0
	b.created = 0
	b.regSize = 0
	b.byTP = make(map[uint16][]int64)
	b.addrValid = false
	b.addrs = nil
	b.addrKnown = nil
	b.byPC = nil
	b.stale = 0
}

// Size returns the byte budget.
func (b *Buffer) Size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size
}

// Used returns the number of frame bytes stored: the length of the byte
// stream ReadRaw serves.
func (b *Buffer) Used() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Free returns Size()-Used() (gdbserver's tfree), never negative.
func (b *Buffer) Free() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used > b.size {
		return 0
	}
	return b.size - b.used
}

// Stats returns all counters at once, consistent with each other.
func (b *Buffer) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{
		Size:     b.size,
		Used:     b.used,
		Free:     max(0, b.size-b.used),
		Count:    len(b.frames) - b.head,
		Created:  b.created,
		Circular: b.circular,
	}
}

// Circular reports whether the buffer is circular.
func (b *Buffer) Circular() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.circular
}

// Count returns the number of frames present (tframes).
func (b *Buffer) Count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.frames) - b.head
}

// Created returns the number of frames committed since the last Clear,
// including any dropped from a circular buffer (tcreated).
func (b *Buffer) Created() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.created
}

// RegBlockSize returns the size of the register blocks stored in the
// buffer, or 0 when none has been stored since Clear.
func (b *Buffer) RegBlockSize() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.regSize
}

// Commit stores the frame f. A linear buffer returns ErrFull when the frame
// does not fit, storing nothing; a circular buffer drops its oldest frames
// until it fits. A frame larger than the whole buffer is refused with
// ErrFull in both modes and nothing is dropped. Commit copies the frame's
// bytes into the buffer's slabs; after a successful Commit the builder is
// spent: it must not be committed again before a Reset.
func (b *Buffer) Commit(f *FrameBuilder) error {
	if f == nil || f.raw == nil || f.spent {
		return fmt.Errorf("commit trace frame: %w", ErrCommitted)
	}
	if f.tpnum <= 0 || f.tpnum > 0xffff {
		return fmt.Errorf("commit trace frame for tracepoint %d: %w", f.tpnum, ErrBadTracepoint)
	}
	dataSize := len(f.raw) - HeaderSize
	if uint64(dataSize) > 0xffffffff || len(f.raw) > 1<<31-1 {
		return fmt.Errorf("commit trace frame of %d bytes: %w", len(f.raw), ErrFull)
	}
	if f.regMismatch {
		return fmt.Errorf("commit trace frame with register blocks of different sizes: %w", ErrRegBlockSize)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if f.regSize > 0 && b.regSize > 0 && f.regSize != b.regSize {
		return fmt.Errorf("commit trace frame with %d-byte register block (buffer has %d-byte blocks): %w",
			f.regSize, b.regSize, ErrRegBlockSize)
	}
	need := len(f.raw) + EOBMarkerSize
	if need > b.size {
		return fmt.Errorf("commit %d-byte trace frame into %d-byte buffer: %w", len(f.raw), b.size, ErrFull)
	}
	if b.used+need > b.size {
		if !b.circular {
			return fmt.Errorf("commit %d-byte trace frame with %d of %d bytes used: %w",
				len(f.raw), b.used, b.size, ErrFull)
		}
		for b.used+need > b.size && b.head < len(b.frames) {
			b.dropOldestLocked()
		}
	}
	binary.LittleEndian.PutUint32(f.raw[2:6], uint32(dataSize))
	if f.regSize > 0 {
		b.regSize = f.regSize
	}
	slab, off := b.store(f.raw)
	rec := record{
		slab:        slab,
		off:         off,
		n:           int32(len(f.raw)),
		start:       b.end,
		tpnum:       uint16(f.tpnum),
		fallbackPC:  f.fallbackPC,
		hasFallback: f.hasFallback,
	}
	f.spent = true
	seq := b.headSeq + int64(len(b.frames)-b.head)
	if b.addrValid {
		addr, ok := b.frameAddr(&rec)
		if ok {
			b.byPC[addr] = append(b.byPC[addr], seq)
		}
		b.addrs = append(b.addrs, addr)
		b.addrKnown = append(b.addrKnown, ok)
	}
	b.byTP[rec.tpnum] = append(b.byTP[rec.tpnum], seq)
	b.sizeHint.Store(int64(min(int(rec.n), 1<<20)))
	b.frames = append(b.frames, rec)
	b.end += int64(rec.n)
	b.used += int(rec.n)
	b.created++
	return nil
}

// slabSize is the size of the slabs frame bytes are copied into: frames
// share a few large allocations (cheap for the garbage collector) instead
// of one each. A slab is freed once no present frame (or Frame view
// handed out) uses it.
const slabSize = 1 << 20

// store copies a frame's bytes into the current slab and returns where.
// Stored bytes never change (Frame views stay valid).
func (b *Buffer) store(raw []byte) (slab int64, off int32) {
	n := len(raw)
	last := len(b.slabs) - 1
	if last < 0 || cap(b.slabs[last])-len(b.slabs[last]) < n {
		b.slabs = append(b.slabs, make([]byte, 0, max(slabSize, n)))
		last++
	}
	off = int32(len(b.slabs[last]))
	b.slabs[last] = append(b.slabs[last], raw...)
	return b.slabBase + int64(last), off
}

// raw returns the bytes of a stored frame.
func (b *Buffer) raw(rec *record) []byte {
	s := b.slabs[rec.slab-b.slabBase]
	return s[rec.off : rec.off+rec.n : rec.off+rec.n]
}

// freeSlabsLocked lets go of the slabs older than the oldest present
// frame's.
func (b *Buffer) freeSlabsLocked() {
	keep := b.slabBase + int64(len(b.slabs)) - 1 // the current slab stays
	if b.head < len(b.frames) {
		keep = b.frames[b.head].slab
	}
	if drop := keep - b.slabBase; drop > 0 {
		clear(b.slabs[:drop])
		b.slabs = b.slabs[drop:]
		b.slabBase = keep
	}
}

// dropOldestLocked discards the oldest present frame.
func (b *Buffer) dropOldestLocked() {
	old := &b.frames[b.head]
	b.used -= int(old.n)
	// Its sequence number is the first of its tracepoint's list.
	if l := b.byTP[old.tpnum]; len(l) > 0 && l[0] == b.headSeq {
		b.byTP[old.tpnum] = l[1:]
	}
	if b.addrValid && b.addrKnown[b.head] {
		b.stale++
	}
	b.head++
	b.headSeq++
	present := len(b.frames) - b.head
	if b.head >= 1024 && b.head > present {
		// Move the present frames down in place: each frame moves about
		// once, and the slices keep their capacity.
		b.frames = shiftDown(b.frames, b.head)
		if b.addrValid {
			b.addrs = shiftDown(b.addrs, b.head)
			b.addrKnown = shiftDown(b.addrKnown, b.head)
		}
		b.head = 0
	}
	if b.stale > 2*present+1024 {
		b.rebuildIndexLocked()
	}
	b.freeSlabsLocked()
}

// rebuildIndexLocked rebuilds the sequence-number maps from the present
// frames, forgetting dropped ones.
func (b *Buffer) rebuildIndexLocked() {
	b.byTP = make(map[uint16][]int64)
	if b.addrValid {
		b.byPC = make(map[uint64][]int64)
	}
	for i := b.head; i < len(b.frames); i++ {
		rec := &b.frames[i]
		seq := b.headSeq + int64(i-b.head)
		b.byTP[rec.tpnum] = append(b.byTP[rec.tpnum], seq)
		if b.addrValid && b.addrKnown[i] {
			b.byPC[b.addrs[i]] = append(b.byPC[b.addrs[i]], seq)
		}
	}
	b.stale = 0
}

// shiftDown moves s[head:] to the start of s and returns it, same capacity.
func shiftDown[T any](s []T, head int) []T {
	n := copy(s, s[head:])
	return s[:n]
}

// frameAddr returns rec's tfind address for b.addrPCOffset.
func (b *Buffer) frameAddr(rec *record) (uint64, bool) {
	f := Frame{Raw: b.raw(rec), RegBlockSize: b.regSize, fallbackPC: rec.fallbackPC, hasFallback: rec.hasFallback}
	return f.PC(b.addrPCOffset)
}

// ensureAddrIndexLocked makes the address index valid for pcOffset.
func (b *Buffer) ensureAddrIndexLocked(pcOffset int) {
	if b.addrValid && b.addrPCOffset == pcOffset {
		return
	}
	b.addrValid = true
	b.addrPCOffset = pcOffset
	b.byPC = make(map[uint64][]int64)
	b.addrs = make([]uint64, len(b.frames), cap(b.frames))
	b.addrKnown = make([]bool, len(b.frames), cap(b.frames))
	for i := b.head; i < len(b.frames); i++ {
		addr, ok := b.frameAddr(&b.frames[i])
		b.addrs[i], b.addrKnown[i] = addr, ok
		if ok {
			seq := b.headSeq + int64(i-b.head)
			b.byPC[addr] = append(b.byPC[addr], seq)
		}
	}
}

// frameLocked builds the Frame view of the frame with number num.
func (b *Buffer) frameLocked(num int) (*Frame, bool) {
	if num < 0 || num >= len(b.frames)-b.head {
		return nil, false
	}
	rec := &b.frames[b.head+num]
	return &Frame{
		Num:          num,
		TPNum:        int(rec.tpnum),
		Raw:          b.raw(rec),
		RegBlockSize: b.regSize,
		fallbackPC:   rec.fallbackPC,
		hasFallback:  rec.hasFallback,
	}, true
}

// Frame returns the frame with number num (0 = oldest present).
func (b *Buffer) Frame(num int) (*Frame, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.frameLocked(num)
}

// firstSeqAfter returns the first sequence number in the ascending list
// seqs that belongs to a present frame numbered above after.
func (b *Buffer) firstSeqAfter(seqs []int64, after int) (int, bool) {
	if after < -1 {
		after = -1
	}
	min := b.headSeq + int64(after) + 1
	i := sort.Search(len(seqs), func(i int) bool { return seqs[i] >= min })
	if i == len(seqs) {
		return 0, false
	}
	num := seqs[i] - b.headSeq
	if num >= int64(len(b.frames)-b.head) {
		return 0, false
	}
	return int(num), true
}

// FindPC returns the first frame numbered above after whose address (see
// the package doc) equals pc: QTFrame:pc.
func (b *Buffer) FindPC(after int, pc uint64, pcOffset int) (*Frame, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ensureAddrIndexLocked(pcOffset)
	num, ok := b.firstSeqAfter(b.byPC[pc], after)
	if !ok {
		return nil, false
	}
	return b.frameLocked(num)
}

// FindTracepoint returns the first frame numbered above after that
// tracepoint tp collected: QTFrame:tdp.
func (b *Buffer) FindTracepoint(after int, tp int) (*Frame, bool) {
	if tp <= 0 || tp > 0xffff {
		return nil, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	num, ok := b.firstSeqAfter(b.byTP[uint16(tp)], after)
	if !ok {
		return nil, false
	}
	return b.frameLocked(num)
}

// FindRange returns the first frame numbered above after whose address is
// inside [lo, hi] (inside true: QTFrame:range) or outside it (inside false:
// QTFrame:outside). Frames without an address never match.
func (b *Buffer) FindRange(after int, lo, hi uint64, inside bool, pcOffset int) (*Frame, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ensureAddrIndexLocked(pcOffset)
	if after < -1 {
		after = -1
	}
	addrs, known := b.addrs, b.addrKnown
	for i := b.head + after + 1; i < len(addrs); i++ {
		a := addrs[i]
		if (lo <= a && a <= hi) == inside && known[i] {
			return b.frameLocked(i - b.head)
		}
	}
	return nil, false
}

// ReadRaw returns up to n bytes at offset in the concatenation of the
// present frames, oldest first (qTBuffer:offset,len). It returns nil when
// offset is negative, n <= 0 or offset >= Used(); the caller answers "l"
// when offset == Used() and an error when offset > Used().
func (b *Buffer) ReadRaw(offset, n int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.readRawLocked(offset, n)
}

// ReadTraceData is ReadRaw with qTBuffer's end handling decided under the
// same lock: it returns io.EOF when offset == Used() (reply "l"),
// ErrBadOffset when offset < 0 or offset > Used() (reply "E01"), and
// otherwise between 1 and n bytes (n must be positive).
func (b *Buffer) ReadTraceData(offset, n int) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case offset == b.used:
		return nil, io.EOF
	case offset < 0 || offset > b.used:
		return nil, fmt.Errorf("read trace data at %d of %d bytes: %w", offset, b.used, ErrBadOffset)
	case n <= 0:
		return nil, fmt.Errorf("read %d bytes of trace data: bad length", n)
	}
	return b.readRawLocked(offset, n), nil
}

func (b *Buffer) readRawLocked(offset, n int) []byte {
	if offset < 0 || n <= 0 || offset >= b.used {
		return nil
	}
	if n > b.used-offset {
		n = b.used - offset
	}
	present := b.frames[b.head:]
	base := present[0].start
	abs := base + int64(offset)
	i := sort.Search(len(present), func(i int) bool {
		return present[i].start+int64(present[i].n) > abs
	})
	out := make([]byte, 0, n)
	for ; i < len(present) && len(out) < n; i++ {
		rec := &present[i]
		from := int(abs - rec.start)
		if from < 0 {
			from = 0
		}
		chunk := b.raw(rec)[from:]
		if rem := n - len(out); len(chunk) > rem {
			chunk = chunk[:rem]
		}
		out = append(out, chunk...)
	}
	return out
}

// Frames calls fn for every present frame, oldest first, until fn returns
// false. fn runs with the buffer locked: it must not call the Buffer.
func (b *Buffer) Frames(fn func(f *Frame) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 0; i < len(b.frames)-b.head; i++ {
		f, _ := b.frameLocked(i)
		if !fn(f) {
			return
		}
	}
}

// rawFrames returns the bytes of every present frame, oldest first.
func (b *Buffer) rawFrames() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([][]byte, 0, len(b.frames)-b.head)
	for i := b.head; i < len(b.frames); i++ {
		out = append(out, b.raw(&b.frames[i]))
	}
	return out
}
