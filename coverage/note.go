package coverage

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// GNU property note constants (the Linux Extensions to gABI; glibc's
// elf.h).
const (
	ntGNUPropertyType0  = 5          // NT_GNU_PROPERTY_TYPE_0
	propAArch64Feature1 = 0xc0000000 // GNU_PROPERTY_AARCH64_FEATURE_1_AND
	aarch64FeatureBTI   = 1 << 0     // GNU_PROPERTY_AARCH64_FEATURE_1_BTI
	gnuNoteName         = "GNU\x00"
	noteHeaderLen       = 12      // n_namesz, n_descsz, n_type
	propertyHeaderLen   = 8       // pr_type, pr_datasz
	maxNoteBytes        = 1 << 20 // a property note is a few dozen bytes
)

// btiGuarded reports whether the loader maps f's code BTI-guarded
// (PROT_BTI, on a CPU with BTI): its GNU property note, the
// PT_GNU_PROPERTY segment or else the .note.gnu.property section, has
// GNU_PROPERTY_AARCH64_FEATURE_1_AND with the BTI bit. A malformed note
// guards nothing, as glibc's loader ignores it.
func btiGuarded(f *elf.File) bool {
	var data []byte
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_PROPERTY && p.Filesz <= maxNoteBytes {
			data = make([]byte, p.Filesz)
			if _, err := p.ReadAt(data, 0); err != nil {
				return false
			}
			break
		}
	}
	if data == nil {
		s := f.Section(".note.gnu.property")
		if s == nil || s.Type != elf.SHT_NOTE || s.Size > maxNoteBytes {
			return false
		}
		var err error
		if data, err = s.Data(); err != nil {
			return false
		}
	}
	word := 8
	if f.Class == elf.ELFCLASS32 {
		word = 4
	}
	feat, err := aarch64Feature1(data, f.ByteOrder, word)
	return err == nil && feat&aarch64FeatureBTI != 0
}

// aarch64Feature1 returns the bits of the GNU_PROPERTY_AARCH64_FEATURE_1_AND
// property in notes, a sequence of ELF notes aligned to word bytes (8 in
// an ELF64 file, 4 in an ELF32 one), 0 when no NT_GNU_PROPERTY_TYPE_0
// note named GNU has one. A note or property running past the end, a
// property note whose size is not a multiple of word, or a feature
// property of other than 4 bytes is an error.
func aarch64Feature1(notes []byte, order binary.ByteOrder, word int) (uint32, error) {
	if word != 4 && word != 8 {
		return 0, fmt.Errorf("GNU property note: word size %d", word)
	}
	align := uint64(word)
	for off := uint64(0); off < uint64(len(notes)); {
		if uint64(len(notes))-off < noteHeaderLen {
			return 0, errors.New("GNU property note: truncated note header")
		}
		namesz := uint64(order.Uint32(notes[off:]))
		descsz := uint64(order.Uint32(notes[off+4:]))
		typ := order.Uint32(notes[off+8:])
		desc := alignUp(off+noteHeaderLen+namesz, align)
		end := desc + descsz
		if end > uint64(len(notes)) || desc > uint64(len(notes)) {
			return 0, fmt.Errorf("GNU property note at %d: runs past the end (%d bytes)", off, len(notes))
		}
		name := notes[off+noteHeaderLen : off+noteHeaderLen+namesz]
		if typ == ntGNUPropertyType0 && string(name) == gnuNoteName {
			return propertyFeature1(notes[desc:end], order, align)
		}
		off = alignUp(end, align)
	}
	return 0, nil
}

// propertyFeature1 finds GNU_PROPERTY_AARCH64_FEATURE_1_AND in the
// properties of an NT_GNU_PROPERTY_TYPE_0 note's descriptor.
func propertyFeature1(desc []byte, order binary.ByteOrder, align uint64) (uint32, error) {
	if uint64(len(desc))%align != 0 {
		return 0, fmt.Errorf("GNU property note: descriptor of %d bytes, not a multiple of %d", len(desc), align)
	}
	for off := uint64(0); off < uint64(len(desc)); {
		if uint64(len(desc))-off < propertyHeaderLen {
			return 0, errors.New("GNU property note: truncated property header")
		}
		typ := order.Uint32(desc[off:])
		size := uint64(order.Uint32(desc[off+4:]))
		data := off + propertyHeaderLen
		if size > uint64(len(desc))-data {
			return 0, fmt.Errorf("GNU property %#x: %d bytes run past the note", typ, size)
		}
		if typ == propAArch64Feature1 {
			if size != 4 {
				return 0, fmt.Errorf("GNU_PROPERTY_AARCH64_FEATURE_1_AND of %d bytes", size)
			}
			return order.Uint32(desc[data:]), nil
		}
		off = alignUp(data+size, align)
	}
	return 0, nil
}

// alignUp rounds v up to a multiple of a (a power of two).
func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }
