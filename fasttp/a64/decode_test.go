package a64

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeTable decodes one or more words of every kind; the encodings
// and their disassembly (in the comments) were checked with arm64asm, and
// TestDecodeTableAgreesWithArm64asm checks them again.
func TestDecodeTable(t *testing.T) {
	pc := uint64(0x400abc)
	tests := []struct {
		word uint32
		want Insn
	}{
		{0x300091a3, Insn{Kind: KindADR, Target: pc + 0x1235, Reg: 3}},                                    // adr x3, .+0x1235
		{0x70ffffff, Insn{Kind: KindADR, Target: pc - 1, Reg: 31}},                                        // adr xzr, .-1
		{0x90000000, Insn{Kind: KindADRP, Target: 0x400000, Reg: 0}},                                      // adrp x0, .+0
		{0xb0ffffe5, Insn{Kind: KindADRP, Target: 0x400000 - 0x3000, Reg: 5}},                             // adrp x5, .-0x3000
		{0xf0000005, Insn{Kind: KindADRP, Target: 0x400000 + 0x3000, Reg: 5}},                             // adrp x5, .+0x3000
		{0x58000041, Insn{Kind: KindLoadLit, Target: pc + 8, Reg: 1, Size: 8, Wide: true}},                // ldr x1, .+8
		{0x18ffffe2, Insn{Kind: KindLoadLit, Target: pc - 4, Reg: 2, Size: 4}},                            // ldr w2, .-4
		{0x98000083, Insn{Kind: KindLoadLit, Target: pc + 16, Reg: 3, Size: 4, Wide: true, Signed: true}}, // ldrsw x3, .+16
		{0x1c000044, Insn{Kind: KindLoadLitFP, Target: pc + 8, Reg: 4, Size: 4}},                          // ldr s4, .+8
		{0x5c000085, Insn{Kind: KindLoadLitFP, Target: pc + 16, Reg: 5, Size: 8}},                         // ldr d5, .+16
		{0x9c0000c6, Insn{Kind: KindLoadLitFP, Target: pc + 24, Reg: 6, Size: 16}},                        // ldr q6, .+24
		{0xd8000040, Insn{Kind: KindPrefetchLit, Target: pc + 8, Reg: 0}},                                 // prfm pldl1keep, .+8
		{0x14000010, Insn{Kind: KindB, Target: pc + 0x40}},                                                // b .+0x40
		{0x17ffffff, Insn{Kind: KindB, Target: pc - 4}},                                                   // b .-4
		{0x15ffffff, Insn{Kind: KindB, Target: pc + 0x7fffffc}},                                           // b .+128MB-4
		{0x16000000, Insn{Kind: KindB, Target: pc - 0x8000000}},                                           // b .-128MB
		{0x97ffffff, Insn{Kind: KindBL, Target: pc - 4}},                                                  // bl .-4
		{0x54000040, Insn{Kind: KindBCond, Target: pc + 8, Cond: 0}},                                      // b.eq .+8
		{0x5400008b, Insn{Kind: KindBCond, Target: pc + 16, Cond: 11}},                                    // b.lt .+16
		{0x54800000, Insn{Kind: KindBCond, Target: pc - 0x100000, Cond: 0}},                               // b.eq .-1MB
		{0x54000050, Insn{Kind: KindBCond, Target: pc + 8, Cond: 0}},                                      // bc.eq .+8
		{0xb4000061, Insn{Kind: KindCBZ, Target: pc + 12, Reg: 1, Wide: true}},                            // cbz x1, .+12
		{0x35ffffe2, Insn{Kind: KindCBZ, Target: pc - 4, Reg: 2, NonZero: true}},                          // cbnz w2, .-4
		{0x36080062, Insn{Kind: KindTBZ, Target: pc + 12, Reg: 2, Bit: 1}},                                // tbz w2, #1, .+12
		{0xb7f80003, Insn{Kind: KindTBZ, Target: pc, Reg: 3, Bit: 63, Wide: true, NonZero: true}},         // tbnz x3, #63, .
		{0x367c0000, Insn{Kind: KindTBZ, Target: pc - 0x8000, Reg: 0, Bit: 15}},                           // tbz w0, #15, .-32KB
		{0xd63f0060, Insn{Kind: KindBLR, Reg: 3}},                                                         // blr x3
		{0xd503245f, Insn{Landing: true}},                                                                 // bti c
		{0xd503241f, Insn{Landing: true}},                                                                 // bti
		{0xd503249f, Insn{Landing: true}},                                                                 // bti j
		{0xd50324df, Insn{Landing: true}},                                                                 // bti jc
		{0xd503233f, Insn{Landing: true}},                                                                 // paciasp
		{0xd503237f, Insn{Landing: true}},                                                                 // pacibsp
		{0xd503201f, Insn{}},                                                                              // nop
		{0xd50323bf, Insn{}},                                                                              // autiasp
		{0xd65f03c0, Insn{Reg: 30}},                                                                       // ret
		{0xd61f0200, Insn{Reg: 16}},                                                                       // br x16
		{0xd71f0a00, Insn{Reg: 16}},                                                                       // braa x16, x0
		{0xd61f081f, Insn{Reg: 0}},                                                                        // braaz x0
		{0xd65f0bff, Insn{Reg: 31}},                                                                       // retaa
		{0xc8dffc20, Insn{}},                                                                              // ldar x0, [x1]
		{0xc89ffc20, Insn{}},                                                                              // stlr x0, [x1]
		{0x88a07c41, Insn{}},                                                                              // cas w0, w1, [x2]
		{0x48207c42, Insn{}},                                                                              // casp w0, w1, w2, w3, [x2]
		{0xb8200020, Insn{}},                                                                              // ldadd w0, w0, [x1]
		{0x8b020020, Insn{}},                                                                              // add x0, x1, x2
		{0xf9400020, Insn{}},                                                                              // ldr x0, [x1]
		{0xd53bd040, Insn{}},                                                                              // mrs x0, tpidr_el0
		{0x04200000, Insn{}},                                                                              // add z0.b, z0.b, z0.b (SVE)
		{0xd9200820, Insn{}},
		{0x19400020, Insn{}}, // ldapurb w0, [x1] (RCpc, bits 11:10 = 00 next to MOPS)
	}
	for _, tc := range tests {
		got, err := Decode(tc.word, pc)
		if err != nil {
			t.Errorf("%#08x: %v", tc.word, err)
			continue
		}
		want := tc.want
		want.Word, want.PC = tc.word, pc
		if got != want {
			t.Errorf("%#08x:\n got %+v\nwant %+v", tc.word, got, want)
		}
	}
}

// TestDecodeRefused checks every refused class and that the error says
// why.
func TestDecodeRefused(t *testing.T) {
	tests := []struct {
		word uint32
		why  string
	}{
		{0xc85f7c20, "exclusive"}, // ldxr x0, [x1]
		{0x885ffc01, "exclusive"}, // ldaxr w1, [x0]
		{0xc8017c41, "exclusive"}, // stxr w1, x1, [x2]
		{0xc801fc41, "exclusive"}, // stlxr w1, x1, [x2]
		{0x085f7c20, "exclusive"}, // ldxrb w0, [x1]
		{0x485ffc20, "exclusive"}, // ldaxrh w0, [x1]
		{0xc87f0440, "exclusive"}, // ldxp x0, x1, [x2]
		{0x887f8440, "exclusive"}, // ldaxp w0, w1, [x2]
		{0xc8207c41, "exclusive"}, // stxp w0, x1, xzr, [x2]
		{0x19010443, "MOPS"},      // cpyfp [x3]!, [x1]!, x2!
		{0x19410443, "MOPS"},      // cpyfm
		{0x19810443, "MOPS"},      // cpyfe
		{0x1d010443, "MOPS"},      // cpyp
		{0x19c20420, "MOPS"},      // setp [x0]!, x1!, x2
		{0x1dc24420, "MOPS"},      // setgm [x0]!, x1!, x2
		{0xd4000001, "svc"},
		{0xd4001001, "svc"}, // svc #0x80
		{0xd4200000, "brk"},
		{0xd43e0000, "brk"}, // brk #0xf000
		{0xd4400000, "hlt"},
		{0xd4000002, "hvc"},
		{0xd4000003, "smc"},
		{0xd4a00001, "dcps"},
		{0xd69f03e0, "eret"},
		{0xd6bf03e0, "drps"},
		{0xd63f03c0, "blr x30"},
		{0xd63f081f, "blraa"}, // blraaz x0
		{0xd73f0a00, "blraa"}, // blraa x16, x0
		{0x00000000, "udf"},
		{0x0000dead, "udf"},
		{0x02000000, "unallocated"},
		{0x06000000, "unallocated"},
		{0x55000000, "unallocated"}, // b.cond with o1 = 1
		{0x74000000, "unallocated"}, // ARMv9.6 cb<cc> (pc-relative, not handled)
		{0xdc000000, "unallocated"}, // ldr literal, V=1, opc=11
		{0xd6000000, "unallocated"}, // branch (register) with op2 != 11111
		{0xd65f0001, "unallocated"}, // ret with op4 != 0
	}
	for _, tc := range tests {
		in, err := Decode(tc.word, 0x1000)
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%#08x: got %v (%v), want refused", tc.word, in.Kind, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%#08x: %q does not say %q", tc.word, err, tc.why)
		}
	}
}

func TestKindString(t *testing.T) {
	if s := KindTBZ.String(); s != "tbz/tbnz" {
		t.Errorf("KindTBZ = %q", s)
	}
	if s := Kind(200).String(); s != "Kind(200)" {
		t.Errorf("Kind(200) = %q", s)
	}
}
