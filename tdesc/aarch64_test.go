package tdesc

import (
	"encoding/binary"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAArch64Layout: the numbers, sizes and g-packet offsets gdb's
// aarch64 target (gdb/arch/aarch64.h) expects.
func TestAArch64Layout(t *testing.T) {
	l := AArch64Linux()
	tests := []struct {
		name           string
		num, size, off int
		feature        string
	}{
		{"x0", AArch64X0, 8, 0, FeatureAArch64Core},
		{"x29", AArch64FP, 8, 29 * 8, FeatureAArch64Core},
		{"x30", AArch64LR, 8, 30 * 8, FeatureAArch64Core},
		{"sp", AArch64SP, 8, 31 * 8, FeatureAArch64Core},
		{"pc", AArch64PC, 8, 32 * 8, FeatureAArch64Core},
		{"cpsr", AArch64CPSR, 4, 33 * 8, FeatureAArch64Core},
		{"v0", AArch64V0, 16, 33*8 + 4, FeatureAArch64FPU},
		{"v31", AArch64V0 + 31, 16, 33*8 + 4 + 31*16, FeatureAArch64FPU},
		{"fpsr", AArch64FPSR, 4, 33*8 + 4 + 32*16, FeatureAArch64FPU},
		{"fpcr", AArch64FPCR, 4, 33*8 + 4 + 32*16 + 4, FeatureAArch64FPU},
	}
	for _, tt := range tests {
		r, ok := l.Find(tt.name)
		if !ok {
			t.Errorf("%s: missing", tt.name)
			continue
		}
		if r.Num != tt.num || r.Size != tt.size || r.Offset != tt.off || r.Feature != tt.feature {
			t.Errorf("%s: %+v, want num %d size %d offset %d in %s", tt.name, r, tt.num, tt.size, tt.off, tt.feature)
		}
	}
	if len(l.Regs) != AArch64NumRegs || l.Size != 33*8+4+32*16+8 {
		t.Errorf("%d registers, %d bytes", len(l.Regs), l.Size)
	}
	if l.Arch != "aarch64" || l.PC != AArch64PC || l.SP != AArch64SP || l.FP != AArch64FP {
		t.Errorf("arch %q pc %d sp %d fp %d", l.Arch, l.PC, l.SP, l.FP)
	}
}

// TestAArch64XML: target.xml names aarch64 and includes the core and
// fpu features, whose documents parse and give v0 its number 34.
func TestAArch64XML(t *testing.T) {
	l := AArch64Linux()
	target, ok := l.XML("target.xml")
	if !ok {
		t.Fatal("no target.xml")
	}
	for _, want := range []string{"<architecture>aarch64</architecture>", `href="aarch64-core.xml"`, `href="aarch64-fpu.xml"`} {
		if !strings.Contains(string(target), want) {
			t.Errorf("target.xml lacks %s:\n%s", want, target)
		}
	}
	for annex, want := range map[string]string{
		"aarch64-core.xml": `<reg name="x0" bitsize="64" type="int" regnum="0"/>`,
		"aarch64-fpu.xml":  `<reg name="v0" bitsize="128" type="aarch64v" regnum="34"/>`,
	} {
		doc, ok := l.XML(annex)
		if !ok {
			t.Errorf("%s not served", annex)
			continue
		}
		var f xmlNode
		if err := xml.Unmarshal(doc, &f); err != nil {
			t.Errorf("%s: %v", annex, err)
		}
		if !strings.Contains(string(doc), want) {
			t.Errorf("%s lacks %s", annex, want)
		}
	}
}

// TestHostXMLLoadedByGDB feeds this machine's documents to its gdb and
// checks that gdb derives exactly our numbering and g layout (on arm64
// this is the aarch64 description; the host gdb of an x86-64 machine
// usually knows no aarch64).
func TestHostXMLLoadedByGDB(t *testing.T) {
	l := Host()
	dir := t.TempDir()
	annexes := []string{"target.xml"}
	for _, f := range l.Features() {
		annexes = append(annexes, featureFile[f])
	}
	for _, name := range annexes {
		doc, _ := l.XML(name)
		if err := os.WriteFile(filepath.Join(dir, name), doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	regs := gdbRemoteRegisters(t,
		"-ex", "set tdesc filename "+filepath.Join(dir, "target.xml"),
		"-ex", "maint print remote-registers")
	compareWithGDB(t, l, regs)
}

// TestFillAArch64FPSIMD fills v0-v31 (z0-z31's low bytes with SVE),
// fpsr and fpcr from a pad's block, and nothing from a short one.
func TestFillAArch64FPSIMD(t *testing.T) {
	b := make([]byte, AArch64FPSIMDSize)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	for _, tc := range []struct {
		name   string
		layout *Layout
		in     []byte
		filled bool
	}{
		{"fpu", AArch64Linux(), b, true},
		{"sve vq 2", AArch64(AArch64Features{VQ: 2}), b, true},
		{"short", AArch64Linux(), b[:100], false},
		{"amd64 layout", AMD64Linux(false), b, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.layout.NewRegs()
			FillAArch64FPSIMD(r, tc.in)
			if tc.layout.Arch != "aarch64" {
				for i, v := range r.Valid {
					if v {
						t.Errorf("register %d set", i)
					}
				}
				return
			}
			for i := 0; i < 32; i++ {
				v := r.Get(AArch64V0 + i)
				if r.Valid[AArch64V0+i] != tc.filled || tc.filled && string(v[:16]) != string(b[16*i:16*i+16]) {
					t.Errorf("v%d = % x (valid %v)", i, v, r.Valid[AArch64V0+i])
				}
			}
			want := map[int]uint64{AArch64FPSR: uint64(binary.LittleEndian.Uint32(b[512:])), AArch64FPCR: uint64(binary.LittleEndian.Uint32(b[520:]))}
			for num, w := range want {
				if r.Valid[num] != tc.filled || tc.filled && r.Uint64(num) != w {
					t.Errorf("register %d = %#x (valid %v), want %#x", num, r.Uint64(num), r.Valid[num], w)
				}
			}
		})
	}
}
