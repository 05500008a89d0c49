package coverage

import (
	"encoding/binary"
	"errors"
	"fmt"

	"gotpstub/fasttp"
)

// DWARF exception-header pointer encodings (DW_EH_PE_*): the low nibble
// is the format, bits 4-6 how the value applies.
const (
	pePtr     = 0x00 // absptr: an address-sized unsigned value
	peULEB    = 0x01
	peU2      = 0x02
	peU4      = 0x03
	peU8      = 0x04
	peSLEB    = 0x09
	peS2      = 0x0a
	peS4      = 0x0b
	peS8      = 0x0c
	pePCRel   = 0x10 // relative to the field's own address
	peAligned = 0x50 // the value is aligned to an address's size
	peOmit    = 0xff
)

// errEHFrame is wrapped by parseEHFrame's errors.
var errEHFrame = errors.New("malformed .eh_frame")

// ehReader reads an .eh_frame section.
type ehReader struct {
	data  []byte
	addr  uint64 // the section's address
	order binary.ByteOrder
	ptr   int // an address's size: 8 or 4
}

// parseEHFrame returns the address ranges [PC begin, PC begin + PC
// range) of the FDEs in data, an .eh_frame section at address addr of a
// file of the given byte order and address size (8 or 4), in the order
// they appear, empty ranges left out. It stops at a zero terminator or
// the end of data; on a malformed entry it returns the ranges before it
// and an error wrapping errEHFrame. PC begin may be absolute or
// pc-relative (what linkers emit); other applications are errors.
func parseEHFrame(data []byte, addr uint64, order binary.ByteOrder, ptr int) ([]fasttp.Range, error) {
	if ptr != 4 && ptr != 8 {
		return nil, fmt.Errorf("%w: address size %d", errEHFrame, ptr)
	}
	r := &ehReader{data: data, addr: addr, order: order, ptr: ptr}
	cies := map[uint64]byte{} // CIE offset → FDE pointer encoding
	var out []fasttp.Range
	for off := uint64(0); off < uint64(len(data)); {
		body, end, idSize, err := r.entry(off)
		if err != nil {
			return out, err
		}
		if end == body {
			break // the terminator
		}
		id, err := r.uint(body, idSize)
		if err != nil {
			return out, err
		}
		if id != 0 { // an FDE; id is the distance back to its CIE
			if id > body {
				return out, fmt.Errorf("%w: FDE at %#x points before the section", errEHFrame, off)
			}
			cie := body - id
			enc, ok := cies[cie]
			if !ok {
				if enc, err = r.cie(cie); err != nil {
					return out, fmt.Errorf("CIE of the FDE at %#x: %w", off, err)
				}
				cies[cie] = enc
			}
			p := body + idSize
			begin, n, err := r.encoded(p, enc, end)
			if err != nil {
				return out, fmt.Errorf("FDE at %#x: %w", off, err)
			}
			size, _, err := r.encoded(p+n, enc&0x0f, end)
			if err != nil {
				return out, fmt.Errorf("FDE at %#x: %w", off, err)
			}
			if r.ptr == 4 {
				begin, size = begin&0xffffffff, size&0xffffffff
			}
			if size > 0 && begin+size > begin {
				out = append(out, fasttp.Range{Start: begin, End: begin + size})
			}
		}
		off = end
	}
	return out, nil
}

// entry reads the length of the CIE or FDE at off: its body starts at
// body (the CIE id or CIE pointer, idSize bytes) and ends at end.
func (r *ehReader) entry(off uint64) (body, end, idSize uint64, err error) {
	n, err := r.uint(off, 4)
	if err != nil {
		return 0, 0, 0, err
	}
	body, idSize = off+4, 4
	if n == 0xffffffff { // 64-bit DWARF
		if n, err = r.uint(body, 8); err != nil {
			return 0, 0, 0, err
		}
		body, idSize = body+8, 8
	}
	if n > uint64(len(r.data))-body {
		return 0, 0, 0, fmt.Errorf("%w: entry at %#x of %d bytes runs past the end", errEHFrame, off, n)
	}
	if n != 0 && n < idSize {
		return 0, 0, 0, fmt.Errorf("%w: entry at %#x of %d bytes", errEHFrame, off, n)
	}
	return body, body + n, idSize, nil
}

// cie reads the CIE at off and returns its FDE pointer encoding.
func (r *ehReader) cie(off uint64) (byte, error) {
	body, end, idSize, err := r.entry(off)
	if err != nil {
		return 0, err
	}
	if end == body {
		return 0, fmt.Errorf("%w: CIE at %#x is a terminator", errEHFrame, off)
	}
	if id, _ := r.uint(body, idSize); id != 0 {
		return 0, fmt.Errorf("%w: %#x is no CIE", errEHFrame, off)
	}
	p := body + idSize
	version, err := r.byte(p, end)
	if err != nil {
		return 0, err
	}
	if version != 1 && version != 3 && version != 4 {
		return 0, fmt.Errorf("%w: CIE at %#x: version %d", errEHFrame, off, version)
	}
	p++
	augStart := p
	for {
		c, err := r.byte(p, end)
		if err != nil {
			return 0, err
		}
		p++
		if c == 0 {
			break
		}
	}
	aug := string(r.data[augStart : p-1])
	if version == 4 {
		p += 2 // address_size, segment_selector_size
	}
	for range 2 { // code and data alignment factors
		if _, p, err = r.leb(p, end); err != nil {
			return 0, err
		}
	}
	if version == 1 {
		p++ // the return address register
	} else if _, p, err = r.leb(p, end); err != nil {
		return 0, err
	}
	if aug == "" {
		return pePtr, nil
	}
	if aug[0] != 'z' {
		return 0, fmt.Errorf("%w: CIE at %#x: augmentation %q", errEHFrame, off, aug)
	}
	if _, p, err = r.leb(p, end); err != nil { // augmentation data length
		return 0, err
	}
	for _, c := range []byte(aug[1:]) {
		switch c {
		case 'R':
			return r.byte(p, end)
		case 'L':
			p++
		case 'P':
			enc, err := r.byte(p, end)
			if err != nil {
				return 0, err
			}
			// Skipped, not read: indirect (0x80) is fine.
			_, n, err := r.encoded(p+1, enc&^0x80, end)
			if err != nil {
				return 0, err
			}
			p += 1 + n
		case 'S', 'B', 'G':
		default:
			return 0, fmt.Errorf("%w: CIE at %#x: augmentation %q", errEHFrame, off, aug)
		}
	}
	return pePtr, nil // no 'R'
}

// encoded reads a value of encoding enc at p (before end) and returns it
// and the bytes it takes.
func (r *ehReader) encoded(p uint64, enc byte, end uint64) (v, n uint64, err error) {
	if enc == peOmit || enc&0x80 != 0 {
		return 0, 0, fmt.Errorf("%w: pointer encoding %#x", errEHFrame, enc)
	}
	start := p
	if enc&0x70 == peAligned {
		p = alignUp(p, uint64(r.ptr))
	}
	field := p
	var size uint64
	switch enc & 0x0f {
	case pePtr:
		size = uint64(r.ptr)
	case peU2, peS2:
		size = 2
	case peU4, peS4:
		size = 4
	case peU8, peS8:
		size = 8
	case peULEB, peSLEB:
		if v, p, err = r.leb(p, end); err != nil {
			return 0, 0, err
		}
		if enc&0x0f == peSLEB {
			v = uint64(signLEB(r.data[field:p]))
		}
	default:
		return 0, 0, fmt.Errorf("%w: pointer encoding %#x", errEHFrame, enc)
	}
	if size > 0 {
		if p > end || size > end-p {
			return 0, 0, fmt.Errorf("%w: value at %#x runs past its entry", errEHFrame, p)
		}
		if v, err = r.uint(p, size); err != nil {
			return 0, 0, err
		}
		if enc&0x0f >= peS2 && enc&0x0f <= peS8 {
			v = uint64(int64(v<<(64-8*size)) >> (64 - 8*size))
		}
		p += size
	}
	switch enc & 0x70 {
	case 0, peAligned:
	case pePCRel:
		v += r.addr + field
	default:
		return 0, 0, fmt.Errorf("%w: pointer encoding %#x", errEHFrame, enc)
	}
	return v, p - start, nil
}

// byte reads the byte at p (before end).
func (r *ehReader) byte(p, end uint64) (byte, error) {
	if p >= end {
		return 0, fmt.Errorf("%w: entry truncated at %#x", errEHFrame, p)
	}
	return r.data[p], nil
}

// uint reads a size-byte (2, 4 or 8) unsigned value at p.
func (r *ehReader) uint(p, size uint64) (uint64, error) {
	if p > uint64(len(r.data)) || size > uint64(len(r.data))-p {
		return 0, fmt.Errorf("%w: truncated at %#x", errEHFrame, p)
	}
	b := r.data[p : p+size]
	switch size {
	case 2:
		return uint64(r.order.Uint16(b)), nil
	case 4:
		return uint64(r.order.Uint32(b)), nil
	}
	return r.order.Uint64(b), nil
}

// leb reads an unsigned LEB128 at p (before end): its value (the low 64
// bits) and the offset after it.
func (r *ehReader) leb(p, end uint64) (v, next uint64, err error) {
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte(p, end)
		if err != nil {
			return 0, 0, err
		}
		p++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v, p, nil
		}
	}
}

// signLEB returns the signed LEB128 in b (the whole of it).
func signLEB(b []byte) int64 {
	var v int64
	shift := uint(0)
	for _, c := range b {
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
	}
	if shift < 64 && b[len(b)-1]&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}
