package tdesc

import (
	"fmt"
	"strings"
)

// featureFile names the annex under which each feature is served.
var featureFile = map[string]string{
	FeatureCore:     "64bit-core.xml",
	FeatureSSE:      "64bit-sse.xml",
	FeatureLinux:    "64bit-linux.xml",
	FeatureSegments: "64bit-segments.xml",
	FeatureAVX:      "64bit-avx.xml",
}

// featureTypes holds the type definitions each feature's registers use
// (types GDB does not predefine).
var featureTypes = map[string]string{
	FeatureCore: flagsXML("i386_eflags", []flagField{
		{"CF", 0}, {"", 1}, {"PF", 2}, {"AF", 4}, {"ZF", 6}, {"SF", 7}, {"TF", 8},
		{"IF", 9}, {"DF", 10}, {"OF", 11}, {"NT", 14}, {"RF", 16}, {"VM", 17},
		{"AC", 18}, {"VIF", 19}, {"VIP", 20}, {"ID", 21},
	}),
	FeatureSSE: `  <vector id="v8bf16" type="bfloat16" count="8"/>
  <vector id="v8h" type="ieee_half" count="8"/>
  <vector id="v4f" type="ieee_single" count="4"/>
  <vector id="v2d" type="ieee_double" count="2"/>
  <vector id="v16i8" type="int8" count="16"/>
  <vector id="v8i16" type="int16" count="8"/>
  <vector id="v4i32" type="int32" count="4"/>
  <vector id="v2i64" type="int64" count="2"/>
  <union id="vec128">
    <field name="v8_bfloat16" type="v8bf16"/>
    <field name="v8_half" type="v8h"/>
    <field name="v4_float" type="v4f"/>
    <field name="v2_double" type="v2d"/>
    <field name="v16_int8" type="v16i8"/>
    <field name="v8_int16" type="v8i16"/>
    <field name="v4_int32" type="v4i32"/>
    <field name="v2_int64" type="v2i64"/>
    <field name="uint128" type="uint128"/>
  </union>
` + flagsXML("i386_mxcsr", []flagField{
		{"IE", 0}, {"DE", 1}, {"ZE", 2}, {"OE", 3}, {"UE", 4}, {"PE", 5}, {"DAZ", 6},
		{"IM", 7}, {"DM", 8}, {"ZM", 9}, {"OM", 10}, {"UM", 11}, {"PM", 12}, {"FZ", 15},
	}),
}

// flagField is one single-bit field of a flags type.
type flagField struct {
	name string
	bit  int
}

func flagsXML(id string, fields []flagField) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  <flags id=%q size=\"4\">\n", id)
	for _, f := range fields {
		fmt.Fprintf(&b, "    <field name=%q start=\"%d\" end=\"%d\"/>\n", f.name, f.bit, f.bit)
	}
	b.WriteString("  </flags>\n")
	return b.String()
}

// Features returns the feature names present in l, in register order.
func (l *Layout) Features() []string {
	var out []string
	for _, r := range l.Regs {
		if len(out) == 0 || out[len(out)-1] != r.Feature {
			out = append(out, r.Feature)
		}
	}
	return out
}

// XML returns the target-description document served as annex
// (qXfer:features:read:ANNEX): "target.xml", which names the
// architecture and OS ABI and includes one file per feature, or one of
// those feature files (amd64: "64bit-core.xml", "64bit-sse.xml",
// "64bit-linux.xml", "64bit-segments.xml", "64bit-avx.xml" with AVX;
// aarch64: "aarch64-core.xml", "aarch64-fpu.xml" or "aarch64-sve.xml",
// "aarch64-pauth.xml" with pointer authentication).
func (l *Layout) XML(annex string) ([]byte, bool) {
	if annex == "target.xml" {
		var b strings.Builder
		b.WriteString("<?xml version=\"1.0\"?>\n<!DOCTYPE target SYSTEM \"gdb-target.dtd\">\n<target>\n")
		fmt.Fprintf(&b, "  <architecture>%s</architecture>\n  <osabi>GNU/Linux</osabi>\n", l.Arch)
		for _, f := range l.Features() {
			fmt.Fprintf(&b, "  <xi:include href=%q/>\n", featureFile[f])
		}
		b.WriteString("</target>\n")
		return []byte(b.String()), true
	}
	for _, f := range l.Features() {
		if featureFile[f] == annex {
			return l.featureXML(f), true
		}
	}
	return nil, false
}

// XML returns every document of the amd64 Linux target description (with
// or without AVX) keyed by annex name, "target.xml" included.
func XML(avx bool) map[string][]byte {
	l := AMD64Linux(avx)
	docs := map[string][]byte{}
	t, _ := l.XML("target.xml")
	docs["target.xml"] = t
	for _, f := range l.Features() {
		d, _ := l.XML(featureFile[f])
		docs[featureFile[f]] = d
	}
	return docs
}

func (l *Layout) featureXML(feature string) []byte {
	var b strings.Builder
	b.WriteString("<?xml version=\"1.0\"?>\n<!DOCTYPE feature SYSTEM \"gdb-target.dtd\">\n")
	fmt.Fprintf(&b, "<feature name=%q>\n", feature)
	if feature == FeatureAArch64SVE {
		b.WriteString(sveTypes(l.VQ))
	}
	b.WriteString(featureTypes[feature])
	first := true
	for _, r := range l.Regs {
		if r.Feature != feature {
			continue
		}
		fmt.Fprintf(&b, "  <reg name=%q bitsize=\"%d\" type=%q", r.Name, r.Size*8, r.Type)
		if first {
			// Pin the numbering: each feature starts where the
			// previous one ended.
			fmt.Fprintf(&b, " regnum=\"%d\"", r.Num)
			first = false
		}
		if r.Group != "" {
			fmt.Fprintf(&b, " group=%q", r.Group)
		}
		b.WriteString("/>\n")
	}
	b.WriteString("</feature>\n")
	return []byte(b.String())
}
