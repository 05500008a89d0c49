package solib

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// memImage is a flat memory image starting at base.
type memImage struct {
	base uint64
	data []byte
}

// ReadMemory implements MemoryReader; reads past the image are short.
func (m *memImage) ReadMemory(addr uint64, buf []byte) (int, error) {
	if addr < m.base || addr-m.base >= uint64(len(m.data)) {
		return 0, fmt.Errorf("address %#x not mapped", addr)
	}
	n := copy(buf, m.data[addr-m.base:])
	if n < len(buf) {
		return n, fmt.Errorf("short read at %#x", addr)
	}
	return n, nil
}

func (m *memImage) put64(addr, v uint64) {
	binary.LittleEndian.PutUint64(m.data[addr-m.base:], v)
}

func (m *memImage) put32(addr uint64, v uint32) {
	binary.LittleEndian.PutUint32(m.data[addr-m.base:], v)
}

func (m *memImage) putString(addr uint64, s string) {
	copy(m.data[addr-m.base:], s+"\x00")
}

// Layout of the synthetic process image.
const (
	imgBase    = 0x555555550000
	imgPhdr    = imgBase + 0x40
	imgDynamic = imgBase + 0x400
	imgRDebug  = imgBase + 0x800
	imgRDebug2 = imgBase + 0x900
	imgLinkMap = imgBase + 0x1000 // link_map i at imgLinkMap + i*0x100
	imgNames   = imgBase + 0x2000 // name i at imgNames + i*0x100
	imgSize    = 0x3000
)

// synthLib describes one link_map of the synthetic image.
type synthLib struct {
	name         string
	lAddr, lLd   uint64
	corruptPrev  bool
	namespaceTwo bool
}

func lmAddr(i int) uint64 { return imgLinkMap + uint64(i)*0x100 }

// buildImage lays out program headers, a dynamic section whose DT_DEBUG is
// rDebugValue (when withDebug), r_debug and the link maps.
func buildImage(libs []synthLib, withDebug bool, rDebugValue uint64) (*memImage, []byte) {
	m := &memImage{base: imgBase, data: make([]byte, imgSize)}
	// Program headers: PT_PHDR, PT_LOAD, PT_DYNAMIC; vaddrs relative to 0 (PIE).
	phdrs := []struct {
		typ   uint32
		vaddr uint64
	}{{ptPhdr, 0x40}, {1, 0}, {ptDynamic, 0x400}}
	for i, ph := range phdrs {
		at := imgPhdr + uint64(i)*phdrSize
		m.put32(at, ph.typ)
		m.put64(at+16, ph.vaddr)
	}
	dyn := uint64(imgDynamic)
	m.put64(dyn, 1) // DT_NEEDED
	m.put64(dyn+8, 7)
	dyn += dynSize
	if withDebug {
		m.put64(dyn, dtDebug)
		m.put64(dyn+8, rDebugValue)
		dyn += dynSize
	}
	m.put64(dyn, dtNull)

	var ns1, ns2 []int
	for i, lib := range libs {
		if lib.namespaceTwo {
			ns2 = append(ns2, i)
		} else {
			ns1 = append(ns1, i)
		}
	}
	link := func(rd uint64, idx []int) {
		m.put32(rd+rVersionOffset, 1)
		if len(idx) > 0 {
			m.put64(rd+rMapOffset, lmAddr(idx[0]))
		}
		for k, i := range idx {
			lm := lmAddr(i)
			m.putString(imgNames+uint64(i)*0x100, libs[i].name)
			m.put64(lm+lAddrOffset, libs[i].lAddr)
			m.put64(lm+lNameOffset, imgNames+uint64(i)*0x100)
			m.put64(lm+lLdOffset, libs[i].lLd)
			if k+1 < len(idx) {
				m.put64(lm+lNextOffset, lmAddr(idx[k+1]))
			}
			if k > 0 {
				m.put64(lm+lPrevOffset, lmAddr(idx[k-1]))
			}
			if libs[i].corruptPrev {
				m.put64(lm+lPrevOffset, 0xbad)
			}
		}
	}
	link(imgRDebug, ns1)
	if len(ns2) > 0 {
		m.put32(imgRDebug+rVersionOffset, 2)
		m.put64(imgRDebug+rNextOffset, imgRDebug2)
		link(imgRDebug2, ns2)
		m.put32(imgRDebug2+rVersionOffset, 2)
	}
	return m, makeAuxv(map[uint64]uint64{atPhdr: imgPhdr, atPhnum: uint64(len(phdrs)), 6: 4096})
}

// makeAuxv encodes an auxiliary vector ending with AT_NULL.
func makeAuxv(entries map[uint64]uint64) []byte {
	var b []byte
	for _, typ := range []uint64{6, atPhdr, atPhnum, 9} {
		if v, ok := entries[typ]; ok {
			b = binary.LittleEndian.AppendUint64(b, typ)
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	}
	return append(b, make([]byte, 16)...)
}

func TestParseAuxv(t *testing.T) {
	b := makeAuxv(map[uint64]uint64{atPhdr: 0x1040, atPhnum: 13, 6: 4096, 9: 0x2000})
	b = append(b, 1, 2, 3) // trailing garbage after AT_NULL
	got := ParseAuxv(b)
	want := map[uint64]uint64{atPhdr: 0x1040, atPhnum: 13, 6: 4096, 9: 0x2000}
	if len(got) != len(want) {
		t.Fatalf("ParseAuxv = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("ParseAuxv[%d] = %#x, want %#x", k, got[k], v)
		}
	}
	if got := ParseAuxv([]byte{1, 2, 3}); len(got) != 0 {
		t.Errorf("ParseAuxv(short) = %v, want empty", got)
	}
}

func TestLibraryListSynthetic(t *testing.T) {
	mainLM := fmt.Sprintf("0x%x", lmAddr(0))
	lib := func(i int, name string, lAddr, lLd, lmid uint64) string {
		return fmt.Sprintf(`<library name="%s" lm="0x%x" l_addr="0x%x" l_ld="0x%x" lmid="0x%x"/>`, name, lmAddr(i), lAddr, lLd, lmid)
	}
	tests := []struct {
		name      string
		libs      []synthLib
		withDebug bool
		rDebug    uint64
		want      string
		wantErr   error
	}{
		{
			name: "main program and libraries",
			libs: []synthLib{
				{name: ""},
				{name: "linux-vdso.so.1", lAddr: 0x7fff0000, lLd: 0x7fff0300},
				{name: "/lib/x86_64-linux-gnu/libm.so.6", lAddr: 0x7f0000001000, lLd: 0x7f0000005000},
				{name: ""},
				{name: "/lib64/ld-linux-x86-64.so.2", lAddr: 0x7f0000100000, lLd: 0x7f0000120000},
			},
			withDebug: true, rDebug: imgRDebug,
			want: `<library-list-svr4 version="1.0" main-lm="` + mainLM + `">` +
				lib(1, "linux-vdso.so.1", 0x7fff0000, 0x7fff0300, imgRDebug) +
				lib(2, "/lib/x86_64-linux-gnu/libm.so.6", 0x7f0000001000, 0x7f0000005000, imgRDebug) +
				lib(4, "/lib64/ld-linux-x86-64.so.2", 0x7f0000100000, 0x7f0000120000, imgRDebug) +
				`</library-list-svr4>`,
		},
		{
			name:      "dynamic linker has not run yet",
			libs:      []synthLib{{name: ""}, {name: "/lib/libc.so.6"}},
			withDebug: true, rDebug: 0,
			want: `<library-list-svr4 version="1.0"></library-list-svr4>`,
		},
		{
			name:      "no DT_DEBUG",
			libs:      []synthLib{{name: ""}},
			withDebug: false,
			wantErr:   ErrNoDynamicLinker,
		},
		{
			name: "corrupted l_prev stops the walk",
			libs: []synthLib{
				{name: ""},
				{name: "/lib/a.so", lAddr: 0x1000},
				{name: "/lib/b.so", lAddr: 0x2000, corruptPrev: true},
				{name: "/lib/c.so", lAddr: 0x3000},
			},
			withDebug: true, rDebug: imgRDebug,
			want: `<library-list-svr4 version="1.0" main-lm="` + mainLM + `">` +
				lib(1, "/lib/a.so", 0x1000, 0, imgRDebug) + `</library-list-svr4>`,
		},
		{
			name: "second namespace",
			libs: []synthLib{
				{name: ""},
				{name: "/lib/a.so", lAddr: 0x1000},
				{name: "/lib/b.so", lAddr: 0x2000, namespaceTwo: true},
				{name: "/lib/c.so", lAddr: 0x3000, namespaceTwo: true},
			},
			withDebug: true, rDebug: imgRDebug,
			want: `<library-list-svr4 version="1.0" main-lm="` + mainLM + `">` +
				lib(1, "/lib/a.so", 0x1000, 0, imgRDebug) +
				lib(2, "/lib/b.so", 0x2000, 0, imgRDebug2) +
				lib(3, "/lib/c.so", 0x3000, 0, imgRDebug2) + `</library-list-svr4>`,
		},
		{
			name:      "names are XML-escaped",
			libs:      []synthLib{{name: ""}, {name: `/tmp/a&b<"c'>.so`}},
			withDebug: true, rDebug: imgRDebug,
			want: `<library-list-svr4 version="1.0" main-lm="` + mainLM + `">` +
				lib(1, `/tmp/a&amp;b&lt;&quot;c&apos;&gt;.so`, 0, 0, imgRDebug) + `</library-list-svr4>`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem, auxv := buildImage(tt.libs, tt.withDebug, tt.rDebug)
			got, err := LibraryListSVR4(mem, auxv)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LibraryListSVR4: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("document:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestLibraryListBadInputs(t *testing.T) {
	mem, auxv := buildImage([]synthLib{{name: ""}}, true, imgRDebug)
	tests := []struct {
		name string
		auxv []byte
	}{
		{"empty auxv", nil},
		{"no AT_PHNUM", makeAuxv(map[uint64]uint64{atPhdr: imgPhdr})},
		{"phdr not mapped", makeAuxv(map[uint64]uint64{atPhdr: 0x10, atPhnum: 3})},
		{"huge phnum", makeAuxv(map[uint64]uint64{atPhdr: imgPhdr, atPhnum: 1 << 40})},
	}
	for _, tt := range tests {
		if _, err := LibraryListSVR4(mem, tt.auxv); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
	// Without PT_DYNAMIC (only the PT_PHDR entry is visible).
	if _, err := LibraryListSVR4(mem, makeAuxv(map[uint64]uint64{atPhdr: imgPhdr, atPhnum: 1})); !errors.Is(err, ErrNoDynamicLinker) {
		t.Errorf("no PT_DYNAMIC: error = %v, want ErrNoDynamicLinker", err)
	}
	_ = auxv
}

func TestAnnex(t *testing.T) {
	libs := []synthLib{{name: ""}, {name: "/lib/a.so", lAddr: 0x1000}, {name: "/lib/b.so", lAddr: 0x2000}}
	mem, auxv := buildImage(libs, true, imgRDebug)
	annex := fmt.Sprintf("lmid=%x;start=%x;prev=%x;", imgRDebug, lmAddr(2), lmAddr(1))
	got, err := LibraryListSVR4Annex(mem, auxv, annex)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`<library-list-svr4 version="1.0"><library name="/lib/b.so" lm="0x%x" l_addr="0x2000" l_ld="0x0" lmid="0x%x"/></library-list-svr4>`, lmAddr(2), uint64(imgRDebug))
	if string(got) != want {
		t.Errorf("annex read:\n got %s\nwant %s", got, want)
	}
	full, err := LibraryListSVR4Annex(mem, auxv, "")
	if err != nil || !strings.Contains(string(full), "/lib/a.so") {
		t.Errorf("empty annex: %s, %v", full, err)
	}
	if _, err := LibraryListSVR4Annex(mem, auxv, "start=zz"); err == nil {
		t.Error("bad annex accepted")
	}
}

// FuzzLibraryList walks random memory images: it must never panic and must
// terminate.
func FuzzLibraryList(f *testing.F) {
	mem, _ := buildImage([]synthLib{{name: ""}, {name: "/lib/a.so"}, {name: "/lib/b.so", namespaceTwo: true}}, true, imgRDebug)
	f.Add(mem.data, uint64(3))
	f.Add(make([]byte, 64), uint64(1))
	f.Fuzz(func(t *testing.T, image []byte, phnum uint64) {
		m := &memImage{base: imgBase, data: image}
		auxv := makeAuxv(map[uint64]uint64{atPhdr: imgPhdr, atPhnum: phnum})
		doc, err := LibraryListSVR4(m, auxv)
		if err != nil {
			return
		}
		if !strings.HasPrefix(string(doc), `<library-list-svr4 version="1.0"`) || !strings.HasSuffix(string(doc), "</library-list-svr4>") {
			t.Fatalf("malformed document %q", doc)
		}
	})
}
