package a64

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"

	"golang.org/x/arch/arm64/arm64asm"
)

// wordsFile holds the distinct .text words of Debian 12 arm64's libc.so.6,
// libm.so.6, /usr/bin/ls and /usr/bin/sort (from the VM image of
// scripts/arm64-vm.sh): sorted, as gzipped uvarint deltas. Regenerate
// with A64_WRITE_WORDS=testdata/debian12-arm64-words.gz:ELF:ELF... go test
// -run TestWriteWords.
const wordsFile = "testdata/debian12-arm64-words.gz"

// refusedOps are the arm64asm operations Decode must refuse.
var refusedOps = map[arm64asm.Op]bool{
	arm64asm.LDXR: true, arm64asm.LDXRB: true, arm64asm.LDXRH: true, arm64asm.LDXP: true,
	arm64asm.LDAXR: true, arm64asm.LDAXRB: true, arm64asm.LDAXRH: true, arm64asm.LDAXP: true,
	arm64asm.STXR: true, arm64asm.STXRB: true, arm64asm.STXRH: true, arm64asm.STXP: true,
	arm64asm.STLXR: true, arm64asm.STLXRB: true, arm64asm.STLXRH: true, arm64asm.STLXP: true,
	arm64asm.SVC: true, arm64asm.HVC: true, arm64asm.SMC: true, arm64asm.BRK: true, arm64asm.HLT: true,
	arm64asm.DCPS1: true, arm64asm.DCPS2: true, arm64asm.DCPS3: true, arm64asm.ERET: true, arm64asm.DRPS: true,
}

// pcRelKinds maps arm64asm's pc-relative operations to kinds.
var pcRelKinds = map[arm64asm.Op]Kind{
	arm64asm.ADR: KindADR, arm64asm.ADRP: KindADRP, arm64asm.B: KindB, arm64asm.BL: KindBL,
	arm64asm.CBZ: KindCBZ, arm64asm.CBNZ: KindCBZ, arm64asm.TBZ: KindTBZ, arm64asm.TBNZ: KindTBZ,
	arm64asm.LDR: KindLoadLit, arm64asm.LDRSW: KindLoadLit, arm64asm.PRFM: KindPrefetchLit,
}

// compare checks Decode against arm64asm for one word; it returns a
// complaint or "".
func compare(w uint32, pc uint64) string {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], w)
	ai, aerr := arm64asm.Decode(b[:])
	mi, merr := Decode(w, pc)
	if merr != nil && !errors.Is(merr, ErrRefused) {
		return "error not wrapping ErrRefused: " + merr.Error()
	}
	if aerr != nil { // arm64asm does not know it: at most bc.cond is pc-relative
		if merr == nil && mi.Kind != KindPlain && !(mi.Kind == KindBCond && w&0x10 != 0) && mi.Kind != KindBLR {
			return "pc-relative " + mi.Kind.String() + " that arm64asm cannot decode"
		}
		return ""
	}
	if refusedOps[ai.Op] || ai.Op == arm64asm.BLR && w>>5&31 == 30 {
		if merr == nil {
			return "not refused: " + ai.String()
		}
		return ""
	}
	if merr != nil {
		return merr.Error()
	}
	return comparePCRel(ai, mi, pc)
}

// comparePCRel checks the kind and target of a word both decoders accept.
func comparePCRel(ai arm64asm.Inst, mi Insn, pc uint64) string {
	var rel *arm64asm.PCRel
	for _, a := range ai.Args {
		if r, ok := a.(arm64asm.PCRel); ok {
			rel = &r
		}
	}
	want := KindPlain
	switch {
	case ai.Op == arm64asm.BLR:
		want = KindBLR
	case rel != nil && ai.Op == arm64asm.B && ai.Args[0] != nil && isCond(ai.Args[0]):
		want = KindBCond
	case rel != nil:
		k, ok := pcRelKinds[ai.Op]
		if !ok {
			if false {
				k = KindLoadLitFP
			} else {
				return "unexpected pc-relative " + ai.String()
			}
		}
		want = k
		if k == KindLoadLit && isFPReg(ai.Args[0]) {
			want = KindLoadLitFP
		}
	}
	if mi.Kind != want {
		return "kind " + mi.Kind.String() + ", arm64asm: " + ai.String() + " (" + want.String() + ")"
	}
	if rel == nil {
		return ""
	}
	base := pc
	if want == KindADRP {
		base &^= 0xfff
	}
	if mi.Target != base+uint64(*rel) {
		return "target differs from arm64asm's: " + ai.String()
	}
	return ""
}

func isCond(a arm64asm.Arg) bool { _, ok := a.(arm64asm.Cond); return ok }

func isFPReg(a arm64asm.Arg) bool {
	r, ok := a.(arm64asm.Reg)
	return ok && r >= arm64asm.B0 && r <= arm64asm.Q31
}

// TestDecodeAgreesWithArm64asmRandom compares Decode with arm64asm on
// random words, half of them forced into the branch and load/store
// groups where the pc-relative and refused classes live.
func TestDecodeAgreesWithArm64asmRandom(t *testing.T) {
	n := 2000000
	if testing.Short() || runtime.GOARCH == "arm64" && os.Getenv("A64_LONG") == "" {
		n = 200000 // slow under emulation
	}
	rng := rand.New(rand.NewSource(1))
	bad := 0
	for i := 0; i < n && bad < 20; i++ {
		w := rng.Uint32()
		switch i % 4 {
		case 1:
			w = w&^(0x7<<26) | 0x5<<26 // branch, exception, system
		case 2:
			w = w&^(0x3b<<24) | 0x18<<24 // load literal
		case 3:
			w = w&^(0x3f<<24) | 0x08<<24 // exclusive, ordered, cas
		}
		pc := rng.Uint64() &^ 3
		if msg := compare(w, pc); msg != "" {
			t.Errorf("%#08x at %#x: %s", w, pc, msg)
			bad++
		}
	}
}

// TestDecodeAgreesWithArm64asmReal compares Decode with arm64asm on the
// words of real code: the Debian 12 words file, this test binary when it
// is arm64, the system's arm64 libc if there is one, and the ELF files in
// A64_ELF (colon-separated). It also reports how many words of each kind
// and how many refused words real code has.
func TestDecodeAgreesWithArm64asmReal(t *testing.T) {
	sets := map[string][]uint32{"testdata": readWordsFile(t)}
	paths := strings.Split(os.Getenv("A64_ELF"), ":")
	if runtime.GOARCH == "arm64" {
		exe, _ := os.Executable()
		paths = append(paths, exe, "/usr/lib/aarch64-linux-gnu/libc.so.6")
	}
	for _, p := range paths {
		if p != "" {
			if ws, err := elfWords(p); err == nil {
				sets[p] = ws
			} else if !os.IsNotExist(err) {
				t.Errorf("%s: %v", p, err)
			}
		}
	}
	for name, ws := range sets {
		kinds, refused, bad := map[Kind]int{}, 0, 0
		for i, w := range ws {
			pc := 0x400000 + 4*uint64(i)
			if msg := compare(w, pc); msg != "" && bad < 20 {
				t.Errorf("%s: %#08x: %s", name, w, msg)
				bad++
			}
			if in, err := Decode(w, pc); err != nil {
				refused++
			} else {
				kinds[in.Kind]++
			}
		}
		t.Logf("%s: %d words, %d refused, kinds %v", name, len(ws), refused, kinds)
		if len(ws) > 10000 && (kinds[KindADRP] == 0 || kinds[KindBL] == 0 || kinds[KindCBZ] == 0) {
			t.Errorf("%s: implausible kinds %v", name, kinds)
		}
	}
}

// readWordsFile reads wordsFile.
func readWordsFile(t *testing.T) []uint32 {
	f, err := os.Open(wordsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	var ws []uint32
	r, prev := bytes.NewReader(data), uint32(0)
	for r.Len() > 0 {
		d, err := binary.ReadUvarint(r)
		if err != nil {
			t.Fatal(err)
		}
		prev += uint32(d)
		ws = append(ws, prev)
	}
	if len(ws) < 50000 {
		t.Fatalf("%s: only %d words", wordsFile, len(ws))
	}
	return ws
}

// elfWords returns the words of an arm64 ELF file's .text.
func elfWords(path string) ([]uint32, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := f.Section(".text")
	if f.Machine != elf.EM_AARCH64 || s == nil {
		return nil, errors.New("not an arm64 ELF file with .text")
	}
	b, err := s.Data()
	if err != nil {
		return nil, err
	}
	ws := make([]uint32, len(b)/4)
	for i := range ws {
		ws[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return ws, nil
}

// TestWriteWords regenerates wordsFile when A64_WRITE_WORDS is
// OUT:ELF:ELF...
func TestWriteWords(t *testing.T) {
	spec := os.Getenv("A64_WRITE_WORDS")
	if spec == "" {
		t.Skip("A64_WRITE_WORDS not set")
	}
	parts := strings.Split(spec, ":")
	set := map[uint32]bool{}
	for _, p := range parts[1:] {
		ws, err := elfWords(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, w := range ws {
			set[w] = true
		}
	}
	ws := make([]uint32, 0, len(set))
	for w := range set {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	var buf bytes.Buffer
	z, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	prev := uint32(0)
	for _, w := range ws {
		z.Write(binary.AppendUvarint(nil, uint64(w-prev)))
		prev = w
	}
	z.Close()
	if err := os.WriteFile(parts[0], buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d words, %d bytes", len(ws), buf.Len())
}
