package coverage

import (
	"encoding/binary"
	"strings"
	"testing"
)

// property is one GNU property: type and data.
type property struct {
	typ  uint32
	data []byte
}

// appendOrder is a byte order that appends (binary.LittleEndian, BigEndian).
type appendOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// gnuNote builds an ELF note (name, type, desc) aligned to align bytes.
func gnuNote(order appendOrder, align int, name string, typ uint32, desc []byte) []byte {
	b := order.AppendUint32(nil, uint32(len(name)))
	b = order.AppendUint32(b, uint32(len(desc)))
	b = order.AppendUint32(b, typ)
	b = append(b, name...)
	for len(b)%align != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%align != 0 {
		b = append(b, 0)
	}
	return b
}

// propertyDesc builds the descriptor of an NT_GNU_PROPERTY_TYPE_0 note.
func propertyDesc(order appendOrder, align int, props ...property) []byte {
	var b []byte
	for _, p := range props {
		b = order.AppendUint32(b, p.typ)
		b = order.AppendUint32(b, uint32(len(p.data)))
		b = append(b, p.data...)
		for len(b)%align != 0 {
			b = append(b, 0)
		}
	}
	return b
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func TestAArch64Feature1(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	bti := property{propAArch64Feature1, u32(aarch64FeatureBTI)}
	btiPAC := property{propAArch64Feature1, u32(3)}
	x86 := property{0xc0000002, u32(3)} // GNU_PROPERTY_X86_FEATURE_1_AND
	isa := property{0xc0008002, u32(1)} // another property first
	long := property{0xc0000001, make([]byte, 12)}
	noteOf := func(align int, props ...property) []byte {
		return gnuNote(le, align, gnuNoteName, ntGNUPropertyType0, propertyDesc(le, align, props...))
	}
	for _, c := range []struct {
		name  string
		notes []byte
		order binary.ByteOrder
		word  int
		want  uint32
		err   string
	}{
		{"bti", noteOf(8, bti), le, 8, 1, ""},
		{"bti and pac", noteOf(8, btiPAC), le, 8, 3, ""},
		{"after others", noteOf(8, isa, long, bti), le, 8, 1, ""},
		{"x86 only", noteOf(8, x86), le, 8, 0, ""},
		{"empty", nil, le, 8, 0, ""},
		{"no properties", noteOf(8), le, 8, 0, ""},
		{"elf32", noteOf(4, isa, bti), le, 4, 1, ""},
		{"big-endian", gnuNote(be, 8, gnuNoteName, ntGNUPropertyType0, propertyDesc(be, 8, property{propAArch64Feature1, be.AppendUint32(nil, 1)})), be, 8, 1, ""},
		{"after a build-id note", append(gnuNote(le, 8, gnuNoteName, 3, make([]byte, 20)), noteOf(8, bti)...), le, 8, 1, ""},
		{"other owner", gnuNote(le, 8, "XYZ\x00", ntGNUPropertyType0, propertyDesc(le, 8, bti)), le, 8, 0, ""},
		{"other type", gnuNote(le, 8, gnuNoteName, 1, propertyDesc(le, 8, bti)), le, 8, 0, ""},
		{"truncated header", noteOf(8, bti)[:10], le, 8, 0, "truncated note header"},
		{"truncated desc", noteOf(8, bti)[:20], le, 8, 0, "runs past the end"},
		{"desc not a multiple", gnuNote(le, 4, gnuNoteName, ntGNUPropertyType0, propertyDesc(le, 4, bti)), le, 8, 0, "not a multiple"},
		{"property past the note", gnuNote(le, 8, gnuNoteName, ntGNUPropertyType0, append(le.AppendUint32(le.AppendUint32(nil, propAArch64Feature1), 16), 1, 0, 0, 0, 0, 0, 0, 0)), le, 8, 0, "run past the note"},
		{"feature of 8 bytes", noteOf(8, property{propAArch64Feature1, make([]byte, 8)}), le, 8, 0, "of 8 bytes"},
		{"word size", noteOf(8, bti), le, 2, 0, "word size"},
	} {
		got, err := aarch64Feature1(c.notes, c.order, c.word)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %#x, %v; want an error %q", c.name, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %#x, %v; want %#x", c.name, got, err, c.want)
		}
	}
}

// FuzzAArch64Feature1: any bytes parse without a panic; a well-formed
// note built around the fuzzer's feature bits gives them back.
func FuzzAArch64Feature1(f *testing.F) {
	le := binary.LittleEndian
	f.Add(gnuNote(le, 8, gnuNoteName, ntGNUPropertyType0, propertyDesc(le, 8, property{propAArch64Feature1, u32(1)})), true, uint32(1))
	f.Add(gnuNote(le, 4, gnuNoteName, ntGNUPropertyType0, propertyDesc(le, 4, property{0xc0008002, u32(1)}, property{propAArch64Feature1, u32(3)})), false, uint32(2))
	f.Add([]byte{4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 5, 0, 0, 0, 'G', 'N', 'U', 0}, true, uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, elf64 bool, feat uint32) {
		word := 4
		if elf64 {
			word = 8
		}
		_, _ = aarch64Feature1(data, le, word)
		_, _ = aarch64Feature1(data, binary.BigEndian, word)
		note := gnuNote(le, word, gnuNoteName, ntGNUPropertyType0, propertyDesc(le, word, property{0xc0000001, data[:len(data)%16]}, property{propAArch64Feature1, u32(feat)}))
		if got, err := aarch64Feature1(note, le, word); err != nil || got != feat {
			t.Fatalf("%x: %#x, %v; want %#x", note, got, err, feat)
		}
	})
}
