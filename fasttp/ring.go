package fasttp

import (
	"encoding/binary"
	"fmt"

	"gotpstub/jit"
)

// This file reads the ring buffer the jump pads write (the record format
// and the reservation protocol are in jit's package doc, "Jump pads").
//
// How the stub drains the ring:
//
//  1. read head (and use the tail it last published) from the control block;
//  2. ParseRing(ringSize, tail, head, read) with read fetching ring bytes
//     from the inferior: it reads each record's 16-byte header first and
//     its body only once the header says it is committed, so a record
//     being written is never seen half done;
//  3. hand the records to the trace engine;
//  4. zero every ring byte in [tail, newTail) (ConsumedRanges gives the
//     ring offsets), and only then store newTail into the control block's
//     tail. Zeroing every consumed byte, not only the headers, is needed
//     because record sizes differ between tracepoints: a later record can
//     start where an old one had payload, and a stale nonzero word there
//     must not look like a committed size. The ring must start zeroed.

// RingRecord is one committed record of the ring (RecSkip fillers are
// consumed but not returned).
type RingRecord struct {
	Cursor  uint64 // the record's cursor (monotonic byte position)
	TPIndex uint32 // index in the control block's tracepoint table
	Flags   uint32 // 0 or jit.RecError
	ErrCode uint32 // jit.RecError: the jit Err* code; the record has no payload
	// Regs is the pad register block (jit.PadRegs slots, GDB's amd64
	// numbering); zero for error records.
	Regs [jit.PadRegs]uint64
	// Blocks holds the 'M'/'V' collection blocks (jit's block format),
	// already checked to be well formed.
	Blocks []byte
}

// RingReadFunc returns the n ring bytes at ring offset off (off+n never
// exceeds the ring size). It must return exactly n bytes or an error.
type RingReadFunc func(off uint64, n int) ([]byte, error)

// RingSnapshot returns a RingReadFunc over a copy of the ring already in
// memory (a test, or a stopped process read in one go).
func RingSnapshot(data []byte) RingReadFunc {
	return func(off uint64, n int) ([]byte, error) {
		if n < 0 || off > uint64(len(data)) || uint64(n) > uint64(len(data))-off {
			return nil, fmt.Errorf("ring snapshot: %d bytes at offset %d outside %d", n, off, len(data))
		}
		return data[off : off+uint64(n)], nil
	}
}

// ringRegBytes is the size of the register block of a normal record.
const ringRegBytes = jit.PadRegs * 8

// ParseRing consumes the committed records from cursor tail in order and
// stops at head or at the first uncommitted record (size 0). It returns the
// records (without RecSkip fillers) and the new tail: the cursor after the
// last consumed record. Every header and body is validated; on a corrupt
// record (bad size, flags, error code, used or block) it returns the
// records before it, the tail after them, and an error naming the ring
// offset. It never panics on any ring contents.
func ParseRing(ringSize, tail, head uint64, read RingReadFunc) ([]RingRecord, uint64, error) {
	if ringSize == 0 || ringSize%jit.RecAlign != 0 {
		return nil, tail, fmt.Errorf("ring: size %d is not a nonzero multiple of %d", ringSize, jit.RecAlign)
	}
	if tail%jit.RecAlign != 0 {
		return nil, tail, fmt.Errorf("ring: tail %d is not %d-byte aligned", tail, jit.RecAlign)
	}
	if head < tail || head-tail > ringSize {
		return nil, tail, fmt.Errorf("ring: head %d and tail %d are not at most %d bytes apart", head, tail, ringSize)
	}
	var recs []RingRecord
	for tail < head {
		off := tail % ringSize
		rec, size, err := parseRecord(ringSize, off, head-tail, read)
		if err != nil {
			return recs, tail, fmt.Errorf("ring: record at offset %d (cursor %d): %w", off, tail, err)
		}
		if size == 0 {
			break // not committed yet
		}
		if rec != nil {
			rec.Cursor = tail
			recs = append(recs, *rec)
		}
		tail += size
	}
	return recs, tail, nil
}

// parseRecord reads the record at ring offset off; avail is the number of
// reserved bytes from there to head. It returns the record (nil for a
// filler) and its size, or size 0 if it is not committed.
func parseRecord(ringSize, off, avail uint64, read RingReadFunc) (*RingRecord, uint64, error) {
	if ringSize-off < jit.RecHeaderSize || avail < jit.RecHeaderSize {
		return nil, 0, fmt.Errorf("no room for a %d-byte header", jit.RecHeaderSize)
	}
	hdr, err := read(off, jit.RecHeaderSize)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the header: %w", err)
	}
	if len(hdr) != jit.RecHeaderSize {
		return nil, 0, fmt.Errorf("reading the header: got %d bytes", len(hdr))
	}
	size := uint64(binary.LittleEndian.Uint32(hdr[jit.RecSize:]))
	tp := binary.LittleEndian.Uint32(hdr[jit.RecTPIndex:])
	used := binary.LittleEndian.Uint32(hdr[jit.RecUsed:])
	flags := binary.LittleEndian.Uint32(hdr[jit.RecFlags:])
	if size == 0 {
		return nil, 0, nil
	}
	switch {
	case size%jit.RecAlign != 0 || size < jit.RecHeaderSize:
		return nil, 0, fmt.Errorf("size %d is not a multiple of %d of at least %d", size, jit.RecAlign, jit.RecHeaderSize)
	case size > ringSize-off:
		return nil, 0, fmt.Errorf("size %d runs past the ring end (%d)", size, ringSize)
	case size > avail:
		return nil, 0, fmt.Errorf("size %d runs past head (%d bytes reserved)", size, avail)
	}
	switch flags {
	case jit.RecSkip:
		if size != ringSize-off {
			return nil, 0, fmt.Errorf("filler size %d does not reach the ring end (%d bytes)", size, ringSize-off)
		}
		return nil, size, nil
	case jit.RecError:
		if used < jit.ErrMemory || used > jit.ErrSteps {
			return nil, 0, fmt.Errorf("error record with unknown error code %d", used)
		}
		return &RingRecord{TPIndex: tp, Flags: flags, ErrCode: used}, size, nil
	case 0:
	default:
		return nil, 0, fmt.Errorf("unknown flags %#x", flags)
	}
	if size < jit.RecHeaderSize+ringRegBytes || uint64(used) > size-jit.RecHeaderSize-ringRegBytes {
		return nil, 0, fmt.Errorf("size %d cannot hold the registers and %d bytes of blocks", size, used)
	}
	body, err := read(off+jit.RecHeaderSize, ringRegBytes+int(used))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the body: %w", err)
	}
	if len(body) != ringRegBytes+int(used) {
		return nil, 0, fmt.Errorf("reading the body: got %d bytes", len(body))
	}
	rec := &RingRecord{TPIndex: tp}
	for i := range rec.Regs {
		rec.Regs[i] = binary.LittleEndian.Uint64(body[8*i:])
	}
	rec.Blocks = append([]byte(nil), body[ringRegBytes:]...)
	if err := checkBlocks(rec.Blocks); err != nil {
		return nil, 0, err
	}
	return rec, size, nil
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

// ConsumedRanges returns the ring byte ranges [start, end) (ring offsets)
// covered by the cursors [oldTail, newTail): the bytes the stub must zero
// before publishing newTail. There are at most two (the range wraps).
func ConsumedRanges(ringSize, oldTail, newTail uint64) ([][2]uint64, error) {
	if ringSize == 0 || newTail < oldTail || newTail-oldTail > ringSize {
		return nil, fmt.Errorf("ring: cannot consume [%d, %d) of a %d-byte ring", oldTail, newTail, ringSize)
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
