package coverage

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"gotpstub/fasttp"
)

// ehBuilder assembles an .eh_frame section at addr.
type ehBuilder struct {
	addr  uint64
	order appendOrder
	ptr   int
	b     []byte
}

// entry appends a CIE or FDE whose body (after its id or CIE pointer)
// is body; id is the CIE id (0) or the CIE's offset for an FDE. wide:
// the 64-bit length form. It returns the entry's offset.
func (e *ehBuilder) entry(wide, fde bool, cie int, body func(at int) []byte) int {
	off := len(e.b)
	hdr, idSize := 4, 4
	if wide {
		hdr, idSize = 12, 8
	}
	at := off + hdr + idSize // where the body starts
	rest := body(at)
	n := idSize + len(rest)
	for (hdr+n)%e.ptr != 0 {
		rest, n = append(rest, 0), n+1 // DW_CFA_nop
	}
	if wide {
		e.b = e.order.AppendUint32(e.b, 0xffffffff)
		e.b = e.order.AppendUint64(e.b, uint64(n))
	} else {
		e.b = e.order.AppendUint32(e.b, uint32(n))
	}
	id := uint64(0)
	if fde {
		id = uint64(off + hdr - cie) // from the CIE pointer back to the CIE
	}
	if wide {
		e.b = e.order.AppendUint64(e.b, id)
	} else {
		e.b = e.order.AppendUint32(e.b, uint32(id))
	}
	e.b = append(e.b, rest...)
	return off
}

// cie appends a CIE of the given version, augmentation and augmentation
// data.
func (e *ehBuilder) cie(version byte, aug string, augData []byte) int {
	return e.entry(false, false, 0, func(int) []byte {
		b := append([]byte{version}, aug...)
		b = append(b, 0, 4, 0x78) // code alignment 4, data alignment -8
		b = append(b, 30)         // return address register
		if len(aug) > 0 && aug[0] == 'z' {
			b = append(b, byte(len(augData)))
			b = append(b, augData...)
		}
		return append(b, 0x0c, 31, 0) // def_cfa sp, 0
	})
}

// fdePCRel4 appends an FDE of cie for [start, start+size) with pc_begin
// pc-relative sdata4 and pc_range udata4 (augmentation z).
func (e *ehBuilder) fdePCRel4(cie int, start, size uint64) int {
	return e.entry(false, true, cie, func(at int) []byte {
		b := e.order.AppendUint32(nil, uint32(start-(e.addr+uint64(at))))
		b = e.order.AppendUint32(b, uint32(size))
		return append(b, 0) // augmentation data length
	})
}

// fdeAbs appends an FDE with absolute address-sized pc_begin and pc_range.
func (e *ehBuilder) fdeAbs(wide bool, cie int, start, size uint64, z bool) int {
	return e.entry(wide, true, cie, func(int) []byte {
		var b []byte
		if e.ptr == 8 {
			b = e.order.AppendUint64(e.order.AppendUint64(nil, start), size)
		} else {
			b = e.order.AppendUint32(e.order.AppendUint32(nil, uint32(start)), uint32(size))
		}
		if z {
			b = append(b, 0)
		}
		return b
	})
}

func (e *ehBuilder) terminator() { e.b = e.order.AppendUint32(e.b, 0) }

func TestParseEHFrame(t *testing.T) {
	le := binary.LittleEndian
	const addr = 0x1ed20
	type rs = []fasttp.Range
	for _, c := range []struct {
		name  string
		ptr   int
		build func(e *ehBuilder)
		want  rs
		err   bool
	}{
		{"zR pcrel sdata4", 8, func(e *ehBuilder) {
			c := e.cie(1, "zR", []byte{0x1b})
			e.fdePCRel4(c, 0x3f40, 0x30)
			e.fdePCRel4(c, 0x4000, 0x124)
			e.terminator()
		}, rs{{Start: 0x3f40, End: 0x3f70}, {Start: 0x4000, End: 0x4124}}, false},
		{"zPLR: indirect personality, two CIEs", 8, func(e *ehBuilder) {
			c1 := e.cie(1, "zR", []byte{0x1b})
			e.fdePCRel4(c1, 0x1000, 0x10)
			c2 := e.cie(1, "zPLR", []byte{0x9b, 0, 0, 0, 0, 0x1b, 0x1b})
			e.fdePCRel4(c2, 0x2000, 0x20)
			e.fdePCRel4(c1, 0x3000, 0x30)
		}, rs{{Start: 0x1000, End: 0x1010}, {Start: 0x2000, End: 0x2020}, {Start: 0x3000, End: 0x3030}}, false},
		{"no augmentation, version 3: absptr", 8, func(e *ehBuilder) {
			c := e.cie(3, "", nil)
			e.fdeAbs(false, c, 0x400000, 0x40, false)
		}, rs{{Start: 0x400000, End: 0x400040}}, false},
		{"64-bit lengths", 8, func(e *ehBuilder) {
			c := e.cie(1, "zR", []byte{0x00})
			e.fdeAbs(true, c, 0x5000, 0x8, true)
		}, rs{{Start: 0x5000, End: 0x5008}}, false},
		{"elf32", 4, func(e *ehBuilder) {
			c := e.cie(1, "zR", []byte{0x00})
			e.fdeAbs(false, c, 0x8000, 0x18, true)
		}, rs{{Start: 0x8000, End: 0x8018}}, false},
		{"the terminator ends it", 8, func(e *ehBuilder) {
			c := e.cie(1, "zR", []byte{0x1b})
			e.fdePCRel4(c, 0x1000, 0x10)
			e.terminator()
			e.b = append(e.b, 0xff, 0xff)
		}, rs{{Start: 0x1000, End: 0x1010}}, false},
		{"empty range left out", 8, func(e *ehBuilder) {
			c := e.cie(1, "zR", []byte{0x1b})
			e.fdePCRel4(c, 0x1000, 0)
		}, nil, false},
		{"unknown augmentation", 8, func(e *ehBuilder) {
			c := e.cie(1, "eh", nil)
			e.fdePCRel4(c, 0x1000, 0x10)
		}, nil, true},
		{"datarel pc_begin", 8, func(e *ehBuilder) {
			c := e.cie(1, "zR", []byte{0x3b})
			e.fdePCRel4(c, 0x1000, 0x10)
		}, nil, true},
		{"CIE version 2", 8, func(e *ehBuilder) {
			c := e.cie(2, "zR", []byte{0x1b})
			e.fdePCRel4(c, 0x1000, 0x10)
		}, nil, true},
		{"FDE before the section", 8, func(e *ehBuilder) {
			e.entry(false, true, -64, func(int) []byte { return make([]byte, 9) })
		}, nil, true},
		{"FDE pointing at an FDE", 8, func(e *ehBuilder) {
			c := e.cie(1, "zR", []byte{0x1b})
			f := e.fdePCRel4(c, 0x1000, 0x10)
			e.fdePCRel4(f, 0x2000, 0x10)
		}, rs{{Start: 0x1000, End: 0x1010}}, true},
		{"truncated", 8, func(e *ehBuilder) {
			c := e.cie(1, "zR", []byte{0x1b})
			e.fdePCRel4(c, 0x1000, 0x10)
			e.b = e.b[:len(e.b)-4]
		}, nil, true},
	} {
		e := &ehBuilder{addr: addr, order: le, ptr: c.ptr}
		c.build(e)
		got, err := parseEHFrame(e.b, addr, le, c.ptr)
		if (err != nil) != c.err || err != nil && !errors.Is(err, errEHFrame) {
			t.Errorf("%s: error %v, want one: %v", c.name, err, c.err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: ranges %#x, want %#x", c.name, got, c.want)
		}
	}
}

func TestEHFrameEncoded(t *testing.T) {
	le := binary.LittleEndian
	for _, c := range []struct {
		data []byte
		enc  byte
		want uint64
		n    uint64
	}{
		{[]byte{0xe5, 0x8e, 0x26}, peULEB, 624485, 3},
		{[]byte{0xc0, 0xbb, 0x78}, peSLEB, uint64(0xffffffffffffffff - 123456 + 1), 3},
		{[]byte{0xfe, 0xff}, peS2, ^uint64(1), 2},
		{[]byte{0xfe, 0xff}, peU2, 0xfffe, 2},
		{[]byte{0xfc, 0xff, 0xff, 0xff}, peS4 | pePCRel, 0x1000 - 4, 4},
		{[]byte{8, 0, 0, 0, 0, 0, 0, 0}, peU8, 8, 8},
		{[]byte{0x7f}, peSLEB | pePCRel, 0x1000 - 1, 1},
	} {
		r := &ehReader{data: c.data, addr: 0x1000, order: le, ptr: 8}
		v, n, err := r.encoded(0, c.enc, uint64(len(c.data)))
		if err != nil || v != c.want || n != c.n {
			t.Errorf("%x as %#x: %#x (%d bytes), %v; want %#x (%d)", c.data, c.enc, v, n, err, c.want, c.n)
		}
	}
}

// FuzzEHFrame: any bytes parse without a panic into non-empty ranges; a
// well-formed section built around the fuzzer's values gives them back.
func FuzzEHFrame(f *testing.F) {
	le := binary.LittleEndian
	seed := &ehBuilder{addr: 0x1ed20, order: le, ptr: 8}
	c := seed.cie(1, "zPLR", []byte{0x9b, 0, 0, 0, 0, 0x1b, 0x1b})
	seed.fdePCRel4(c, 0x3f40, 0x30)
	seed.fdeAbs(true, seed.cie(1, "zR", []byte{0}), 0x5000, 8, true)
	seed.terminator()
	f.Add(seed.b, uint64(0x1ed20), true, uint32(0x3f40), uint32(0x30))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0, 0}, uint64(0), false, uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64, elf64 bool, start, size uint32) {
		ptr := 4
		if elf64 {
			ptr = 8
		}
		got, _ := parseEHFrame(data, addr, le, ptr)
		for _, r := range got {
			if r.End <= r.Start {
				t.Fatalf("range %#x", r)
			}
		}
		e := &ehBuilder{addr: addr &^ 7, order: le, ptr: ptr}
		start &= 0x7fffffff // within an sdata4 of the field
		e.fdePCRel4(e.cie(1, "zR", []byte{0x1b}), e.addr+uint64(start), uint64(size))
		got, err := parseEHFrame(e.b, e.addr, le, ptr)
		want := []fasttp.Range{{Start: e.addr + uint64(start), End: e.addr + uint64(start) + uint64(size)}}
		if ptr == 4 {
			want[0].Start &= 0xffffffff
			want[0].End = want[0].Start + uint64(size)
		}
		if size == 0 || want[0].End < want[0].Start {
			want = nil
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%x: %#x, %v; want %#x", e.b, got, err, want)
		}
	})
}
