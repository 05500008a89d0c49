package threaddb

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"
)

const machineX8664 = elf.EM_X86_64

// libcFile is the symbol table of the object holding glibc's descriptors
// (libc.so.6, or a static executable) and the means to read the bytes a
// symbol names. Dynamic symbols come first; the full symbol table, when the
// file has one, fills in names the dynamic table lacks (a static
// executable has only .symtab).
type libcFile struct {
	f              *elf.File
	closer         io.Closer
	order          binary.ByteOrder
	machine        elf.Machine
	firstLoadVaddr uint64 // page-aligned p_vaddr of the first PT_LOAD
	symbols        map[string]elf.Symbol
}

// openLibc opens the ELF file at path.
func openLibc(path string) (*libcFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening libc: %w", err)
	}
	lib, err := readLibc(fh)
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("libc %s: %w", path, err)
	}
	lib.closer = fh
	return lib, nil
}

// readLibc parses an ELF image and indexes its dynamic symbols.
func readLibc(r io.ReaderAt) (*libcFile, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("parsing ELF: %w", err)
	}
	dynsyms, dynErr := f.DynamicSymbols()
	syms, symErr := f.Symbols()
	if dynErr != nil && symErr != nil {
		return nil, fmt.Errorf("reading symbols: %w", dynErr)
	}
	lib := &libcFile{f: f, order: f.ByteOrder, machine: f.Machine, symbols: make(map[string]elf.Symbol)}
	for _, s := range append(dynsyms, syms...) {
		if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE {
			continue
		}
		// Versioned names come back bare from debug/elf; keep the first.
		if _, dup := lib.symbols[s.Name]; !dup {
			lib.symbols[s.Name] = s
		}
	}
	found := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			align := p.Align
			if align == 0 || align&(align-1) != 0 {
				align = 1
			}
			lib.firstLoadVaddr = p.Vaddr &^ (align - 1)
			found = true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("no PT_LOAD segment")
	}
	return lib, nil
}

func (l *libcFile) close() {
	if l.closer != nil {
		l.closer.Close()
	}
}

// symbolAddress returns the link-time address of a defined dynamic symbol.
func (l *libcFile) symbolAddress(name string) (uint64, error) {
	s, ok := l.symbols[name]
	if !ok {
		return 0, fmt.Errorf("symbol %s not in the dynamic symbol table", name)
	}
	return s.Value, nil
}

// symbolBytes returns the size bytes at symbol name's address, read from
// the section holding it in the file.
func (l *libcFile) symbolBytes(name string, size int) ([]byte, error) {
	s, ok := l.symbols[name]
	if !ok {
		return nil, fmt.Errorf("symbol %s not in the dynamic symbol table", name)
	}
	if s.Size != 0 && s.Size < uint64(size) {
		return nil, fmt.Errorf("symbol %s is %d bytes, want %d", name, s.Size, size)
	}
	for _, sec := range l.f.Sections {
		if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		if s.Value < sec.Addr || s.Value-sec.Addr >= sec.Size || sec.Size-(s.Value-sec.Addr) < uint64(size) {
			continue
		}
		buf := make([]byte, size)
		if _, err := sec.ReadAt(buf, int64(s.Value-sec.Addr)); err != nil {
			return nil, fmt.Errorf("reading symbol %s: %w", name, err)
		}
		return buf, nil
	}
	return nil, fmt.Errorf("symbol %s at %#x is not in a loaded section with file contents", name, s.Value)
}

// descriptor reads and decodes the 12-byte descriptor symbol name.
func (l *libcFile) descriptor(name string) (Descriptor, error) {
	b, err := l.symbolBytes(name, descriptorSize)
	if err != nil {
		return Descriptor{}, err
	}
	d, err := ParseDescriptor(b, l.order)
	if err != nil {
		return Descriptor{}, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// scalar reads the 32-bit constant symbol name.
func (l *libcFile) scalar(name string) (uint32, error) {
	b, err := l.symbolBytes(name, 4)
	if err != nil {
		return 0, err
	}
	return l.order.Uint32(b), nil
}

// FindLibc finds the object of process pid that holds glibc's thread_db
// descriptors: libc.so.6 when it is mapped, else the executable itself (a
// static executable has them; for a dynamic one whose libc is not loaded
// yet, NewResolver then fails with ErrUnsupported). It returns the path of
// the file (through /proc/PID/root when the process sees a different root
// than ours) and the start address of its mapping with file offset 0.
func FindLibc(pid int) (path string, base uint64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return "", 0, fmt.Errorf("finding libc: %w", err)
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	m, err := findLibcMapping(string(data), strings.TrimSuffix(exe, " (deleted)"))
	if err != nil {
		return "", 0, fmt.Errorf("finding libc of process %d: %w", pid, err)
	}
	return resolveMappedPath(pid, m.path, m.inode), m.start, nil
}

// libcMapping is the part of one /proc/PID/maps line FindLibc uses.
type libcMapping struct {
	start uint64
	inode uint64
	path  string
}

// isLibcName reports whether a mapped file's name is glibc's C library.
func isLibcName(path string) bool {
	name := path[strings.LastIndexByte(path, '/')+1:]
	return name == "libc.so.6" || (strings.HasPrefix(name, "libc-") && strings.HasSuffix(name, ".so"))
}

// findLibcMapping parses /proc/PID/maps text and returns the libc mapping
// whose file offset is 0, or if there is none the executable's (exe, when
// not empty, is the executable's path).
func findLibcMapping(maps, exe string) (libcMapping, error) {
	if m, ok := findMapping(maps, isLibcName); ok {
		return m, nil
	}
	if exe != "" {
		if m, ok := findMapping(maps, func(path string) bool { return path == exe }); ok {
			return m, nil
		}
	}
	return libcMapping{}, fmt.Errorf("no libc (or executable) mapping at file offset 0")
}

// findMapping returns the first file mapping at file offset 0 whose path
// (without a " (deleted)" suffix) is accepted by want.
func findMapping(maps string, want func(path string) bool) (libcMapping, bool) {
	for _, line := range strings.Split(maps, "\n") {
		// start-end perms offset dev inode path
		fields := strings.Fields(line)
		if len(fields) < 6 {
			continue
		}
		path := strings.TrimSuffix(strings.Join(fields[5:], " "), " (deleted)")
		if !strings.HasPrefix(path, "/") || !want(path) {
			continue
		}
		var start, end, offset, inode uint64
		if _, err := fmt.Sscanf(fields[0], "%x-%x", &start, &end); err != nil {
			continue
		}
		if _, err := fmt.Sscanf(fields[2], "%x", &offset); err != nil || offset != 0 {
			continue
		}
		if _, err := fmt.Sscanf(fields[4], "%d", &inode); err != nil {
			continue
		}
		return libcMapping{start: start, inode: inode, path: path}, true
	}
	return libcMapping{}, false
}

// resolveMappedPath returns path as we can open it: path itself when it is
// the mapped file (same inode), else the same path under /proc/PID/root.
func resolveMappedPath(pid int, path string, inode uint64) string {
	if fi, err := os.Stat(path); err == nil && statInode(fi) == inode {
		return path
	}
	return fmt.Sprintf("/proc/%d/root%s", pid, path)
}
