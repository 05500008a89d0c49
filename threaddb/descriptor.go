package threaddb

import (
	"encoding/binary"
	"fmt"
)

// Descriptor is one of glibc's _thread_db_* layout descriptors: three
// 32-bit words {size in bits, element count, byte offset}. For a structure
// field, SizeBits is the field's width (or one element's width for an
// array field), Count is 1 (or the array length; 0 for a flexible array
// member, which has no bound) and Offset the field's offset in its
// structure.
type Descriptor struct {
	SizeBits uint32
	Count    uint32
	Offset   uint32
}

// descriptorSize is the size in bytes of an encoded Descriptor.
const descriptorSize = 12

// ParseDescriptor decodes a 12-byte descriptor in the given byte order. It
// rejects descriptors libthread_db could not use: a width that is not a
// whole number of bytes or a zero width.
func ParseDescriptor(b []byte, order binary.ByteOrder) (Descriptor, error) {
	if len(b) != descriptorSize {
		return Descriptor{}, fmt.Errorf("descriptor is %d bytes, want %d", len(b), descriptorSize)
	}
	d := Descriptor{
		SizeBits: order.Uint32(b[0:4]),
		Count:    order.Uint32(b[4:8]),
		Offset:   order.Uint32(b[8:12]),
	}
	if d.SizeBits == 0 || d.SizeBits%8 != 0 {
		return Descriptor{}, fmt.Errorf("descriptor width %d bits is not a positive whole number of bytes", d.SizeBits)
	}
	return d, nil
}

// ElementAddress returns the address of element index of the field d
// describes in the structure at base: base + Offset + index*SizeBits/8.
// Like libthread_db it refuses an index past the field's element count,
// unless Count is 0 (a flexible array member).
func (d Descriptor) ElementAddress(base, index uint64) (uint64, error) {
	if d.Count != 0 && index >= uint64(d.Count) {
		return 0, fmt.Errorf("index %d out of range (%d elements)", index, d.Count)
	}
	return base + uint64(d.Offset) + index*uint64(d.SizeBits/8), nil
}
