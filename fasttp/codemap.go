package fasttp

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Function is a function symbol's code: Size bytes from Addr, and up to
// ShortCodeLen bytes after them (a jump near the end covers the next
// bytes, a short jump reaches padding there); Before holds up to
// ShortBackLen bytes before Addr in the same segment.
type Function struct {
	Addr, Size uint64
	Code       []byte
	Before     []byte
}

// ELFFunctions returns the code of every sized function symbol of f in
// an executable section (the full symbol table's and the dynamic one's),
// at base plus its link address, sorted by address, without duplicate
// addresses. The code is read from the loadable segment holding it, so
// the bytes after a function are what the process has there.
func ELFFunctions(f *elf.File, base uint64) ([]Function, error) {
	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, err
	}
	dyn, _ := f.DynamicSymbols()
	seen := map[uint64]bool{}
	segs := map[*elf.Prog][]byte{} // each segment read once
	var out []Function
	for _, s := range append(syms, dyn...) {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Section == elf.SHN_UNDEF || seen[s.Value] ||
			int(s.Section) >= len(f.Sections) || f.Sections[s.Section].Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		p := segmentOf(f, s.Value)
		if p == nil {
			continue
		}
		if segs[p] == nil {
			data := make([]byte, p.Filesz)
			if _, err := p.ReadAt(data, 0); err != nil {
				continue
			}
			segs[p] = data
		}
		data := segs[p]
		off := s.Value - p.Vaddr
		if off+s.Size > uint64(len(data)) {
			continue
		}
		seen[s.Value] = true
		end := min(uint64(len(data)), off+s.Size+ShortCodeLen)
		from := off - min(off, ShortBackLen)
		out = append(out, Function{Addr: base + s.Value, Size: s.Size, Code: data[off:end:end], Before: data[from:off:off]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// segmentOf returns the PT_LOAD segment whose file bytes hold addr.
func segmentOf(f *elf.File, addr uint64) *elf.Prog {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return p
		}
	}
	return nil
}

// DecodeFunction decodes fn's instructions in order from its start; it
// stops at the first byte sequence it cannot decode (data in code, or an
// instruction the decoder refuses), returning what came before and that
// address.
func DecodeFunction(fn Function) (insns []Insn, stuck uint64, stuckErr error) {
	for off := uint64(0); off < fn.Size; {
		in, err := DecodeInsn(fn.Code[off:], fn.Addr+off)
		if err != nil {
			return insns, fn.Addr + off, err
		}
		insns = append(insns, in)
		off += uint64(in.Len)
	}
	return insns, 0, nil
}

// codeMap answers CodeOracle questions about one process: addr starts
// an instruction when the linear decode of the function symbol holding
// it (in the ELF file mapped there) has an instruction there. It also
// tells a function's entry from the targets of the function's direct
// branches (pushEntry). The memory map (read again when an address is in
// none of its files), files and decoded functions are cached; a file
// without symbols vouches for nothing.
type codeMap struct {
	pid   int
	mu    sync.Mutex
	maps  []fileMapping
	files map[string][]Function // by path, at link addresses
	facts map[funcKey]funcFacts // each decoded function's

	// Addresses queued by prepare, which warm reads in the background
	// (warming while it runs).
	qmu     sync.Mutex
	queue   []uint64
	warming bool
}

// funcKey names a function: its file and link address.
type funcKey struct {
	path string
	addr uint64
}

// funcFacts is what the linear decode of a function shows, at link
// addresses.
type funcFacts struct {
	entry   uint64
	starts  map[uint64]bool // instruction starts
	targets map[uint64]bool // the function's direct branches' targets
}

// fileMapping is a mapping of a file in the process.
type fileMapping struct {
	start, end, off uint64
	path            string
	bias            uint64 // address minus link address
	biasKnown       bool   // bias was computed (biasOK says whether it could be)
	biasOK          bool
}

func newCodeMap(pid int) *codeMap {
	return &codeMap{pid: pid, files: map[string][]Function{}, facts: map[funcKey]funcFacts{}}
}

// prepare queues addr to be looked up in the background (warm): its
// file's symbols read, its function decoded, while gdb still downloads
// the tracepoints, so that the placements at QTStart find them cached.
// It returns at once.
func (m *codeMap) prepare(addr uint64) {
	m.qmu.Lock()
	m.queue = append(m.queue, addr)
	start := !m.warming
	m.warming = true
	m.qmu.Unlock()
	if start {
		go m.warm()
	}
}

// warm looks the queued addresses up until the queue is empty.
func (m *codeMap) warm() {
	for {
		m.qmu.Lock()
		q := m.queue
		m.queue = nil
		m.warming = len(q) > 0
		m.qmu.Unlock()
		if len(q) == 0 {
			return
		}
		for _, addr := range q {
			m.mu.Lock()
			m.factsAt(addr)
			m.mu.Unlock()
		}
	}
}

// insnStart reports whether addr is known to start an instruction.
func (m *codeMap) insnStart(addr uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, v, ok := m.factsAt(addr)
	return ok && f.starts[v]
}

// pushEntry reports whether addr is a function symbol's entry and no
// direct branch of that function targets next (LeadSites).
func (m *codeMap) pushEntry(addr, next uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, v, ok := m.factsAt(addr)
	return ok && v == f.entry && !f.targets[v+(next-addr)]
}

// factsAt returns the facts of the function symbol holding addr, and
// addr's link address.
func (m *codeMap) factsAt(addr uint64) (funcFacts, uint64, bool) {
	path, bias, ok := m.mappingOf(addr)
	if !ok {
		return funcFacts{}, 0, false
	}
	funcs, ok := m.files[path]
	if !ok {
		funcs = readFunctions(path)
		m.files[path] = funcs
	}
	v := addr - bias
	i := sort.Search(len(funcs), func(i int) bool { return funcs[i].Addr > v }) - 1
	for ; i >= 0 && v-funcs[i].Addr < 1<<20; i-- {
		fn := funcs[i]
		if v >= fn.Addr+fn.Size {
			continue
		}
		key := funcKey{path, fn.Addr}
		f, ok := m.facts[key]
		if !ok {
			f = decodeFacts(fn)
			m.facts[key] = f
		}
		return f, v, true
	}
	return funcFacts{}, 0, false
}

// decodeFacts decodes fn linearly.
func decodeFacts(fn Function) funcFacts {
	f := funcFacts{entry: fn.Addr, starts: map[uint64]bool{}, targets: map[uint64]bool{}}
	insns, _, _ := DecodeFunction(fn)
	for _, in := range insns {
		f.starts[in.Addr] = true
		if in.RelSize != 0 {
			f.targets[in.Target] = true
		}
	}
	return f
}

// readFunctions returns the function symbols of the ELF file at path
// (nil when it cannot be read).
func readFunctions(path string) []Function {
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	funcs, _ := ELFFunctions(f, 0)
	return funcs
}

// mappingOf finds the file mapped at addr and the load bias of that
// mapping, reading the memory map again when addr is in none cached.
func (m *codeMap) mappingOf(addr uint64) (path string, bias uint64, ok bool) {
	find := func() *fileMapping {
		for i := range m.maps {
			if mp := &m.maps[i]; addr >= mp.start && addr < mp.end {
				return mp
			}
		}
		return nil
	}
	mp := find()
	if mp == nil {
		m.maps = readFileMappings(m.pid)
		if mp = find(); mp == nil {
			return "", 0, false
		}
	}
	if !mp.biasKnown {
		mp.bias, mp.biasOK = loadBias(mp.path, mp.start, mp.off)
		mp.biasKnown = true
	}
	return mp.path, mp.bias, mp.biasOK
}

// readFileMappings returns the file mappings in /proc/PID/maps.
func readFileMappings(pid int) []fileMapping {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil
	}
	var out []fileMapping
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			out = append(out, fileMapping{start: start, end: end, off: off, path: strings.Join(f[5:], " ")})
		}
	}
	return out
}

// loadBias is the bias of the file at path mapped at start from file
// offset off: start minus the link address of that offset.
func loadBias(path string, start, off uint64) (uint64, bool) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off&^0xfff && off < p.Off+p.Filesz {
			return start - (p.Vaddr + off - p.Off), true
		}
	}
	return 0, false
}

// Prepare starts, in the background, the work placing a jump at addr
// will need when gdb defines a fast tracepoint there, long before QTStart
// places it: the shared lanes mapped and prepared (prepareLanes), and,
// where the placement asks the code map (usesCodeMap: x86-64's punned
// shapes), its file's symbol table read and its function decoded (a
// millisecond for a large program). It returns at once.
func (in *Installer) Prepare(addr uint64) {
	in.prepareLanes()
	if usesCodeMap {
		in.codeMap().prepare(addr)
	}
}

// codeMap returns the process's code map, made on first use.
func (in *Installer) codeMap() *codeMap {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.code == nil {
		in.code = newCodeMap(in.proc.Pid())
	}
	return in.code
}
