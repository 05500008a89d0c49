package coverage

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gotpstub/fasttp"
	"gotpstub/fasttp/a64"
)

// The AArch64 model (see the package documentation).
const (
	a64PIEBase = 0xaaaaaaaa0000 // a PIE executable under the stub, ASLR off
	a64LibBase = 0xfffff7e00000 // Debian 12's libc there
	a64Top     = 0xfffffffff000 // the top of user space (inferior's userSpaceTop)
	// a64Arena is the size of the installer's pad arenas (fasttp's
	// arenaSize), a64Reach a b's reach (fasttp's padReach): an arena is
	// used for a site when all of it lies within a64Reach.
	a64Arena = 1 << 20
	a64Reach = 1 << 27
	// a64PadLen is where the tail goes after the pad: a pad collecting
	// $regs is 992 bytes (jit.BuildJumpPadA64), rounded up.
	a64PadLen = 1024
)

// a64File computes the report of the AArch64 file f.
func a64File(path string, f *elf.File) (*Report, error) {
	base, err := loadBase(path, f, a64PIEBase, a64LibBase)
	if err != nil {
		return nil, err
	}
	funcs, source, err := a64Functions(f, base)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	guarded := btiGuarded(f)
	r := &Report{File: path, ISA: ISAA64, Functions: source, Guarded: guarded, Reasons: map[string]int{}}
	m := &a64Model{
		free:    fasttp.FreeRanges(loadRanges(f, base), 0x10000, a64Top),
		data:    dataRanges(f, base),
		guarded: guarded,
	}
	for _, fn := range funcs {
		r.a64Function(fn, m)
	}
	return r, nil
}

// a64Model is what the planning of an arm64 site depends on.
type a64Model struct {
	free    []fasttp.Range // where arenas may go, in address order
	data    []fasttp.Range // data in code ($d), in address order
	guarded bool           // the code's pages are BTI-guarded
}

// a64Function adds fn's words to r (A64 instructions are little-endian,
// even in a big-endian file).
func (r *Report) a64Function(fn fasttp.Function, m *a64Model) {
	n := min(fn.Size, uint64(len(fn.Code))) / 4
	words := make([]uint32, n)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(fn.Code[4*i:])
	}
	atomic := a64.AtomicSequence(words)
	for i, word := range words {
		addr := fn.Addr + 4*uint64(i)
		if inRanges(m.data, addr) {
			r.Data++
			continue
		}
		entry := i == 0
		r.Instructions++
		if entry {
			r.Entries++
		}
		err := m.site(addr, word)
		if err == nil && atomic[i] {
			err = errAtomicSequence // the installer's refusal (fasttp's refuseSite)
		}
		if err != nil {
			r.a64Trap(addr, word, err)
			continue
		}
		r.Jump++
		r.Plain++
		if entry {
			r.EntryJump++
		}
	}
}

// site plans the jump at addr over word as the arm64 installer does
// (fasttp's placeA64): a64.Decode, a pad arena near addr, then
// a64.PlanSiteWith.
func (m *a64Model) site(addr uint64, word uint32) error {
	if addr%4 != 0 {
		return fmt.Errorf("address %#x is not 4-byte aligned", addr)
	}
	if _, err := a64.Decode(word, addr); err != nil {
		return err
	}
	pad, err := arenaNear(m.free, addr)
	if err != nil {
		return err
	}
	_, err = a64.PlanSiteWith(addr, word, pad, pad+a64PadLen, a64.SiteOptions{Guarded: m.guarded})
	return err
}

// arenaNear returns where the installer's arena for a site at addr
// would be: the start of the free a64Arena bytes nearest to addr
// (inferior's freeNear: the candidate whose farthest byte is closest),
// which must lie wholly within a64Reach of addr (fasttp's arenaReaches).
func arenaNear(free []fasttp.Range, addr uint64) (uint64, error) {
	near := addr &^ 0xfff
	best, bestDist := uint64(0), ^uint64(0)
	for _, g := range free {
		if g.End-g.Start < a64Arena {
			continue
		}
		c := min(max(near, g.Start), g.End-a64Arena)
		var dist uint64
		if c+a64Arena > near {
			dist = c + a64Arena - near
		}
		if near > c {
			dist = max(dist, near-c)
		}
		if dist < bestDist {
			best, bestDist = c, dist
		}
	}
	if bestDist == ^uint64(0) {
		return 0, errors.New("no free memory for a pad area")
	}
	if d := int64(best - addr); d > a64Reach-a64Arena || d < -a64Reach+a64Arena {
		return 0, fmt.Errorf("pad area %#x out of jump range of %#x", best, addr)
	}
	return best, nil
}

// errAtomicSequence is the installer's refusal of a site inside an
// atomic sequence (a64.AtomicSequence).
var errAtomicSequence = errors.New(a64.ErrAtomicSequence)

// a64Addrs matches the word and address a64's refusals start with.
var a64Addrs = regexp.MustCompile(`^(fast tracepoint at 0x[0-9a-f]+: )?a64: instruction cannot be relocated: (0x[0-9a-f]+) at 0x[0-9a-f]+: `)

// a64Trap records a trap at addr: a refusal's reason is the word and
// why (its key the why up to its first colon: "svc", "load/store
// exclusive"...), others' the error without addresses.
func (r *Report) a64Trap(addr uint64, word uint32, err error) {
	why, key := err.Error(), ""
	if m := a64Addrs.FindStringSubmatch(why); m != nil {
		why = why[len(m[0]):]
		key, _, _ = strings.Cut(why, ": ")
		why = fmt.Sprintf("%#08x: %s", word, why)
	} else {
		key = reasonKey(why)
	}
	r.Traps = append(r.Traps, Trap{Addr: fmt.Sprintf("%#x", addr), Reason: why})
	r.Reasons[key]++
}

// a64Functions returns f's functions at base and where they came from:
// its function symbols when it has a symbol table; otherwise the FDEs
// of its .eh_frame, with the exported functions (.dynsym) none of them
// covers; otherwise the exported functions alone.
func a64Functions(f *elf.File, base uint64) ([]fasttp.Function, string, error) {
	funcs, err := fasttp.ELFFunctions(f, base)
	if err != nil {
		return nil, "", err
	}
	if f.Section(".symtab") != nil {
		return funcs, "symbols", nil
	}
	fdes, err := fdeRanges(f)
	if err != nil {
		return funcs, fmt.Sprintf("dynamic symbols (.eh_frame: %v)", err), nil
	}
	if len(fdes) == 0 {
		return funcs, "dynamic symbols", nil // no unwind tables
	}
	out := fdeFunctions(fdes, funcs, base, func(addr, size uint64) []byte { return codeBytes(f, addr, size) })
	return out, "eh_frame", nil
}

// fdeFunctions returns the functions of the FDE ranges fdes (link
// addresses) at base, their code read with code (nil: not in the file,
// left out), then the exported functions no FDE overlaps, sorted by
// address, one per address.
func fdeFunctions(fdes []fasttp.Range, exported []fasttp.Function, base uint64, code func(addr, size uint64) []byte) []fasttp.Function {
	var out []fasttp.Function
	seen := map[uint64]bool{}
	for _, r := range fdes {
		if seen[r.Start] {
			continue
		}
		if c := code(r.Start, r.End-r.Start); c != nil {
			seen[r.Start] = true
			out = append(out, fasttp.Function{Addr: base + r.Start, Size: r.End - r.Start, Code: c})
		}
	}
	for _, fn := range exported {
		lo, hi := fn.Addr-base, fn.Addr-base+fn.Size
		if !slices.ContainsFunc(fdes, func(r fasttp.Range) bool { return r.Start < hi && lo < r.End }) {
			out = append(out, fn)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// fdeRanges returns the link-address ranges of the FDEs of f's .eh_frame
// that lie in an executable section.
func fdeRanges(f *elf.File) ([]fasttp.Range, error) {
	s := f.Section(".eh_frame")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	data, err := s.Data()
	if err != nil {
		return nil, err
	}
	ptr := 8
	if f.Class == elf.ELFCLASS32 {
		ptr = 4
	}
	all, err := parseEHFrame(data, s.Addr, f.ByteOrder, ptr)
	var out []fasttp.Range
	for _, r := range all {
		if t := sectionAt(f, r.Start); t != nil && t.Flags&elf.SHF_EXECINSTR != 0 && r.End <= t.Addr+t.Size {
			out = append(out, r)
		}
	}
	return out, err
}

// sectionAt returns the allocated section holding the link address addr.
func sectionAt(f *elf.File, addr uint64) *elf.Section {
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && addr >= s.Addr && addr-s.Addr < s.Size {
			return s
		}
	}
	return nil
}

// codeBytes returns the size bytes at link address addr from the
// loadable segment holding them, or nil.
func codeBytes(f *elf.File, addr, size uint64) []byte {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr-p.Vaddr < p.Filesz && size <= p.Filesz-(addr-p.Vaddr) {
			b := make([]byte, size)
			if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
				return nil
			}
			return b
		}
	}
	return nil
}

// dataRanges returns the ranges, at base, that f's mapping symbols mark
// as data: from a `$d` (or `$d.N`) symbol to the next mapping symbol of
// its section or the section's end. Sorted, not overlapping.
func dataRanges(f *elf.File, base uint64) []fasttp.Range {
	syms, _ := f.Symbols()
	return mappedData(syms, f.Sections, base)
}

// mappedData is dataRanges of the symbols syms of a file with the
// sections sections.
func mappedData(syms []elf.Symbol, sections []*elf.Section, base uint64) []fasttp.Range {
	type mark struct {
		addr uint64
		data bool
	}
	bySection := map[elf.SectionIndex][]mark{}
	for _, s := range syms {
		kind, _, _ := strings.Cut(s.Name, ".")
		if (kind == "$d" || kind == "$x") && s.Section > 0 && int(s.Section) < len(sections) {
			bySection[s.Section] = append(bySection[s.Section], mark{s.Value, kind == "$d"})
		}
	}
	var out []fasttp.Range
	for i, marks := range bySection {
		sec := sections[i]
		if sec.Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		sort.SliceStable(marks, func(a, b int) bool { return marks[a].addr < marks[b].addr })
		for j, mk := range marks {
			end := sec.Addr + sec.Size
			if j+1 < len(marks) {
				end = marks[j+1].addr
			}
			if mk.data && end > mk.addr {
				out = append(out, fasttp.Range{Start: base + mk.addr, End: base + end})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// inRanges reports whether addr is in one of the sorted, disjoint ranges.
func inRanges(rs []fasttp.Range, addr uint64) bool {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].End > addr })
	return i < len(rs) && rs[i].Start <= addr
}
