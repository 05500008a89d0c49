// Package sdt reads SystemTap SDT (USDT) probe markers, the
// .note.stapsdt notes <sys/sdt.h> puts in programs and libraries
// (glibc, libstdc++, Python, PostgreSQL, ...): each names a provider and
// a probe, the address of the probe's nop, its semaphore (a counter the
// program checks before computing costly arguments; 0 when there is
// none) and the probe's argument spec ("-4@%eax 8@-8(%rbp) 4@$5"). The
// stub serves them to gdb as static tracepoint markers.
package sdt

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Marker is one probe as the ELF file has it (link-time addresses, already
// adjusted for a prelinked .stapsdt.base).
type Marker struct {
	Provider, Name string
	PC             uint64 // the probe's nop
	Semaphore      uint64 // 0: none
	Args           string // the argument spec
}

// ID is the marker's id for gdb: "provider:name".
func (m Marker) ID() string { return m.Provider + ":" + m.Name }

// ntStapSDT is the note type of SDT probes.
const ntStapSDT = 3

// ParseNotes decodes the NT_STAPSDT notes in data (the contents of a
// .note.stapsdt section, 64-bit little-endian). base is the address of the
// file's .stapsdt.base section (0 when it has none): probe addresses were
// recorded relative to the address that section had at link time, which
// each note carries.
func ParseNotes(data []byte, base uint64) ([]Marker, error) {
	var out []Marker
	le := binary.LittleEndian
	for len(data) > 0 {
		if len(data) < 12 {
			return out, errors.New("sdt: truncated note header")
		}
		namesz, descsz, typ := le.Uint32(data), le.Uint32(data[4:]), le.Uint32(data[8:])
		nameEnd := 12 + align4(uint64(namesz))
		descEnd := nameEnd + align4(uint64(descsz))
		if nameEnd > uint64(len(data)) || descEnd > uint64(len(data)) || uint64(nameEnd)+uint64(descsz) > uint64(len(data)) {
			return out, errors.New("sdt: truncated note")
		}
		name := string(bytes.TrimRight(data[12:12+namesz], "\x00"))
		desc := data[nameEnd : nameEnd+uint64(descsz)]
		data = data[descEnd:]
		if typ != ntStapSDT || name != "stapsdt" {
			continue
		}
		m, err := parseDesc(desc, base)
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// parseDesc decodes one probe descriptor: pc, base and semaphore (8 bytes
// each), then provider, name and arguments, NUL-terminated.
func parseDesc(desc []byte, base uint64) (Marker, error) {
	if len(desc) < 24 {
		return Marker{}, errors.New("sdt: probe descriptor too short")
	}
	le := binary.LittleEndian
	pc, linkBase, sem := le.Uint64(desc), le.Uint64(desc[8:]), le.Uint64(desc[16:])
	strs := bytes.SplitN(desc[24:], []byte{0}, 4)
	if len(strs) < 3 {
		return Marker{}, errors.New("sdt: probe descriptor without provider, name and arguments")
	}
	if base != 0 {
		pc += base - linkBase
		if sem != 0 {
			sem += base - linkBase
		}
	}
	return Marker{Provider: string(strs[0]), Name: string(strs[1]), Args: string(strs[2]), PC: pc, Semaphore: sem}, nil
}

// Read returns the markers of an ELF file.
func Read(f *elf.File) ([]Marker, error) {
	sec := f.Section(".note.stapsdt")
	if sec == nil {
		return nil, nil
	}
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("sdt: %v %v files are not supported", f.Class, f.Data)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("sdt: reading .note.stapsdt: %w", err)
	}
	var base uint64
	if b := f.Section(".stapsdt.base"); b != nil {
		base = b.Addr
	}
	return ParseNotes(data, base)
}

// Located is a marker at its address in a running process.
type Located struct {
	Marker
	File      string // the ELF file it comes from
	Addr      uint64 // the probe's nop in the process
	Semaphore uint64 // the semaphore in the process (0: none)
}

// InProcess returns the markers of every ELF file process pid maps
// (its program and loaded libraries), at their addresses there.
func InProcess(pid int) ([]Located, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Located
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		start, offset, path, ok := mapsLine(sc.Text())
		if !ok || offset != 0 || seen[path] || !strings.HasPrefix(path, "/") {
			continue
		}
		seen[path] = true
		out = append(out, fileMarkers(path, start)...)
	}
	return out, sc.Err()
}

// mapsLine parses a /proc/PID/maps line: start address, file offset and
// path.
func mapsLine(line string) (start, offset uint64, path string, ok bool) {
	f := strings.Fields(line)
	if len(f) < 6 {
		return 0, 0, "", false
	}
	lo, _, _ := strings.Cut(f[0], "-")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	offset, err2 := strconv.ParseUint(f[2], 16, 64)
	return start, offset, strings.Join(f[5:], " "), err1 == nil && err2 == nil
}

// fileMarkers returns the markers of the ELF file at path, mapped (its
// first page) at start; nothing for files that are not ELF or have none.
func fileMarkers(path string, start uint64) []Located {
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	ms, err := Read(f)
	if err != nil || len(ms) == 0 {
		return nil
	}
	var bias uint64
	if f.Type == elf.ET_DYN {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD {
				bias = start - p.Vaddr&^(max(p.Align, 1)-1)
				break
			}
		}
	}
	out := make([]Located, 0, len(ms))
	for _, m := range ms {
		l := Located{Marker: m, File: path, Addr: m.PC + bias}
		if m.Semaphore != 0 {
			l.Semaphore = m.Semaphore + bias
		}
		out = append(out, l)
	}
	return out
}
