package tdesc

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
)

// Register numbers in GDB's aarch64 numbering (gdb/arch/aarch64.h): the
// core feature's x0…x30, sp, pc, cpsr, then the fpu feature's v0…v31,
// fpsr, fpcr, or, with SVE, the sve feature's z0…z31 (where v0…v31 were),
// fpsr, fpcr, p0…p15, ffr, vg. The pauth feature's pauth_dmask and
// pauth_cmask come next (Find them by name).
const (
	AArch64X0      = 0  // x1…x30 follow; x29 is the frame pointer, x30 the link register
	AArch64FP      = 29 // x29
	AArch64LR      = 30 // x30
	AArch64SP      = 31
	AArch64PC      = 32
	AArch64CPSR    = 33
	AArch64V0      = 34 // v1…v31 follow
	AArch64FPSR    = 66
	AArch64FPCR    = 67
	AArch64NumRegs = 68 // without SVE and pauth

	AArch64Z0  = AArch64V0 // SVE: z1…z31 follow
	AArch64P0  = 68        // SVE: p1…p15 follow
	AArch64FFR = 84        // SVE
	AArch64VG  = 85        // SVE: the vector length in 64-bit granules
)

// Feature names of GDB's aarch64 target-description features.
const (
	FeatureAArch64Core  = "org.gnu.gdb.aarch64.core"
	FeatureAArch64FPU   = "org.gnu.gdb.aarch64.fpu"
	FeatureAArch64SVE   = "org.gnu.gdb.aarch64.sve"
	FeatureAArch64PAuth = "org.gnu.gdb.aarch64.pauth"
)

// AArch64Features says which optional aarch64 features a layout has.
type AArch64Features struct {
	// VQ is the SVE vector length in 128-bit quadwords (0: no SVE, the
	// fpu feature's v0…v31 instead).
	VQ int
	// PAuth adds pointer authentication's masks (pauth_dmask,
	// pauth_cmask), which gdb needs to unwind through signed return
	// addresses.
	PAuth bool
}

var aarch64Layouts struct {
	sync.Mutex
	m map[AArch64Features]*Layout
}

// AArch64Linux returns the aarch64 GNU/Linux layout with GDB 13's core
// and fpu features only (no SVE, pointer authentication, MTE or TLS).
// The returned layout is shared and must not be modified.
func AArch64Linux() *Layout { return AArch64(AArch64Features{}) }

// AArch64 returns the aarch64 GNU/Linux layout with features f, built
// as gdb 13 builds its own (aarch64_create_target_description): core,
// fpu or sve, pauth. MTE and TLS are not described. Layouts are shared
// and must not be modified.
func AArch64(f AArch64Features) *Layout {
	aarch64Layouts.Lock()
	defer aarch64Layouts.Unlock()
	if l := aarch64Layouts.m[f]; l != nil {
		return l
	}
	if aarch64Layouts.m == nil {
		aarch64Layouts.m = map[AArch64Features]*Layout{}
	}
	l := buildAArch64(f)
	aarch64Layouts.m[f] = l
	return l
}

func buildAArch64(f AArch64Features) *Layout {
	l := &Layout{Arch: "aarch64", PC: AArch64PC, SP: AArch64SP, FP: AArch64FP, LR: AArch64LR, VQ: f.VQ, byName: map[string]int{}}
	for i := 0; i <= 30; i++ {
		l.add(FeatureAArch64Core, fmt.Sprintf("x%d", i), 8, "int", "")
	}
	l.add(FeatureAArch64Core, "sp", 8, "data_ptr", "")
	l.add(FeatureAArch64Core, "pc", 8, "code_ptr", "")
	l.add(FeatureAArch64Core, "cpsr", 4, "cpsr_flags", "")
	if f.VQ > 0 {
		addSVE(l, f.VQ)
	} else {
		for i := 0; i < 32; i++ {
			l.add(FeatureAArch64FPU, fmt.Sprintf("v%d", i), 16, "aarch64v", "")
		}
		l.add(FeatureAArch64FPU, "fpsr", 4, "int", "")
		l.add(FeatureAArch64FPU, "fpcr", 4, "int", "")
	}
	if f.PAuth {
		l.add(FeatureAArch64PAuth, "pauth_dmask", 8, "int", "")
		l.add(FeatureAArch64PAuth, "pauth_cmask", 8, "int", "")
	}
	return l
}

// addSVE adds the sve feature's registers for vector length vq.
func addSVE(l *Layout, vq int) {
	for i := 0; i < 32; i++ {
		l.add(FeatureAArch64SVE, fmt.Sprintf("z%d", i), 16*vq, "svev", "")
	}
	l.add(FeatureAArch64SVE, "fpsr", 4, "int", "")
	l.add(FeatureAArch64SVE, "fpcr", 4, "int", "")
	for i := 0; i < 16; i++ {
		l.add(FeatureAArch64SVE, fmt.Sprintf("p%d", i), 2*vq, "svep", "")
	}
	l.add(FeatureAArch64SVE, "ffr", 2*vq, "svep", "")
	l.add(FeatureAArch64SVE, "vg", 8, "int", "vector")
}

// sveTypes defines the types of the sve feature's registers for vector
// length vq: svev, the union a Z register is shown as (z0.d.f, z0.s.u,
// z0.b.s…), and svep, a predicate register's bytes.
func sveTypes(vq int) string {
	var b strings.Builder
	vec := func(id, typ string, count int) {
		fmt.Fprintf(&b, "  <vector id=%q type=%q count=\"%d\"/>\n", id, typ, count)
	}
	union := func(id string, fields ...string) {
		fmt.Fprintf(&b, "  <union id=%q>\n", id)
		for i := 0; i+1 < len(fields); i += 2 {
			fmt.Fprintf(&b, "    <field name=%q type=%q/>\n", fields[i], fields[i+1])
		}
		b.WriteString("  </union>\n")
	}
	vec("svevqu", "uint128", vq)
	vec("svevqs", "int128", vq)
	vec("svevdf", "ieee_double", 2*vq)
	vec("svevdu", "uint64", 2*vq)
	vec("svevds", "int64", 2*vq)
	vec("svevsf", "ieee_single", 4*vq)
	vec("svevsu", "uint32", 4*vq)
	vec("svevss", "int32", 4*vq)
	vec("svevhf", "ieee_half", 8*vq)
	vec("svevhu", "uint16", 8*vq)
	vec("svevhs", "int16", 8*vq)
	vec("svevbu", "uint8", 16*vq)
	vec("svevbs", "int8", 16*vq)
	union("svevnq", "u", "svevqu", "s", "svevqs")
	union("svevnd", "f", "svevdf", "u", "svevdu", "s", "svevds")
	union("svevns", "f", "svevsf", "u", "svevsu", "s", "svevss")
	union("svevnh", "f", "svevhf", "u", "svevhu", "s", "svevhs")
	union("svevnb", "u", "svevbu", "s", "svevbs")
	union("svev", "q", "svevnq", "d", "svevnd", "s", "svevns", "h", "svevnh", "b", "svevnb")
	vec("svep", "uint8", 2*vq)
	return b.String()
}

// The aarch64 features' file names and the types their registers use.
func init() {
	featureFile[FeatureAArch64Core] = "aarch64-core.xml"
	featureFile[FeatureAArch64FPU] = "aarch64-fpu.xml"
	featureFile[FeatureAArch64SVE] = "aarch64-sve.xml"
	featureFile[FeatureAArch64PAuth] = "aarch64-pauth.xml"
	featureTypes[FeatureAArch64Core] = flagsXML("cpsr_flags", []flagField{
		{"SP", 0}, {"nRW", 4}, {"F", 6}, {"I", 7}, {"A", 8}, {"D", 9}, {"SSBS", 12},
		{"IL", 20}, {"SS", 21}, {"PAN", 22}, {"UAO", 23}, {"DIT", 24}, {"TCO", 25},
		{"V", 28}, {"C", 29}, {"Z", 30}, {"N", 31},
	})
	featureTypes[FeatureAArch64FPU] = aarch64VectorTypes
}

// aarch64VectorTypes defines aarch64v, the union GDB shows a vector
// register as (v0.d.f, v0.s.u, v0.b.s, v0.q.u…).
const aarch64VectorTypes = `  <vector id="v2d" type="ieee_double" count="2"/>
  <vector id="v2u" type="uint64" count="2"/>
  <vector id="v2i" type="int64" count="2"/>
  <vector id="v4f" type="ieee_single" count="4"/>
  <vector id="v4u" type="uint32" count="4"/>
  <vector id="v4i" type="int32" count="4"/>
  <vector id="v8f" type="ieee_half" count="8"/>
  <vector id="v8u" type="uint16" count="8"/>
  <vector id="v8i" type="int16" count="8"/>
  <vector id="v16u" type="uint8" count="16"/>
  <vector id="v16i" type="int8" count="16"/>
  <vector id="v1u" type="uint128" count="1"/>
  <vector id="v1i" type="int128" count="1"/>
  <union id="vnd">
    <field name="f" type="v2d"/>
    <field name="u" type="v2u"/>
    <field name="s" type="v2i"/>
  </union>
  <union id="vns">
    <field name="f" type="v4f"/>
    <field name="u" type="v4u"/>
    <field name="s" type="v4i"/>
  </union>
  <union id="vnh">
    <field name="f" type="v8f"/>
    <field name="u" type="v8u"/>
    <field name="s" type="v8i"/>
  </union>
  <union id="vnb">
    <field name="u" type="v16u"/>
    <field name="s" type="v16i"/>
  </union>
  <union id="vnq">
    <field name="u" type="v1u"/>
    <field name="s" type="v1i"/>
  </union>
  <union id="aarch64v">
    <field name="d" type="vnd"/>
    <field name="s" type="vns"/>
    <field name="h" type="vnh"/>
    <field name="b" type="vnb"/>
    <field name="q" type="vnq"/>
  </union>
`

// AArch64FPSIMDSize is the size of the SIMD/FP state FillAArch64FPSIMD
// reads: v0-v31, 16 bytes each, then fpsr and fpcr, 8 bytes each (an
// arm64 jump pad's register block after its core slots).
const AArch64FPSIMDSize = 32*16 + 16

// FillAArch64FPSIMD copies v0-v31, fpsr and fpcr from b (the
// AArch64FPSIMDSize-byte format above; a shorter b copies nothing) into
// r, an aarch64 layout's registers, and marks them valid. With SVE the
// z registers get the v values as their low 16 bytes (the rest is left
// as it was), as the V registers are the Z registers' low bits.
func FillAArch64FPSIMD(r *Regs, b []byte) {
	if len(b) < AArch64FPSIMDSize || r.Layout.Arch != "aarch64" || len(r.Layout.Regs) <= AArch64FPCR {
		return
	}
	for i := 0; i < 32; i++ {
		if v := r.Get(AArch64V0 + i); len(v) >= 16 {
			copy(v, b[16*i:16*i+16])
			if AArch64V0+i < len(r.Valid) {
				r.Valid[AArch64V0+i] = true
			}
		}
	}
	_ = r.SetUint64(AArch64FPSR, binary.LittleEndian.Uint64(b[512:]))
	_ = r.SetUint64(AArch64FPCR, binary.LittleEndian.Uint64(b[520:]))
}
