// Package solib builds the qXfer:libraries-svr4:read document: the list of
// shared libraries the dynamic linker has loaded into a 64-bit SVR4 (Linux)
// inferior, read from the inferior's memory.
//
// The walk follows what the dynamic linker publishes: the auxiliary vector
// gives the program headers (AT_PHDR, AT_PHNUM); PT_PHDR gives the load bias
// and PT_DYNAMIC the in-memory dynamic section; its DT_DEBUG entry points to
// struct r_debug, whose r_map heads the doubly linked list of struct
// link_map (l_addr, l_name, l_ld, l_next, l_prev). With r_version >= 2,
// r_debug_extended.r_next chains the other link-map namespaces (dlmopen).
//
// As gdbserver does: the first link_map of the base namespace (the main
// program) is not listed but reported as main-lm; entries with an empty
// name are skipped; each library carries lm, l_addr, l_ld and lmid (the
// address of its namespace's r_debug); the walk stops at a corrupted list
// (l_prev not pointing back). A DT_DEBUG that is still 0 (the dynamic linker
// has not run yet) gives an empty list; an executable without PT_DYNAMIC or
// DT_DEBUG (static) gives ErrNoDynamicLinker, which gdbserver reports as E01
// and which makes gdb fall back to other means.
package solib

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MemoryReader reads inferior memory. It returns how many bytes it read; a
// short count comes with an error.
type MemoryReader interface {
	ReadMemory(addr uint64, buf []byte) (int, error)
}

// Auxiliary vector entry types used here.
const (
	atNull  = 0
	atPhdr  = 3
	atPhnum = 5
)

// ELF constants used here.
const (
	ptDynamic = 2
	ptPhdr    = 6
	dtNull    = 0
	dtDebug   = 21

	phdrSize = 56 // sizeof(Elf64_Phdr)
	dynSize  = 16 // sizeof(Elf64_Dyn)
)

// Offsets in the 64-bit struct r_debug / r_debug_extended and link_map.
const (
	rVersionOffset = 0
	rMapOffset     = 8
	rNextOffset    = 40
	lAddrOffset    = 0
	lNameOffset    = 8
	lLdOffset      = 16
	lNextOffset    = 24
	lPrevOffset    = 32
)

// Limits that keep a corrupted or hostile memory image from looping or
// allocating without bound.
const (
	maxPhnum      = 1024
	maxDynEntries = 4096
	maxLibraries  = 65536
	maxNamespaces = 256
	maxNameLen    = 4096
)

// ErrNoDynamicLinker is returned when the program has no PT_DYNAMIC segment,
// PT_PHDR or DT_DEBUG entry (for example a static executable).
var ErrNoDynamicLinker = errors.New("solib: no dynamic section with DT_DEBUG (static executable?)")

// ParseAuxv decodes a 64-bit little-endian auxiliary vector (as read from
// /proc/PID/auxv) into a map from type to value. It stops at AT_NULL or at
// the end of the data; a trailing partial entry is ignored. For repeated
// types the first value wins.
func ParseAuxv(b []byte) map[uint64]uint64 {
	m := make(map[uint64]uint64)
	for len(b) >= 16 {
		typ := binary.LittleEndian.Uint64(b)
		val := binary.LittleEndian.Uint64(b[8:])
		b = b[16:]
		if typ == atNull {
			break
		}
		if _, seen := m[typ]; !seen {
			m[typ] = val
		}
	}
	return m
}

// Library is one entry of the SVR4 library list.
type Library struct {
	Name  string // l_name
	LM    uint64 // address of the struct link_map
	LAddr uint64 // l_addr: load bias
	LLd   uint64 // l_ld: address of the library's dynamic section
	LMID  uint64 // address of the namespace's r_debug
}

// List is the content of a library-list-svr4 document.
type List struct {
	MainLM    uint64 // link_map of the main program; 0 when unknown
	Libraries []Library
}

// reader wraps a MemoryReader with exact-size reads.
type reader struct{ mem MemoryReader }

// read fills buf from addr or fails.
func (r reader) read(addr uint64, buf []byte) error {
	n, err := r.mem.ReadMemory(addr, buf)
	if err != nil {
		return fmt.Errorf("solib: read %d bytes at %#x: %w", len(buf), addr, err)
	}
	if n != len(buf) {
		return fmt.Errorf("solib: read %d bytes at %#x: short read of %d", len(buf), addr, n)
	}
	return nil
}

// u64 reads a little-endian 64-bit word.
func (r reader) u64(addr uint64) (uint64, error) {
	var b [8]byte
	if err := r.read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// u32 reads a little-endian 32-bit word.
func (r reader) u32(addr uint64) (uint32, error) {
	var b [4]byte
	if err := r.read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// cString reads a NUL-terminated string of at most maxNameLen bytes; it
// returns what it could read when memory ends first. Reads are split on
// 256-byte boundaries so that none crosses into an unmapped page.
func (r reader) cString(addr uint64) string {
	const chunkSize = 256
	var out []byte
	chunk := make([]byte, chunkSize)
	for len(out) < maxNameLen {
		at := addr + uint64(len(out))
		want := chunkSize - int(at%chunkSize)
		n, _ := r.mem.ReadMemory(at, chunk[:want])
		if n < 0 || n > want {
			n = 0
		}
		for i := 0; i < n; i++ {
			if chunk[i] == 0 {
				return string(append(out, chunk[:i]...))
			}
		}
		out = append(out, chunk[:n]...)
		if n < want {
			break
		}
	}
	if len(out) > maxNameLen {
		out = out[:maxNameLen]
	}
	return string(out)
}

// FindRDebug returns the address of struct r_debug, or 0 when DT_DEBUG has
// not been filled in yet. It fails with ErrNoDynamicLinker when the program
// has no PT_PHDR, PT_DYNAMIC or DT_DEBUG.
func FindRDebug(mem MemoryReader, auxv []byte) (uint64, error) {
	r := reader{mem}
	aux := ParseAuxv(auxv)
	phdrAddr, phnum := aux[atPhdr], aux[atPhnum]
	if phdrAddr == 0 || phnum == 0 {
		return 0, fmt.Errorf("solib: auxv lacks AT_PHDR or AT_PHNUM (phdr %#x, phnum %d)", phdrAddr, phnum)
	}
	if phnum > maxPhnum {
		return 0, fmt.Errorf("solib: implausible AT_PHNUM %d", phnum)
	}
	phdrs := make([]byte, phnum*phdrSize)
	if err := r.read(phdrAddr, phdrs); err != nil {
		return 0, fmt.Errorf("solib: program headers: %w", err)
	}
	le := binary.LittleEndian
	var bias, dynVaddr uint64
	havePhdr, haveDynamic := false, false
	for i := uint64(0); i < phnum; i++ {
		ph := phdrs[i*phdrSize : (i+1)*phdrSize]
		typ, vaddr := le.Uint32(ph[0:]), le.Uint64(ph[16:])
		switch {
		case typ == ptPhdr && !havePhdr:
			bias, havePhdr = phdrAddr-vaddr, true
		case typ == ptDynamic && !haveDynamic:
			dynVaddr, haveDynamic = vaddr, true
		}
	}
	if !havePhdr || !haveDynamic {
		return 0, ErrNoDynamicLinker
	}
	dynAddr := dynVaddr + bias
	var entry [dynSize]byte
	for i := uint64(0); i < maxDynEntries; i++ {
		if err := r.read(dynAddr+i*dynSize, entry[:]); err != nil {
			return 0, fmt.Errorf("solib: dynamic section: %w", err)
		}
		switch le.Uint64(entry[0:]) {
		case dtDebug:
			return le.Uint64(entry[8:]), nil
		case dtNull:
			return 0, ErrNoDynamicLinker
		}
	}
	return 0, fmt.Errorf("solib: dynamic section at %#x has no DT_NULL in %d entries", dynAddr, maxDynEntries)
}

// ReadList reads the library list: every namespace reachable from the
// r_debug found through auxv.
func ReadList(mem MemoryReader, auxv []byte) (*List, error) {
	rDebug, err := FindRDebug(mem, auxv)
	if err != nil {
		return nil, err
	}
	list := &List{}
	if rDebug == 0 {
		return list, nil
	}
	r := reader{mem}
	seen := make(map[uint64]bool)
	for ns := 0; rDebug != 0 && ns < maxNamespaces && !seen[rDebug]; ns++ {
		seen[rDebug] = true
		version, err := r.u32(rDebug + rVersionOffset)
		if err != nil || version < 1 {
			break
		}
		lm, err := r.u64(rDebug + rMapOffset)
		if err != nil {
			break
		}
		var prev uint64
		if ns == 0 && lm != 0 {
			// The first entry of the base namespace is the main program.
			list.MainLM = lm
			prev = lm
			if lm, err = r.u64(lm + lNextOffset); err != nil {
				break
			}
		}
		list.Libraries = r.walkLinkMap(list.Libraries, rDebug, lm, prev)
		if version < 2 {
			break
		}
		if rDebug, err = r.u64(rDebug + rNextOffset); err != nil {
			break
		}
	}
	return list, nil
}

// ReadListFrom reads one namespace starting at link_map start whose
// predecessor is prev (the "start", "prev" and "lmid" annex of gdb's
// augmented libraries-svr4 read).
func ReadListFrom(mem MemoryReader, lmid, start, prev uint64) *List {
	r := reader{mem}
	return &List{Libraries: r.walkLinkMap(nil, lmid, start, prev)}
}

// walkLinkMap appends the named entries of the list starting at lm.
func (r reader) walkLinkMap(libs []Library, lmid, lm, prev uint64) []Library {
	for count := 0; lm != 0 && count < maxLibraries; count++ {
		var fields [40]byte
		if err := r.read(lm, fields[:]); err != nil {
			break
		}
		le := binary.LittleEndian
		lAddr := le.Uint64(fields[lAddrOffset:])
		lName := le.Uint64(fields[lNameOffset:])
		lLd := le.Uint64(fields[lLdOffset:])
		lNext := le.Uint64(fields[lNextOffset:])
		lPrev := le.Uint64(fields[lPrevOffset:])
		if lPrev != prev {
			break // corrupted list, as gdbserver's check
		}
		if name := r.cString(lName); name != "" {
			libs = append(libs, Library{Name: name, LM: lm, LAddr: lAddr, LLd: lLd, LMID: lmid})
		}
		prev, lm = lm, lNext
	}
	return libs
}

// hexAddr formats an address as gdbserver does: "0x" and lower-case hex.
func hexAddr(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// xmlEscape escapes text for an XML attribute value.
func xmlEscape(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '&':
			sb.WriteString("&amp;")
		case '<':
			sb.WriteString("&lt;")
		case '>':
			sb.WriteString("&gt;")
		case '"':
			sb.WriteString("&quot;")
		case '\'':
			sb.WriteString("&apos;")
		default:
			if c < 0x20 {
				fmt.Fprintf(&sb, "&#%d;", c)
			} else {
				sb.WriteByte(c)
			}
		}
	}
	return sb.String()
}

// XML renders the list as a library-list-svr4 document.
func (l *List) XML() []byte {
	var sb strings.Builder
	sb.WriteString(`<library-list-svr4 version="1.0"`)
	if l.MainLM != 0 {
		sb.WriteString(` main-lm="` + hexAddr(l.MainLM) + `"`)
	}
	sb.WriteString(">")
	for _, lib := range l.Libraries {
		fmt.Fprintf(&sb, `<library name="%s" lm="%s" l_addr="%s" l_ld="%s" lmid="%s"/>`,
			xmlEscape(lib.Name), hexAddr(lib.LM), hexAddr(lib.LAddr), hexAddr(lib.LLd), hexAddr(lib.LMID))
	}
	sb.WriteString("</library-list-svr4>")
	return []byte(sb.String())
}

// LibraryListSVR4 returns the qXfer:libraries-svr4:read document for the
// process whose memory is mem and whose auxiliary vector is auxv.
func LibraryListSVR4(mem MemoryReader, auxv []byte) ([]byte, error) {
	list, err := ReadList(mem, auxv)
	if err != nil {
		return nil, fmt.Errorf("solib: library list: %w", err)
	}
	return list.XML(), nil
}

// ParseAnnex parses the augmented read annex "lmid=X;start=Y;prev=Z;" (hex
// values, any order, unknown keys ignored).
func ParseAnnex(annex string) (lmid, start, prev uint64, err error) {
	for _, field := range strings.Split(annex, ";") {
		if field == "" {
			continue
		}
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			return 0, 0, 0, fmt.Errorf("solib: annex field %q has no '='", field)
		}
		var dst *uint64
		switch key {
		case "lmid":
			dst = &lmid
		case "start":
			dst = &start
		case "prev":
			dst = &prev
		default:
			continue
		}
		v, perr := strconv.ParseUint(val, 16, 64)
		if perr != nil {
			return 0, 0, 0, fmt.Errorf("solib: annex field %q: %w", field, perr)
		}
		*dst = v
	}
	return lmid, start, prev, nil
}

// LibraryListSVR4Annex is LibraryListSVR4 for a read with an annex (gdb sends
// one only when the stub announced augmented-libraries-svr4-read+). With a
// non-zero start it lists that namespace from start on; otherwise it is
// LibraryListSVR4.
func LibraryListSVR4Annex(mem MemoryReader, auxv []byte, annex string) ([]byte, error) {
	lmid, start, prev, err := ParseAnnex(annex)
	if err != nil {
		return nil, err
	}
	if start == 0 {
		return LibraryListSVR4(mem, auxv)
	}
	return ReadListFrom(mem, lmid, start, prev).XML(), nil
}
