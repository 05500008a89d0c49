// Package coverage reports where fast tracepoints can go in an ELF file:
// for every instruction of every function, what `ftrace *ADDR` would get
// from the code that installs them, and if it is a trap, why. An x86-64
// file is planned as the x86-64 installer does, an AArch64 one as the
// arm64 installer does (a64.go).
//
// # x86-64
//
// The planning is fasttp.SiteCandidates' and fasttp.FindPadAddrs': a
// plain jump, a successor-preserving jump, an evicting jump (the next
// instruction gets a jump to a trampoline), a punned jump (int3s at
// covered instruction heads), either ending in padding or with prefixes,
// or a trap, and why. Bytes after a ret or jmp count as code
// (fasttp.CodeOracle) where the linear decode of a function symbol has an
// instruction, as the installer decides. It also counts jumps that would
// overwrite a known branch target (a direct branch's target or a
// function entry) with anything but a pun's int3, which must never
// happen.
//
// The address space is modelled as when the file runs under the stub with
// ASLR off: a PIE executable at 0x555555554000, a shared library (it has
// a DT_SONAME) at 0x7ffff7c00000, a non-PIE executable at its link
// addresses; the pad may go anywhere else from 64 KiB to the top of user
// space. The real process has more mappings (heap, other libraries,
// stack), so this is an upper bound on pad placement; the planning itself
// is exact.
//
// # AArch64
//
// The arm64 installer (fasttp's placeA64) puts one `b pad` over the one
// instruction at the site; the report plans every 4-byte word of every
// function the same way: a64.Decode refuses some instructions (exclusive
// loads and stores, svc, brk, udf and unallocated encodings...), then
// a64.PlanSiteWith plans the b, with the pad at the start of the free
// 1 MB range nearest to the site (the arena the installer would map for
// it: inferior's freeNear, wholly within a b's ±128 MB as fasttp's
// arenaReaches wants; the installer's sharing of one arena by the sites
// of a 64 MB window is not modelled) and the relocated instruction's
// tail right after a 1 KB pad (one collecting $regs is 992 bytes). Every
// jump is a plain one (Plain); the x86-64 shape counts stay 0. The
// site's pages are BTI-guarded (then bti and paciasp/pacibsp are
// refused) when the file's GNU property note (PT_GNU_PROPERTY, else
// .note.gnu.property) has GNU_PROPERTY_AARCH64_FEATURE_1_AND with the BTI
// bit: the loader maps such a file with PROT_BTI on a CPU with BTI, which
// the model assumes.
//
// The functions are the file's function symbols (fasttp.ELFFunctions,
// which reads symbols and segments whatever the ISA); words inside a `$d`
// mapping symbol's range (a literal pool or other data in code, as the
// AArch64 ELF ABI marks it) are skipped and counted apart (Data). A file
// without a symbol table (a stripped executable: Debian's coreutils)
// names only its exported functions in .dynsym, so its functions are
// instead the FDEs of its .eh_frame (every function the compiler emitted
// unwind tables for; a function's .cold part has an FDE, and an entry, of
// its own), with the exported functions no FDE covers; code without an
// FDE (crt1's _start, padding between functions) is not counted. Such a
// file has no mapping symbols either, so data in code would count as
// instructions (GCC keeps AArch64 constants in .rodata: Debian 12's
// coreutils have no word in .text that does not decode). As the
// installer does, an instruction inside an atomic sequence (a
// load-exclusive to its store-exclusive, a64.AtomicSequence) gets no
// jump (the installer refuses any tracepoint there: a b to a pad or a
// trap clears the exclusive monitor, and the loop would retry for ever).
//
// The address space is modelled as under the stub with ASLR off on
// aarch64 Linux (48-bit addresses, as in the arm64 VM): a PIE executable
// at 0xaaaaaaaa0000, a shared library at 0xfffff7e00000 (where Debian
// 12's libc is), a non-PIE executable at its link addresses; the pad may
// go anywhere else from 64 KiB to 0xfffffffff000. As for x86-64, the
// real process has more mappings, so pad room is an upper bound (with
// ±128 MB of reach it hardly matters: there is free memory next to any
// file).
package coverage

import (
	"debug/elf"
	"fmt"
	"strings"

	"gotpstub/fasttp"
)

// Bases where a position-independent file is modelled (gdb's ASLR-off
// addresses on x86-64 Linux).
const (
	pieBase = 0x555555554000
	libBase = 0x7ffff7c00000
	padSize = 1024 // a pad collecting $regs with its relocated tail, rounded up
)

// Trap is an instruction that gets no jump.
type Trap struct {
	Addr   string `json:"addr"`
	Reason string `json:"reason"`
}

// The instruction sets of a Report.
const (
	ISAx86 = "x86-64"
	ISAA64 = "arm64"
)

// Report is the coverage of one file.
type Report struct {
	File string `json:"file"`
	// ISA is the file's instruction set (ISAx86, ISAA64). The shape
	// counts (Punned, Int3AtBranchTarget, Padding, Prefixed, Kept,
	// Evicted, Short, Neighbour, AfterPush) are x86-64's: an arm64 jump
	// is always a b over one instruction, counted in Plain.
	ISA                string `json:"isa"`
	Instructions       int    `json:"instructions"`
	Jump               int    `json:"jump"`
	Plain              int    `json:"plain"`
	Punned             int    `json:"punned"`
	Int3AtBranchTarget int    `json:"int3_at_branch_target"`
	// Padding counts jumps that end in alignment padding after a ret or
	// jmp (fasttp.Site.Dead); BranchTargetOverwritten counts jumps whose
	// bytes (other than an int3 pun) hold a known branch target or
	// function entry: it must be 0.
	Padding  int `json:"padding"`
	Prefixed int `json:"prefixed"` // punned jumps with prefixes (fasttp.PaddedSites)
	// Kept counts successor-preserving jumps (fasttp.KeepSite: no int3,
	// the next instructions' bytes kept); not in Plain or Punned.
	Kept int `json:"kept"`
	// Evicted counts evicting jumps (fasttp.EvictSite: no int3, the next
	// instruction jumps to a trampoline); not in Plain or Punned.
	Evicted int `json:"evicted"`
	// Short counts short jumps to a slot in nearby padding
	// (fasttp.ShortSite); Neighbour, short jumps to a slot inside a
	// neighbour instruction evicted to a trampoline; neither is in Plain
	// or Punned.
	Short                   int `json:"short"`
	Neighbour               int `json:"neighbour"`
	BranchTargetOverwritten int `json:"branch_target_overwritten"`
	// AfterPush counts function entries whose jump goes after the
	// entry's push (fasttp.LeadSites: only where nothing else fits and
	// no known branch targets the next instruction); not in the others.
	AfterPush int    `json:"after_push"`
	Entries   int    `json:"entries"`
	EntryJump int    `json:"entry_jump"`
	Traps     []Trap `json:"traps"`
	// Reasons counts the traps by reason (the reason's first words).
	Reasons map[string]int `json:"reasons"`

	// AArch64 only. Functions says where the functions came from:
	// "symbols" (fasttp.ELFFunctions), or for a file without a symbol
	// table "eh_frame" (its FDEs, and exported functions outside them).
	Functions string `json:"functions,omitempty"`
	// Data counts the words skipped as data: in a $d mapping symbol's
	// range. They are not in Instructions.
	Data int `json:"data,omitempty"`
	// Guarded: the file is BTI-guarded (its GNU property note has
	// GNU_PROPERTY_AARCH64_FEATURE_1_BTI), so landing pads are traps.
	Guarded bool `json:"bti_guarded,omitempty"`
}

// File computes the report of the ELF file at path: an x86-64 file with
// the x86-64 installer's planning, an AArch64 one with the arm64
// installer's (a64.go).
func File(path string) (*Report, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		return x86File(path, f)
	case elf.EM_AARCH64:
		return a64File(path, f)
	}
	return nil, fmt.Errorf("%s: %v, neither x86-64 nor AArch64", path, f.Machine)
}

// loadBase returns where f is modelled: a shared library (it has a
// DT_SONAME, or no interpreter: libc has one too) at lib, a PIE
// executable at pie, a non-PIE executable at its link addresses (0).
func loadBase(path string, f *elf.File, pie, lib uint64) (uint64, error) {
	switch f.Type {
	case elf.ET_DYN:
		if soname, _ := f.DynString(elf.DT_SONAME); len(soname) > 0 || f.Section(".interp") == nil {
			return lib, nil
		}
		return pie, nil
	case elf.ET_EXEC:
		return 0, nil
	}
	return 0, fmt.Errorf("%s: ELF type %v", path, f.Type)
}

// loadRanges returns the pages f's PT_LOAD segments take at base.
func loadRanges(f *elf.File, base uint64) []fasttp.Range {
	var mapped []fasttp.Range
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			lo := (base + p.Vaddr) &^ 0xfff
			mapped = append(mapped, fasttp.Range{Start: lo, End: (base + p.Vaddr + p.Memsz + 0xfff) &^ 0xfff})
		}
	}
	return mapped
}

// x86File computes the report of the x86-64 file f.
func x86File(path string, f *elf.File) (*Report, error) {
	base, err := loadBase(path, f, pieBase, libBase)
	if err != nil {
		return nil, err
	}
	funcs, err := fasttp.ELFFunctions(f, base)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	free := fasttp.FreeRanges(loadRanges(f, base), 0x10000, 0x7ffffffff000)
	r := &Report{File: path, ISA: ISAx86, Reasons: map[string]int{}}
	targets, starts := branchTargets(funcs)
	isCode := func(addr uint64) bool { return starts[addr] }
	for _, fn := range funcs {
		r.function(fn, free, targets, isCode)
	}
	return r, nil
}

// branchTargets returns the targets of the direct branches and calls of
// every function, and the function entries: the places a thread may
// arrive at other than by falling through; and every instruction start.
func branchTargets(funcs []fasttp.Function) (targets, starts map[uint64]bool) {
	targets, starts = map[uint64]bool{}, map[uint64]bool{}
	for _, fn := range funcs {
		targets[fn.Addr] = true
		insns, _, _ := fasttp.DecodeFunction(fn)
		for _, in := range insns {
			starts[in.Addr] = true
			if in.RelSize != 0 {
				targets[in.Target] = true
			}
		}
	}
	return targets, starts
}

// function adds fn's instructions to r.
func (r *Report) function(fn fasttp.Function, free []fasttp.Range, targets map[uint64]bool, isCode fasttp.CodeOracle) {
	insns, stuck, err := fasttp.DecodeFunction(fn)
	for i, in := range insns {
		entry := i == 0
		r.Instructions++
		if entry {
			r.Entries++
		}
		off := in.Addr - fn.Addr
		back := append(append([]byte(nil), fn.Before...), fn.Code[:off]...)
		back = back[len(back)-min(len(back), fasttp.ShortBackLen):]
		site, err := placeSite(back, fn.Code[off:], in.Addr, free, isCode)
		if err != nil && entry && len(insns) > 1 && !targets[insns[1].Addr] {
			if lead, lerr := placeLead(back, fn.Code[off:], in.Addr, free, isCode); lerr == nil {
				site, err = lead, nil
			}
		}
		if err != nil {
			r.trap(in.Addr, err)
			continue
		}
		r.Jump++
		if entry {
			r.EntryJump++
		}
		if site.Dead > 0 {
			r.Padding++
		}
		if site.Prefix > 0 {
			r.Prefixed++
		}
		if overwritesTarget(site, targets) {
			r.BranchTargetOverwritten++
		}
		if site.Lead > 0 {
			r.AfterPush++
			continue
		}
		r.count(site, targets)
	}
	if err != nil {
		// The rest of the function could not be decoded: one trap for
		// the place it stopped (its instructions are not counted).
		r.Instructions++
		r.trap(stuck, err)
	}
}

// count adds the placed site to the count of its shape.
func (r *Report) count(site fasttp.Site, targets map[uint64]bool) {
	switch site.Shape() {
	case fasttp.ShapePlain:
		r.Plain++
	case fasttp.ShapeKept:
		r.Kept++
	case fasttp.ShapeEvict:
		r.Evicted++
	case fasttp.ShapeShort:
		if site.Host != nil {
			r.Neighbour++
		} else {
			r.Short++
		}
	case fasttp.ShapeInt3:
		r.Punned++
		for _, p := range site.Puns {
			if targets[site.Addr+uint64(p)] {
				r.Int3AtBranchTarget++
				break
			}
		}
	}
}

// placeSite plans the jump at addr as the installer does: the first of
// fasttp.SiteCandidates that gets a pad address.
func placeSite(back, code []byte, addr uint64, free []fasttp.Range, isCode fasttp.CodeOracle) (fasttp.Site, error) {
	cands, err := fasttp.SiteCandidates(back, code, addr, isCode)
	if err != nil {
		return fasttp.Site{}, err
	}
	return firstPlaced(cands, free)
}

// firstPlaced returns the first of cands that gets a pad address, or the
// first candidate's error.
func firstPlaced(cands []fasttp.Site, free []fasttp.Range) (fasttp.Site, error) {
	var first error
	for _, c := range cands {
		if len(c.Forced) > 0 && forcedEntryFits(c, free) {
			return c, nil
		}
		_, _, err := fasttp.FindPadAddrs(c, free, padSize)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return fasttp.Site{}, first
}

// placeLead plans the jump after the push at a function's entry addr
// (fasttp.LeadSites), as the installer does where nothing else fits.
func placeLead(back, code []byte, addr uint64, free []fasttp.Range, isCode fasttp.CodeOracle) (fasttp.Site, error) {
	cands, err := fasttp.LeadSites(back, code, addr, isCode)
	if err != nil {
		return fasttp.Site{}, err
	}
	return firstPlaced(cands, free)
}

// forcedEntryFits reports whether site, whose jump displacement has
// forced bytes, gets what the installer tries first for it: a jump of
// fasttp.JumpLen bytes at an address with those bytes, within reach of
// a pad near the site.
func forcedEntryFits(site fasttp.Site, free []fasttp.Range) bool {
	entry, _, err := fasttp.FindPadAddrs(site, free, fasttp.JumpLen)
	if err != nil {
		return false
	}
	pad, err := fasttp.FindPadAddr(fasttp.Site{Addr: site.Addr, Covered: site.Covered}, free, padSize)
	d := int64(pad - (entry + fasttp.JumpLen))
	return err == nil && d == int64(int32(d))
}

// overwritesTarget reports whether the jump planned at site replaces the
// byte at a known branch target or function entry with anything but an
// int3 pun (a thread arriving there would run the jump's bytes).
func overwritesTarget(site fasttp.Site, targets map[uint64]bool) bool {
	for a := site.Slot; site.Slot != 0 && a < site.Slot+fasttp.JumpLen; a++ {
		if targets[a] {
			return true // the slot was not dead padding after all
		}
	}
	if h := site.Host; h != nil && overwritesTarget(*h, targets) {
		return true
	}
	end := site.Footprint()
	if e := site.Evicted; e != nil {
		// The evicted instruction's jump is judged as its own site (its
		// head is a valid entry, its kept bytes unchanged).
		if overwritesTarget(*e, targets) {
			return true
		}
		end = site.Covered
	}
	for off := 1; off < end; off++ {
		if !targets[site.Addr+uint64(off)] || site.Slot != 0 && off >= site.Covered {
			continue // a short jump's kept byte is left as it is
		}
		if _, pun := site.Forced[off-site.Prefix-1]; !pun || off <= site.Prefix {
			return true
		}
	}
	return false
}

// trap records a trap at addr and why.
func (r *Report) trap(addr uint64, err error) {
	why := err.Error()
	// "plan site 0x...: site refused: X" → "X"; keep the cause.
	if i := strings.LastIndex(why, ": "); i >= 0 && strings.HasPrefix(why, "plan site ") {
		why = why[strings.Index(why, ": ")+2:]
	}
	r.Traps = append(r.Traps, Trap{Addr: fmt.Sprintf("%#x", addr), Reason: why})
	r.Reasons[reasonKey(why)]++
}

// reasonKey is a reason without its addresses and numbers, for counting.
func reasonKey(why string) string {
	f := strings.FieldsFunc(why, func(r rune) bool { return r == ' ' })
	var kept []string
	for _, w := range f {
		if strings.HasPrefix(w, "0x") || strings.IndexFunc(w, func(r rune) bool { return r >= '0' && r <= '9' }) == 0 {
			continue
		}
		kept = append(kept, w)
	}
	return strings.Join(kept, " ")
}

// Percent returns n as a percentage of total (0 when total is 0).
func Percent(n, total int) float64 {
	if total == 0 {
		return 0
	}
	return 100 * float64(n) / float64(total)
}
