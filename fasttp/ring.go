package fasttp

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"gotpstub/jit"
)

// This file reads the lanes the jump pads write (the record format and
// the reservation protocol are in jit's package doc, "Jump pads"). The
// lanes live in memory shared with the inferior (inferior.MapShared), so
// the stub reads them in place while the program runs:
//
//  1. load the lane's head (atomically: pads advance it with lock cmpxchg);
//  2. ParseLane from the stub's tail: each record's first word is loaded
//     atomically. A compact record is that word alone, stored at once; a
//     full record is read only once its size (the word's low half) is
//     nonzero (the pad stores the size last, and x86 keeps stores in
//     order), so a record being written is never seen half done; the
//     first uncommitted record ends the pass;
//  3. hand the records to the engine: they point into the lane, no copy;
//  4. zero every consumed byte and only then store the new tail (release):
//     record sizes differ between tracepoints, so a later record can start
//     where an old one had payload, and a stale nonzero word there must
//     not look like a committed size. Lanes start zeroed.

// RingRecord is one committed record of a lane (filler words are
// consumed but not returned).
type RingRecord struct {
	Cursor  uint64 // the record's cursor in its lane (monotonic byte position)
	Lane    int    // the lane it came from
	TPIndex uint32 // index in the control block's tracepoint table
	Flags   uint32 // jit.RecError, jit.RecRegs or 0
	ErrCode uint32 // jit.RecError: the jit Err* code; the record has no payload
	Time    uint64 // the pad's counter at the hit (rdtsc; cntvct_el0 on arm64)
	Thread  uint64 // the thread pointer (fs base; tpidr_el0 on arm64), 0 when unknown
	// Compact: a compact record (jit.RecCompactSize bytes). ParseLane
	// leaves in Time only the low jit.RecCompactTimeBits bits and Thread
	// 0; the lane's owner and the clock complete them (completeCompact).
	Compact bool
	// Regs is the pad register block when Flags has jit.RecRegs,
	// ringRegBytes bytes: on amd64 jit.PadRegs little-endian 8-byte
	// slots, GDB's amd64 numbering; on arm64 jit.PadRegBlockARM64 bytes,
	// jit.PadRegsARM64 slots (GDB's aarch64 x0-x30, sp, pc, cpsr), then
	// q0-q31 (16 bytes each, from jit.PadQRegsARM64), fpsr and fpcr
	// (jit.PadFPSRARM64, jit.PadFPCRARM64).
	Regs []byte
	// XSave is the thread's x87/SSE/AVX state in XSAVE's standard format
	// when Flags has jit.RecXSave.
	XSave []byte
	// Blocks holds the 'M'/'V' collection blocks (jit's block format),
	// checked to be well formed when parsed.
	Blocks []byte
	// Regs, XSave and Blocks are not copies: they are the lane's bytes,
	// valid until the lane's tail moves past the record (lanes.release).
	// The program could still scribble on them (its memory), so their
	// users must not trust them beyond their length.
}

// Reg returns register slot i of the register block (0 without one).
func (r *RingRecord) Reg(i int) uint64 {
	if 8*i+8 > len(r.Regs) {
		return 0
	}
	return binary.LittleEndian.Uint64(r.Regs[8*i:])
}

// HasRegs reports whether the record holds the register block.
func (r *RingRecord) HasRegs() bool { return r.Flags&jit.RecRegs != 0 }

// load32 and load64 read shared words atomically.
func load32(b []byte, off uint64) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
}

func load64(b []byte, off uint64) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}

func store64(b []byte, off, v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[off])), v)
}

// ParseLane consumes the committed records of lane data (its size a power
// of two) from cursor tail in order, stopping at head or at the first
// uncommitted record (size 0). It appends the records (not the filler
// words) to recs and returns them with the new tail: the cursor after
// the last consumed record. The records' payloads are slices of data. Every header and body is validated; on a
// corrupt record it returns the records before it, the tail after them
// and an error naming the lane offset. It never panics on any contents.
func ParseLane(data []byte, tail, head uint64, recs []RingRecord) ([]RingRecord, uint64, error) {
	recs, tail, _, err := parseLaneN(data, tail, head, recs, -1)
	return recs, tail, err
}

// parseLaneN is ParseLane appending at most max records (max < 0: no
// limit); more says it stopped at that limit before head.
func parseLaneN(data []byte, tail, head uint64, recs []RingRecord, max int) (_ []RingRecord, _ uint64, more bool, _ error) {
	size := uint64(len(data))
	if size < jit.RecHeaderSize || size&(size-1) != 0 {
		return recs, tail, false, fmt.Errorf("lane: size %d is not a power of two of at least %d", size, jit.RecHeaderSize)
	}
	if tail%jit.RecMinAlign != 0 {
		return recs, tail, false, fmt.Errorf("lane: tail %d is not %d-byte aligned", tail, jit.RecMinAlign)
	}
	if head < tail || head-tail > size {
		return recs, tail, false, fmt.Errorf("lane: head %d and tail %d are not at most %d bytes apart", head, tail, size)
	}
	start := len(recs)
	for tail < head {
		if max >= 0 && len(recs)-start >= max {
			return recs, tail, true, nil
		}
		off := tail & (size - 1)
		before := len(recs)
		n, err := parseRecord(data, off, head-tail, &recs)
		if err != nil {
			return recs, tail, false, fmt.Errorf("lane: record at offset %d (cursor %d): %w", off, tail, err)
		}
		if n == 0 {
			break // not committed yet
		}
		if len(recs) > before {
			recs[before].Cursor = tail
		}
		tail += n
	}
	return recs, tail, false, nil
}

// parseRecord reads the record at lane offset off (avail reserved bytes
// from there to head), appends it unless it is a filler, and returns its
// size, or 0 if it is not committed.
func parseRecord(data []byte, off, avail uint64, recs *[]RingRecord) (uint64, error) {
	ringSize := uint64(len(data))
	// A compact record or a filler is one word: the lane may end less
	// than a header after it.
	if ringSize-off < jit.RecMinAlign || avail < jit.RecMinAlign {
		return 0, fmt.Errorf("no room for a record")
	}
	w := load64(data, off)
	if w&jit.RecCompactBit != 0 {
		return parseCompact(w, ringSize-off, avail, recs)
	}
	size := uint64(uint32(w))
	if size == 0 {
		return 0, nil
	}
	switch {
	case size%jit.RecAlign != 0:
		return 0, fmt.Errorf("size %d is not a multiple of %d", size, jit.RecAlign)
	case size > ringSize-off:
		return 0, fmt.Errorf("size %d runs past the lane end (%d)", size, ringSize)
	case size > avail:
		return 0, fmt.Errorf("size %d runs past head (%d bytes reserved)", size, avail)
	case size < jit.RecHeaderSize:
		return 0, fmt.Errorf("size %d is less than a %d-byte header", size, jit.RecHeaderSize)
	}
	hdr := data[off : off+jit.RecHeaderSize]
	tp := binary.LittleEndian.Uint32(hdr[jit.RecTPIndex:])
	used := binary.LittleEndian.Uint32(hdr[jit.RecUsed:])
	flags := binary.LittleEndian.Uint32(hdr[jit.RecFlags:])
	rec := RingRecord{TPIndex: tp, Flags: flags,
		Time: binary.LittleEndian.Uint64(hdr[jit.RecTime:]), Thread: binary.LittleEndian.Uint64(hdr[jit.RecThread:])}
	switch flags {
	case jit.RecError:
		if used < jit.ErrMemory || used > jit.ErrSteps {
			return 0, fmt.Errorf("error record with unknown error code %d", used)
		}
		rec.ErrCode = used
		*recs = append(*recs, rec)
		return size, nil
	case 0, jit.RecRegs, jit.RecRegs | jit.RecXSave:
	default:
		if flags&^(0xff<<jit.RecXSaveShift) != jit.RecRegs|jit.RecXSave {
			return 0, fmt.Errorf("unknown flags %#x", flags)
		}
	}
	body := data[off+jit.RecHeaderSize : off+size]
	if flags&jit.RecRegs != 0 {
		if len(body) < ringRegBytes {
			return 0, fmt.Errorf("size %d cannot hold the registers", size)
		}
		rec.Regs = body[:ringRegBytes:ringRegBytes]
		body = body[ringRegBytes:]
	}
	if flags&jit.RecXSave != 0 {
		n := int(flags>>jit.RecXSaveShift&0xff) * 64
		region := jit.XSaveRegion(n)
		// The area starts at the first 64-byte aligned lane offset (lanes
		// are page aligned in memory, as XSAVE needs).
		at := off + jit.RecHeaderSize + ringRegBytes
		start := int((at+63)&^63 - at)
		if n == 0 || len(body) < region || start+n > region {
			return 0, fmt.Errorf("size %d cannot hold a %d-byte XSAVE area", size, n)
		}
		rec.XSave = body[start : start+n : start+n]
		body = body[region:]
	}
	if uint64(used) > uint64(len(body)) {
		return 0, fmt.Errorf("size %d cannot hold %d bytes of blocks", size, used)
	}
	if used > 0 {
		rec.Blocks = body[:used:used]
		if err := checkBlocks(rec.Blocks); err != nil {
			return 0, err
		}
	}
	*recs = append(*recs, rec)
	return size, nil
}

// parseCompact reads the compact record or filler word w at a lane offset
// toEnd bytes before the lane's end and avail before head, appends the
// record, and returns the bytes it takes.
func parseCompact(w, toEnd, avail uint64, recs *[]RingRecord) (uint64, error) {
	tp := uint32(w >> jit.RecCompactTPShift & jit.RecCompactSkip)
	low := w & (1<<jit.RecCompactTimeBits - 1)
	if tp == jit.RecCompactSkip {
		switch {
		case low != 0:
			return 0, fmt.Errorf("filler word %#x", w)
		case toEnd > avail:
			return 0, fmt.Errorf("filler of %d bytes runs past head (%d bytes reserved)", toEnd, avail)
		}
		return toEnd, nil
	}
	*recs = append(*recs, RingRecord{TPIndex: tp, Time: low, Compact: true})
	return jit.RecCompactSize, nil
}

// completeCompact gives the compact records of recs their thread and
// their whole time stamp: the thread is owner (the lane's), and the time
// the latest one whose low bits are the record's, not after now (the
// counter now; the bits wrap after days).
func completeCompact(recs []RingRecord, owner, now uint64) {
	const mask = 1<<jit.RecCompactTimeBits - 1
	for i := range recs {
		r := &recs[i]
		if r.Compact {
			r.Thread = owner
			r.Time = now - (now-r.Time)&mask
		}
	}
}

// checkBlocks verifies that b is a sequence of complete 'M'/'V' blocks.
func checkBlocks(b []byte) error {
	for i := 0; i < len(b); {
		switch b[i] {
		case jit.BlockMemory:
			if len(b)-i < 11 {
				return fmt.Errorf("block at %d: truncated 'M' header", i)
			}
			n := int(binary.LittleEndian.Uint16(b[i+9:]))
			if len(b)-i-11 < n {
				return fmt.Errorf("block at %d: 'M' of %d bytes is truncated", i, n)
			}
			i += 11 + n
		case jit.BlockTSV:
			if len(b)-i < 13 {
				return fmt.Errorf("block at %d: truncated 'V'", i)
			}
			i += 13
		default:
			return fmt.Errorf("block at %d: unknown tag %#x", i, b[i])
		}
	}
	return nil
}

// ConsumedRanges returns the lane byte ranges [start, end) (lane offsets)
// covered by the cursors [oldTail, newTail): the bytes the stub must zero
// before publishing newTail. There are at most two (the range wraps).
func ConsumedRanges(ringSize, oldTail, newTail uint64) ([][2]uint64, error) {
	if ringSize == 0 || newTail < oldTail || newTail-oldTail > ringSize {
		return nil, fmt.Errorf("lane: cannot consume [%d, %d) of a %d-byte lane", oldTail, newTail, ringSize)
	}
	n := newTail - oldTail
	if n == 0 {
		return nil, nil
	}
	start := oldTail % ringSize
	if start+n <= ringSize {
		return [][2]uint64{{start, start + n}}, nil
	}
	return [][2]uint64{{start, ringSize}, {0, start + n - ringSize}}, nil
}

// mergeByTime merges per-lane record lists (each in its lane's order) into
// one list ordered by time stamp, never reordering records of one lane: a
// thread writes to one lane, so its hits keep their order whatever the
// clocks of the CPUs it ran on say. It returns pointers into the lanes'
// lists.
func mergeByTime(lanes [][]RingRecord, out []*RingRecord) []*RingRecord {
	live := 0
	last := -1
	for l, recs := range lanes {
		if len(recs) > 0 {
			live++
			last = l
		}
	}
	if live == 1 { // the common case: nothing to merge
		for i := range lanes[last] {
			out = append(out, &lanes[last][i])
		}
		return out
	}
	idx := make([]int, len(lanes))
	for {
		best := -1
		for l, recs := range lanes {
			if idx[l] < len(recs) && (best < 0 || recs[idx[l]].Time < lanes[best][idx[best]].Time) {
				best = l
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, &lanes[best][idx[best]])
		idx[best]++
	}
}
