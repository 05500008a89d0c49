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

// record is one stored frame: where its bytes are, what the indexes
// need about it and when it was taken, in 24 bytes. It holds no pointer,
// so a buffer of a million frames costs the garbage collector nothing. A frame's size is
// not stored: present frames are contiguous in the arena, so it is the
// distance to the next frame (see Buffer.recSize).
type record struct {
	// bits 0-39: offset of the frame in the arena (< MaxSize);
	// bits 40-55: tracepoint number; bit 56: fallbackPC is set;
	// bits 57-58: the RegsSource; bit 59: the frame has an 'r' block.
	word       uint64
	fallbackPC uint64 // from FrameBuilder.SetFallbackPC
	time       int64  // from FrameBuilder.SetTime (0: unknown)
}

const (
	recPosBits   = 40
	recPosMask   = 1<<recPosBits - 1
	recTPShift   = recPosBits
	recHasFBFlag = 1 << 56
	recRegsShift = 57
	// recRunsFlag: the frame has an 'r' block (it grows in gdb's layout).
	recRunsFlag = 1 << 59
)

func (r *record) pos() int             { return int(r.word & recPosMask) }
func (r *record) tpnum() uint16        { return uint16(r.word >> recTPShift) }
func (r *record) hasFallback() bool    { return r.word&recHasFBFlag != 0 }
func (r *record) regsFrom() RegsSource { return RegsSource(r.word >> recRegsShift & 3) }

// MaxSize must fit a record's offset field.
var _ [recPosMask + 1 - MaxSize]struct{}

// Buffer is the trace buffer: a byte budget holding frames oldest first.
// It is safe for concurrent use (one mutex guards everything).
//
// The frames' bytes live in one byte ring of the budget's size (the
// arena), gdbserver style: each frame follows the previous one, and a
// frame crossing the end of the budget continues at offset 0. Present
// frames are therefore contiguous, oldest first, up to wpos. The ring's
// storage is 1 MiB pieces made as frames arrive, mostly ahead of them in
// the background (byteRing, growAheadLocked; a 1 TiB budget is not
// allocated up front), and kept across Clear. Frame records are indexed
// by sequence number (recRing) and the lookup indexes are caught up by
// the searches, so Commit is a few checks, a copy and a 24-byte record
// store, allocating only a chunk of records now and then.
type Buffer struct {
	mu       sync.Mutex
	size     int
	circular bool

	ring byteRing // frame bytes
	// reserving: a Reserve is making memory ready (without mu held);
	// another returns at once.
	reserving bool
	wpos      int // where the next frame's bytes go (bytes since Clear, modulo size)
	// recs holds the present frames' records by sequence number
	// (0-based since Clear). Present are headSeq .. headSeq+count-1.
	recs    recRing
	headSeq int64
	count   int
	used    int
	created int
	regSize int // size of R blocks in the buffer; 0 until the first one
	// runFrames counts the present frames with an 'r' block and growth
	// what they gain in gdb's layout; cursor speeds up reading it.
	runFrames, growth int
	cursor            gdbCursor

	// byTP maps a tracepoint number to the sequence numbers of its
	// frames, ascending, for the frames before tpNext (the searches catch
	// up). Entries below headSeq are stale (dropped frames); tpEntries
	// counts all entries, so that the map is rebuilt once most are stale.
	byTP      map[uint16][]int64
	tpNext    int64
	tpEntries int
	// Address index for one PC offset, also caught up by the searches:
	// addrs[i] and addrKnown[i] belong to the frame with sequence number
	// addrSeq0+i (dense, so FindRange scans fast); byPC is to addresses
	// what byTP is to tracepoints.
	addrValid    bool
	addrPCOffset int
	addrSeq0     int64
	addrs        []uint64
	addrKnown    []bool
	byPC         map[uint64][]int64
	pcEntries    int
	scratch      []byte // a frame crossing pieces of the ring, made contiguous
	// sizeHint is the size of the last committed frame: the capacity
	// NewFrame preallocates (read without the lock).
	sizeHint atomic.Int64
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
	b := &Buffer{size: size, ring: byteRing{size: size}}
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
	// Keep the memory of the last run that the new budget can use.
	b.ring.resize(n)
	b.clearLocked()
	return nil
}

// Reserve gives storage to the first min(n, Size()) bytes of the ring
// and touches its pages, so that committing that much later allocates
// nothing and takes no page fault: a run's first frames would otherwise
// pay for fresh memory (2-3 µs per 4 KiB page on a virtual machine)
// while the program produces them. Stored frames are kept. The memory is
// made ready without the buffer's lock (15-20 ms for gdb's default 5 MB
// here), so a caller may run it beside what it prepares. A Reserve
// called while another is at work returns at once.
func (b *Buffer) Reserve(n int) {
	b.mu.Lock()
	n = min(n, b.size)
	if n <= b.ring.allocated() || b.reserving {
		b.mu.Unlock()
		return
	}
	b.reserving = true
	b.mu.Unlock()
	b.grow(n)
}

// grow is Reserve's work once it has set reserving: the ring's missing
// pieces up to offset n, made without the lock, then attached.
func (b *Buffer) grow(n int) {
	b.mu.Lock()
	size, from := b.ring.size, len(b.ring.chunks)
	b.mu.Unlock()
	var pieces [][]byte
	for i := from; i*ringChunk < min(n, size); i++ {
		pieces = append(pieces, newChunk(size, i))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserving = false
	b.ring.attach(from, pieces)
}

// growAhead is how far beyond the ring's storage growAheadLocked has the
// next pieces made, once the writer is within half of it.
const growAhead = 4 * ringChunk

// growAheadLocked has the ring's next pieces made in the background
// (grow) as the writer nears the end of its storage, so that commits do
// not allocate and touch fresh memory under the lock. A writer faster
// than memory can be made ready (about 350 MB/s on the virtual machines
// measured) catches up and allocates a piece itself: a 1 MiB piece
// holds the lock for a few ms at most.
func (b *Buffer) growAheadLocked() {
	have := b.ring.allocated()
	if have < b.size && !b.reserving && b.wpos+growAhead/2 >= have {
		b.reserving = true
		go b.grow(have + growAhead)
	}
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

// clearLocked forgets every frame. The ring's pieces and the record chunks are kept
// for the next run.
func (b *Buffer) clearLocked() {
	b.recs.reset(b.size / HeaderSize)
	b.wpos = 0
	b.headSeq = 0
	b.count = 0
	b.used = 0
	b.created = 0
	b.regSize = 0
	b.byTP = nil
	b.tpNext = 0
	b.tpEntries = 0
	b.addrValid = false
	b.addrs = b.addrs[:0]
	b.addrKnown = b.addrKnown[:0]
	b.byPC = nil
	b.pcEntries = 0
	b.runFrames, b.growth = 0, 0
	b.cursor = gdbCursor{}
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
		Count:    b.count,
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
	return b.count
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
// bytes into the buffer and allocates nothing in steady state; after a
// successful Commit the builder is spent: it must not be committed again
// before a Reset (which reuses its memory).
func (b *Buffer) Commit(f *FrameBuilder) error {
	if err := checkCommit(f); err != nil {
		return err
	}
	b.mu.Lock()
	err := b.commitLocked(f)
	b.mu.Unlock()
	return err
}

// checkCommit checks what a commit needs of f alone.
func checkCommit(f *FrameBuilder) error {
	if f == nil || f.raw == nil || f.spent {
		return fmt.Errorf("commit trace frame: %w", ErrCommitted)
	}
	if f.tpnum <= 0 || f.tpnum > 0xffff {
		return fmt.Errorf("commit trace frame for tracepoint %d: %w", f.tpnum, ErrBadTracepoint)
	}
	n := len(f.raw)
	if n > 1<<31-1 {
		return fmt.Errorf("commit trace frame of %d bytes: %w", n, ErrFull)
	}
	if f.regMismatch {
		return fmt.Errorf("commit trace frame with register blocks of different sizes: %w", ErrRegBlockSize)
	}
	return nil
}

// commitLocked is Commit after the checks that need no lock.
func (b *Buffer) commitLocked(f *FrameBuilder) error {
	n := len(f.raw)
	if f.regSize > 0 && b.regSize > 0 && f.regSize != b.regSize {
		return fmt.Errorf("commit trace frame with %d-byte register block (buffer has %d-byte blocks): %w",
			f.regSize, b.regSize, ErrRegBlockSize)
	}
	need := n + EOBMarkerSize
	if b.used+need > b.size {
		if err := b.makeRoomLocked(n); err != nil {
			return err
		}
	}
	binary.LittleEndian.PutUint32(f.raw[2:6], uint32(n-HeaderSize))
	if f.regSize > 0 {
		b.regSize = f.regSize
	}
	pos := b.wpos
	b.writeLocked(f.raw)
	word := uint64(pos) | uint64(f.tpnum)<<recTPShift | uint64(f.regsFrom&3)<<recRegsShift
	if f.hasFallback {
		word |= recHasFBFlag
	}
	if f.growth > 0 {
		word |= recRunsFlag
		b.runFrames++
		b.growth += f.growth
	}
	*b.recs.add(b.headSeq + int64(b.count)) = record{word: word, fallbackPC: f.fallbackPC, time: f.time}
	b.count++
	b.used += n
	b.created++
	f.spent = true
	if hint := int64(min(n, 1<<20)); b.sizeHint.Load() != hint {
		b.sizeHint.Store(hint)
	}
	return nil
}

// A Batch commits frames under one acquisition of the buffer's lock,
// for a writer with many frames at once (the fast tracepoints' drainer):
// it saves a lock and an unlock per frame. Until End, the holder must
// call no other method of the buffer (they would wait for the lock it
// holds), and other callers wait.
type Batch struct{ b *Buffer }

// BeginBatch takes the buffer's lock for a batch of commits.
func (b *Buffer) BeginBatch() Batch {
	b.mu.Lock()
	return Batch{b}
}

// Commit is Buffer.Commit within the batch.
func (w Batch) Commit(f *FrameBuilder) error {
	if err := checkCommit(f); err != nil {
		return err
	}
	return w.b.commitLocked(f)
}

// CommitHeader commits a frame of tracepoint tpnum that holds no block
// (a hit that collects nothing), with fallbackPC as its tfind address and
// taken at time (SetTime): the same frame as a FrameBuilder with only
// SetFallbackPC and SetTime would commit, without building it. It returns
// the frame's size.
func (w Batch) CommitHeader(tpnum int, fallbackPC uint64, time int64) (int, error) {
	b := w.b
	if tpnum <= 0 || tpnum > 0xffff {
		return 0, fmt.Errorf("commit trace frame for tracepoint %d: %w", tpnum, ErrBadTracepoint)
	}
	if b.used+HeaderSize+EOBMarkerSize > b.size {
		if err := b.makeRoomLocked(HeaderSize); err != nil {
			return 0, err
		}
	}
	var hdr [HeaderSize]byte
	binary.LittleEndian.PutUint16(hdr[0:2], uint16(tpnum))
	pos := b.wpos
	b.writeLocked(hdr[:])
	*b.recs.add(b.headSeq + int64(b.count)) = record{
		word: uint64(pos) | uint64(tpnum)<<recTPShift | recHasFBFlag, fallbackPC: fallbackPC, time: time}
	b.count++
	b.used += HeaderSize
	b.created++
	if b.sizeHint.Load() != HeaderSize {
		b.sizeHint.Store(HeaderSize)
	}
	return HeaderSize, nil
}

// End releases the buffer's lock.
func (w Batch) End() { w.b.mu.Unlock() }

// makeRoomLocked makes an n-byte frame fit, dropping the oldest frames of
// a circular buffer, or says why it cannot.
func (b *Buffer) makeRoomLocked(n int) error {
	need := n + EOBMarkerSize
	if need > b.size {
		return fmt.Errorf("commit %d-byte trace frame into %d-byte buffer: %w", n, b.size, ErrFull)
	}
	if !b.circular {
		return fmt.Errorf("commit %d-byte trace frame with %d of %d bytes used: %w",
			n, b.used, b.size, ErrFull)
	}
	b.cursor.valid = false // the stream's offsets move down
	for b.used+need > b.size && b.count > 0 {
		if b.rec(b.headSeq).word&recRunsFlag != 0 {
			b.runFrames--
			b.growth -= growthOf(b.view(b.headSeq), b.regSize)
		}
		b.used -= b.recSize(b.headSeq)
		b.headSeq++
		b.count--
	}
	b.recs.dropBelow(b.headSeq)
	return nil
}

// writeLocked copies a frame's bytes to the ring at wpos, then has the
// next pieces made if the writer nears the end of the ring's storage
// (growAheadLocked). The caller made room: they overwrite no present
// frame.
func (b *Buffer) writeLocked(p []byte) {
	if end := b.wpos + len(p); end > b.ring.allocated() {
		b.ring.ensure(end) // growAheadLocked has usually made the piece already
	}
	b.wpos = b.ring.write(b.wpos, p)
	b.growAheadLocked()
}

// rec returns the record of the present frame with sequence number seq.
func (b *Buffer) rec(seq int64) *record {
	return b.recs.at(seq)
}

// recSize returns the size of the present frame with sequence number
// seq: the distance to the next frame's bytes (or to wpos for the last),
// modulo the budget. It is never 0 or the whole budget: a frame has at
// least HeaderSize bytes and leaves room for the end-of-buffer marker.
func (b *Buffer) recSize(seq int64) int {
	next := b.wpos
	if seq+1 < b.headSeq+int64(b.count) {
		next = b.rec(seq + 1).pos()
	}
	d := next - b.rec(seq).pos()
	if d <= 0 {
		d += b.size
	}
	return d
}

// appendBytes appends the n stored bytes at ring offset p (they wrap at
// the end of the ring) to dst.
func (b *Buffer) appendBytes(dst []byte, p, n int) []byte {
	return b.ring.appendTo(dst, p, n)
}

// view returns the bytes of the present frame with sequence number seq,
// valid until the next change to the buffer: a slice of the ring, or a
// copy in b.scratch when the frame crosses pieces of it (or its end).
func (b *Buffer) view(seq int64) []byte {
	p, n := b.rec(seq).pos(), b.recSize(seq)
	if v, ok := b.ring.slice(p, n); ok {
		return v
	}
	b.scratch = b.appendBytes(b.scratch[:0], p, n)
	return b.scratch
}

// frameAddr returns the tfind address of the present frame with sequence
// number seq, for b.addrPCOffset.
func (b *Buffer) frameAddr(seq int64) (uint64, bool) {
	rec := b.rec(seq)
	f := Frame{Raw: b.view(seq), RegBlockSize: b.regSize, fallbackPC: rec.fallbackPC, hasFallback: rec.hasFallback()}
	return f.PC(b.addrPCOffset)
}

// tpIndexLocked brings byTP up to date with the present frames.
func (b *Buffer) tpIndexLocked() {
	if b.byTP == nil || b.tpEntries > 2*b.count+1024 {
		// New, or mostly stale: start again from the present frames.
		b.byTP = make(map[uint16][]int64)
		b.tpEntries = 0
		b.tpNext = b.headSeq
	}
	b.tpNext = max(b.tpNext, b.headSeq)
	endSeq := b.headSeq + int64(b.count)
	for s := b.tpNext; s < endSeq; s++ {
		tp := b.rec(s).tpnum()
		b.byTP[tp] = append(b.byTP[tp], s)
	}
	b.tpEntries += int(endSeq - b.tpNext)
	b.tpNext = endSeq
}

// addrIndexLocked brings the address index up to date with the present
// frames, for pcOffset.
func (b *Buffer) addrIndexLocked(pcOffset int) {
	if !b.addrValid || b.addrPCOffset != pcOffset || b.addrSeq0+int64(len(b.addrs)) < b.headSeq {
		b.addrValid = true
		b.addrPCOffset = pcOffset
		b.addrSeq0 = b.headSeq
		b.addrs = b.addrs[:0]
		b.addrKnown = b.addrKnown[:0]
		b.byPC = make(map[uint64][]int64)
		b.pcEntries = 0
	}
	// Forget dropped frames once they are half the dense arrays (each
	// entry moves about once).
	if d := int(b.headSeq - b.addrSeq0); d > 0 && d >= len(b.addrs)/2 {
		b.addrs = shiftDown(b.addrs, d)
		b.addrKnown = shiftDown(b.addrKnown, d)
		b.addrSeq0 = b.headSeq
	}
	if b.pcEntries > 2*b.count+1024 {
		// Mostly stale: rebuild the map from the dense arrays.
		b.byPC = make(map[uint64][]int64)
		b.pcEntries = 0
		for i := int(b.headSeq - b.addrSeq0); i < len(b.addrs); i++ {
			if b.addrKnown[i] {
				b.byPC[b.addrs[i]] = append(b.byPC[b.addrs[i]], b.addrSeq0+int64(i))
				b.pcEntries++
			}
		}
	}
	endSeq := b.headSeq + int64(b.count)
	for s := b.addrSeq0 + int64(len(b.addrs)); s < endSeq; s++ {
		addr, ok := b.frameAddr(s)
		b.addrs = append(b.addrs, addr)
		b.addrKnown = append(b.addrKnown, ok)
		if ok {
			b.byPC[addr] = append(b.byPC[addr], s)
			b.pcEntries++
		}
	}
}

// shiftDown moves s[head:] to the start of s and returns it, same capacity.
func shiftDown[T any](s []T, head int) []T {
	n := copy(s, s[head:])
	return s[:n]
}

// frameLocked returns the frame with number num, with a copy of its bytes
// (a circular buffer reuses the space of dropped frames).
func (b *Buffer) frameLocked(num int) (*Frame, bool) {
	if num < 0 || num >= b.count {
		return nil, false
	}
	seq := b.headSeq + int64(num)
	n := b.recSize(seq)
	return b.frameFromLocked(num, b.rec(seq), b.appendBytes(make([]byte, 0, n), b.rec(seq).pos(), n)), true
}

func (b *Buffer) frameFromLocked(num int, rec *record, raw []byte) *Frame {
	return &Frame{
		Num:          num,
		TPNum:        int(rec.tpnum()),
		Raw:          raw,
		RegBlockSize: b.regSize,
		RegsFrom:     rec.regsFrom(),
		Time:         rec.time,
		fallbackPC:   rec.fallbackPC,
		hasFallback:  rec.hasFallback(),
	}
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
	if num >= int64(b.count) {
		return 0, false
	}
	return int(num), true
}

// FindPC returns the first frame numbered above after whose address (see
// the package doc) equals pc: QTFrame:pc.
func (b *Buffer) FindPC(after int, pc uint64, pcOffset int) (*Frame, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addrIndexLocked(pcOffset)
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
	b.tpIndexLocked()
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
	b.addrIndexLocked(pcOffset)
	if after < -1 {
		after = -1
	}
	head := int(b.headSeq - b.addrSeq0)
	addrs, known := b.addrs, b.addrKnown
	for i := head + after + 1; i < len(addrs); i++ {
		a := addrs[i]
		if (lo <= a && a <= hi) == inside && known[i] {
			return b.frameLocked(i - head)
		}
	}
	return nil, false
}

// ReadRaw returns up to n bytes at offset in the concatenation of the
// present frames in gdb's layout, oldest first (qTBuffer:offset,len):
// the stored bytes, 'r' blocks expanded (see BlockRegisterRuns), whose
// length is GDBUsed(). It returns nil when offset is negative, n <= 0 or
// offset >= GDBUsed().
func (b *Buffer) ReadRaw(offset, n int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.readGDBLocked(offset, n)
}

// GDBUsed returns the length of the present frames in gdb's layout: Used()
// plus what 'r' blocks gain there.
func (b *Buffer) GDBUsed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gdbUsedLocked()
}

// ReadTraceData is ReadRaw with qTBuffer's end handling decided under the
// same lock: it returns io.EOF when offset == GDBUsed() (reply "l"),
// ErrBadOffset when offset < 0 or offset > GDBUsed() (reply "E01"), and
// otherwise between 1 and n bytes (n must be positive).
func (b *Buffer) ReadTraceData(offset, n int) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	total := b.gdbUsedLocked()
	switch {
	case offset == total:
		return nil, io.EOF
	case offset < 0 || offset > total:
		return nil, fmt.Errorf("read trace data at %d of %d bytes: %w", offset, total, ErrBadOffset)
	case n <= 0:
		return nil, fmt.Errorf("read %d bytes of trace data: bad length", n)
	}
	return b.readGDBLocked(offset, n), nil
}

// readRawLocked copies bytes of the present frames: they are contiguous,
// from the oldest one's, wrapping at the end of the arena.
func (b *Buffer) readRawLocked(offset, n int) []byte {
	if offset < 0 || n <= 0 || offset >= b.used {
		return nil
	}
	n = min(n, b.used-offset)
	p := b.rec(b.headSeq).pos() + offset
	if p >= b.size {
		p -= b.size
	}
	return b.appendBytes(make([]byte, 0, n), p, n)
}

// Frames calls fn for every present frame, oldest first, until fn returns
// false. fn runs with the buffer locked: it must not call the Buffer. The
// frames hold copies of their bytes, like Frame's.
func (b *Buffer) Frames(fn func(f *Frame) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var chunk []byte // copies share allocations of at least 64 KiB
	for num := 0; num < b.count; num++ {
		seq := b.headSeq + int64(num)
		rec, n := b.rec(seq), b.recSize(seq)
		if cap(chunk)-len(chunk) < n {
			chunk = make([]byte, 0, max(64<<10, n))
		}
		from := len(chunk)
		chunk = b.appendBytes(chunk, rec.pos(), n)
		if !fn(b.frameFromLocked(num, rec, chunk[from:len(chunk):len(chunk)])) {
			return
		}
	}
}

// storedSnapshot returns a copy of every present frame's stored bytes,
// oldest first (contiguous: 'r' blocks not expanded), each frame's size
// and time, and the register block size: a copy made in one pass under
// the lock, for a writer to expand without it (writeGDBFrames).
func (b *Buffer) storedSnapshot() (raw []byte, sizes []int32, times []int64, regSize int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sizes, times = make([]int32, b.count), make([]int64, b.count)
	for i := range sizes {
		seq := b.headSeq + int64(i)
		sizes[i], times[i] = int32(b.recSize(seq)), b.rec(seq).time
	}
	return b.readRawLocked(0, b.used), sizes, times, b.regSize
}

// snapshot returns a copy of every present frame's bytes in gdb's layout,
// oldest first (what qTBuffer serves from offset 0 to GDBUsed()), and
// their times.
func (b *Buffer) snapshot() ([]byte, []int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	times := make([]int64, b.count)
	for i := range times {
		times[i] = b.rec(b.headSeq + int64(i)).time
	}
	return b.readGDBLocked(0, b.gdbUsedLocked()), times
}
