package coverage

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gotpstub/fasttp"
	"gotpstub/fasttp/a64"
)

// a64Words returns words as little-endian code.
func a64Words(words ...uint32) []byte {
	b := make([]byte, 0, 4*len(words))
	for _, w := range words {
		b = binary.LittleEndian.AppendUint32(b, w)
	}
	return b
}

// testModel is a file mapped at [0x400000, 0x500000), the rest free.
func testModel(guarded bool) *a64Model {
	return &a64Model{
		free:    fasttp.FreeRanges([]fasttp.Range{{Start: 0x400000, End: 0x500000}}, 0x10000, a64Top),
		guarded: guarded,
	}
}

// TestA64Site: one word at a time, what the arm64 installer would do
// and why (the reason's key).
func TestA64Site(t *testing.T) {
	for _, c := range []struct {
		name    string
		word    uint32
		guarded bool
		trap    string // "": a jump
	}{
		{"mov x1, #0", 0xd2800001, false, ""},
		{"bl", 0x94000010, false, ""},
		{"b to itself", 0x14000000, false, ""},
		{"cbz x1", 0xb4000041, false, ""},
		{"adrp x0", 0x90000000, false, ""},
		{"ldr x0, literal", 0x58000040, false, ""},
		{"ret", 0xd65f03c0, false, ""},
		{"paciasp", 0xd503233f, false, ""},
		{"paciasp, guarded", 0xd503233f, true, "BTI landing pad in a guarded page"},
		{"bti c, guarded", 0xd503245f, true, "BTI landing pad in a guarded page"},
		{"nop, guarded", 0xd503201f, true, ""},
		{"ldaxr w2, [x0]", 0x885ffc02, false, "load/store exclusive"},
		{"stlxr w3, w2, [x0]", 0x8803fc02, false, "load/store exclusive"},
		{"svc #0", 0xd4000001, false, "svc"},
		{"brk #0", 0xd4200000, false, "brk"},
		{"udf #0", 0x00000000, false, "udf or reserved encoding"},
		{"blr x30", 0xd63f03c0, false, "blr x30"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Report{Reasons: map[string]int{}}
			r.a64Function(fasttp.Function{Addr: 0x400100, Size: 4, Code: a64Words(c.word)}, testModel(c.guarded))
			if r.Instructions != 1 || r.Entries != 1 || r.Jump+len(r.Traps) != 1 || r.Plain != r.Jump || r.EntryJump != r.Jump {
				t.Fatalf("inconsistent report %+v", r)
			}
			if c.trap == "" {
				if r.Jump != 1 {
					t.Errorf("a trap: %v", r.Traps)
				}
				return
			}
			if r.Reasons[c.trap] != 1 || len(r.Traps) != 1 || !strings.HasPrefix(r.Traps[0].Reason, fmt.Sprintf("%#08x: %s", c.word, c.trap)) {
				t.Errorf("traps %v, reasons %v; want one %q", r.Traps, r.Reasons, c.trap)
			}
		})
	}
}

// TestA64SiteFar: a site whose nearest free memory is beyond a b's
// reach is a trap, as is one with no free memory at all.
func TestA64SiteFar(t *testing.T) {
	for _, c := range []struct {
		name   string
		mapped fasttp.Range
		want   string
	}{
		{"beyond reach", fasttp.Range{Start: 0x10000, End: 0x20000000}, "pad area out of jump range of"},
		{"nothing free", fasttp.Range{Start: 0, End: a64Top}, "no free memory for a pad area"},
	} {
		m := &a64Model{free: fasttp.FreeRanges([]fasttp.Range{c.mapped}, 0x10000, a64Top)}
		r := &Report{Reasons: map[string]int{}}
		r.a64Function(fasttp.Function{Addr: 0x400000, Size: 4, Code: a64Words(0xd503201f)}, m)
		if r.Reasons[c.want] != 1 {
			t.Errorf("%s: reasons %v, want %q", c.name, r.Reasons, c.want)
		}
	}
}

func TestArenaNear(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name   string
		mapped []fasttp.Range
		site   uint64
		want   uint64 // 0: an error
	}{
		// The gap below is as near as the one above: the farthest byte
		// of each candidate decides (inferior's freeNear).
		{"below", []fasttp.Range{{Start: 0x400000, End: 0x401000}}, 0x400ff0, 0x400000 - mb},
		{"above", []fasttp.Range{{Start: 0x10000, End: 0x400000}, {Start: 0x400000, End: 0x401000}}, 0x400ff0, 0x401000},
		{"small gap skipped", []fasttp.Range{{Start: 0x10000, End: 0x400000}, {Start: 0x480000, End: 0x500000}}, 0x480000, 0x500000},
		// The whole arena within a b's reach (fasttp's arenaReaches).
		{"far but in reach", []fasttp.Range{{Start: 0x10000, End: 0x10000 + 127*mb}}, 0x10000, 0x10000 + 127*mb},
		{"out of reach", []fasttp.Range{{Start: 0x10000, End: 0x10000 + 127*mb + 0x1000}}, 0x10000, 0},
	} {
		free := fasttp.FreeRanges(c.mapped, 0x10000, a64Top)
		got, err := arenaNear(free, c.site)
		if c.want == 0 {
			if err == nil {
				t.Errorf("%s: arena %#x, want an error", c.name, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: arena %#x, %v; want %#x", c.name, got, err, c.want)
		}
	}
}

func TestBetweenExclusivesReport(t *testing.T) {
	const (
		ldaxr = 0x885ffc02
		stlxr = 0x8803fc02
		add   = 0x11000442
		cbnz  = 0x35ffffa3
	)
	// In a report: the exclusives are traps, and so is the add between
	// them (the installer refuses it); the cbnz gets a jump.
	r := &Report{Reasons: map[string]int{}}
	r.a64Function(fasttp.Function{Addr: 0x400000, Size: 16, Code: a64Words(ldaxr, add, stlxr, cbnz)}, testModel(false))
	if r.Jump != 1 || r.Reasons["load/store exclusive"] != 2 || r.Reasons[reasonKey(a64.ErrAtomicSequence)] != 1 {
		t.Errorf("report %+v", r)
	}
}

// TestMappedData: $d mapping symbols mark data up to the next mapping
// symbol or the section's end; their words are skipped.
func TestMappedData(t *testing.T) {
	sec := func(addr, size uint64, flags elf.SectionFlag) *elf.Section {
		return &elf.Section{SectionHeader: elf.SectionHeader{Addr: addr, Size: size, Flags: flags}}
	}
	sections := []*elf.Section{
		sec(0, 0, 0),
		sec(0x1000, 0x100, elf.SHF_ALLOC|elf.SHF_EXECINSTR), // .text
		sec(0x2000, 0x100, elf.SHF_ALLOC),                   // .rodata
	}
	syms := []elf.Symbol{
		{Name: "$d.7", Value: 0x10f0, Section: 1},
		{Name: "$x", Value: 0x1000, Section: 1},
		{Name: "$d", Value: 0x1040, Section: 1},
		{Name: "$x.1", Value: 0x1048, Section: 1},
		{Name: "f", Value: 0x1040, Section: 1},  // not a mapping symbol
		{Name: "$d", Value: 0x2000, Section: 2}, // not in code
		{Name: "$d", Value: 0x1080, Section: elf.SHN_ABS},
	}
	const base = 0x10000
	got := mappedData(syms, sections, base)
	want := []fasttp.Range{{Start: 0x11040, End: 0x11048}, {Start: 0x110f0, End: 0x11100}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("data %#x, want %#x", got, want)
	}
	m := &a64Model{free: fasttp.FreeRanges([]fasttp.Range{{Start: base, End: base + 0x3000}}, 0x10000, a64Top), data: got}
	words := make([]uint32, 0x40)
	for i := range words {
		words[i] = 0xd503201f
	}
	r := &Report{Reasons: map[string]int{}}
	r.a64Function(fasttp.Function{Addr: base + 0x1000, Size: 0x100, Code: a64Words(words...)}, m)
	if r.Data != 6 || r.Instructions != 0x40-6 || r.Jump != r.Instructions {
		t.Errorf("report %+v", r)
	}
}

func TestFDEFunctions(t *testing.T) {
	const base = 0xaaaaaaaa0000
	fdes := []fasttp.Range{{Start: 0x2000, End: 0x2040}, {Start: 0x1000, End: 0x1010}, {Start: 0x1000, End: 0x1010}, {Start: 0x9000, End: 0x9010}}
	exported := []fasttp.Function{
		{Addr: base + 0x1000, Size: 0x10}, // an FDE's
		{Addr: base + 0x2020, Size: 0x40}, // overlaps one
		{Addr: base + 0x3000, Size: 0x8},  // no FDE: kept
	}
	code := func(addr, size uint64) []byte {
		if addr >= 0x9000 {
			return nil // not in the file
		}
		return make([]byte, size)
	}
	var got []uint64
	for _, fn := range fdeFunctions(fdes, exported, base, code) {
		got = append(got, fn.Addr-base, fn.Size)
	}
	if want := []uint64{0x1000, 0x10, 0x2000, 0x40, 0x3000, 0x8}; !reflect.DeepEqual(got, want) {
		t.Errorf("functions (address, size) %#x, want %#x", got, want)
	}
}

// TestFileA64 runs coverage on a real arm64 ELF file: testdata/a64prog
// cross-built by the Go toolchain (a static non-PIE executable with a
// symbol table). Its function sites holds words of known kinds.
func TestFileA64(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build an arm64 program")
	}
	prog := filepath.Join(t.TempDir(), "a64prog")
	cmd := exec.Command(gobin, "build", "-o", prog, "./testdata/a64prog")
	cmd.Env = append(cmd.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	r, err := File(prog)
	if err != nil {
		t.Fatal(err)
	}
	if r.ISA != ISAA64 || r.Functions != "symbols" || r.Guarded || r.Jump+len(r.Traps) != r.Instructions || r.Plain != r.Jump ||
		r.EntryJump > r.Entries || r.Entries < 100 || r.Jump < r.Instructions/2 || r.Kept+r.Punned+r.Short+r.Evicted != 0 {
		t.Fatalf("inconsistent report %+v", r)
	}
	sites := symbol(t, prog, "main.sites")
	trapAt := map[string]string{}
	for _, tr := range r.Traps {
		trapAt[tr.Addr] = tr.Reason
	}
	for _, c := range []struct {
		off  uint64
		trap string // "": a jump
	}{
		{0, ""}, {4, "load/store exclusive"}, {8, "inside an atomic sequence"}, {12, "load/store exclusive"},
		{16, ""}, {20, "svc"}, {24, ""}, {28, "udf or reserved encoding"}, {32, ""},
	} {
		why, ok := trapAt[fmt.Sprintf("%#x", sites+c.off)]
		if ok != (c.trap != "") || !strings.Contains(why, c.trap) {
			t.Errorf("sites+%d: trap %v %q, want %q", c.off, ok, why, c.trap)
		}
	}
}
