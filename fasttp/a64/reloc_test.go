package a64

import (
	"errors"
	"strings"
	"testing"
)

// TestRelocateTable checks the sequence of every kind and form, as
// arm64asm disassembles it with absolute targets. The site is S; the
// resume address is S+4 unless said otherwise.
func TestRelocateTable(t *testing.T) {
	const S = 0x10000000
	near, mb2, gb8 := uint64(S+0x1000), uint64(S+0x200000), uint64(S+0x200000000)
	tests := []struct {
		name   string
		word   uint32
		to     uint64
		resume uint64 // 0: S+4
		veneer bool
		want   string // "; "-separated, or "error: ..."
	}{
		{"plain", 0x8b030041, near, 0, false, "add x1, x2, x3; b 0x10000004"},
		{"plain resume elsewhere", 0x8b030041, gb8, gb8 + 0x100, false, "add x1, x2, x3; b 0x210000100"},
		{"adr near", 0x300091a3, near, 0, false, "adr x3, 0x10001235; b 0x10000004"},
		{"adr 2MB", 0x300091a3, mb2, 0, false, "adrp x3, 0x10001000; add x3, x3, #0x235; b 0x10000004"},
		{"adr 8GB", 0x300091a3, gb8, gb8 + 0x100, false, "mov x3, #0x1235; movk x3, #0x1000, lsl #16; b 0x210000100"},
		{"adr xzr", 0x70ffffff, mb2, 0, false, "b 0x10000004"},
		{"adrp 2MB page", 0xb0ffffe5, mb2, 0, false, "adrp x5, 0xfffd000; b 0x10000004"},
		{"adrp 8GB", 0xb0ffffe5, gb8, gb8 + 0x100, false, "mov x5, #0xd000; movk x5, #0xfff, lsl #16; b 0x210000100"},
		{"ldr x near", 0x58000041, near, 0, false, "ldr x1, 0x10000008; b 0x10000004"},
		{"ldr x 2MB folded", 0x58000041, mb2, 0, false, "adrp x1, 0x10000000; ldr x1, [x1,#8]; b 0x10000004"},
		{"ldr x 2MB unaligned", 0x58000021, mb2, 0, false, "adrp x1, 0x10000000; add x1, x1, #0x4; ldr x1, [x1]; b 0x10000004"},
		{"ldr w 2MB", 0x18000022, mb2, 0, false, "adrp x2, 0x10000000; ldr w2, [x2,#4]; b 0x10000004"},
		{"ldrsw 8GB", 0x98000083, gb8, gb8 + 0x100, false, "mov x3, #0x10; movk x3, #0x1000, lsl #16; ldrsw x3, [x3]; b 0x210000100"},
		{"ldr xzr 2MB", 0x5800005f, mb2, 0, false, "str x16, [sp,#-16]!; adrp x16, 0x10000000; ldr xzr, [x16,#8]; ldr x16, [sp],#16; b 0x10000004"},
		{"ldr s near", 0x1c000044, near, 0, false, "ldr s4, 0x10000008; b 0x10000004"},
		{"ldr d 2MB", 0x5c000085, mb2, 0, false, "str x16, [sp,#-16]!; adrp x16, 0x10000000; ldr d5, [x16,#16]; ldr x16, [sp],#16; b 0x10000004"},
		{"ldr q 2MB unaligned", 0x9c0000c6, mb2, 0, false, "str x16, [sp,#-16]!; adrp x16, 0x10000000; add x16, x16, #0x18; ldr q6, [x16]; ldr x16, [sp],#16; b 0x10000004"},
		{"ldr q 8GB", 0x9c0000c6, gb8, gb8 + 0x100, false, "str x16, [sp,#-16]!; mov x16, #0x18; movk x16, #0x1000, lsl #16; ldr q6, [x16]; ldr x16, [sp],#16; b 0x210000100"},
		{"prfm near", 0xd8000040, near, 0, false, "prfm pldl1keep, 0x10000008; b 0x10000004"},
		{"prfm 2MB dropped", 0xd8000040, mb2, 0, false, "b 0x10000004"},
		{"b near", 0x14000010, near, 0, false, "b 0x10000040"},
		{"b 2MB", 0x17ffffff, mb2, 0, false, "b 0xffffffc"},
		{"b 8GB", 0x14000010, gb8, gb8 + 0x100, false, "error: out of range"},
		{"b 8GB veneer", 0x14000010, gb8, gb8 + 0x100, true, "mov x16, #0x40; movk x16, #0x1000, lsl #16; br x16"},
		{"bl near", 0x97ffffff, near, 0, false, "adr x30, 0x10000004; b 0xffffffc"},
		{"bl 2MB", 0x97ffffff, mb2, 0, false, "adrp x30, 0x10000000; add x30, x30, #0x4; b 0xffffffc"},
		{"bl 8GB veneer", 0x97ffffff, gb8, gb8 + 0x100, true, "mov x30, #0x4; movk x30, #0x1000, lsl #16; mov x16, #0xfffc; movk x16, #0xfff, lsl #16; br x16"},
		{"bl 8GB", 0x97ffffff, gb8, gb8 + 0x100, false, "error: out of range"},
		{"b.cond near", 0x5400008b, near, 0, false, "b.lt 0x10000010; b 0x10000004"},
		{"b.cond 2MB", 0x5400008b, mb2, 0, false, "b.ge 0x10200008; b 0x10000010; b 0x10000004"},
		{"b.al 2MB", 0x5400008e, mb2, 0, false, "b 0x10000010"},
		{"b.nv 2MB", 0x5400008f, mb2, 0, false, "b 0x10000010"},
		{"bc.eq 2MB", 0x54000050, mb2, 0, false, ".word 0x54000051; b 0x10000008; b 0x10000004"},
		{"b.cond 8GB", 0x5400008b, gb8, gb8 + 0x100, false, "error: out of range"},
		{"b.cond 8GB veneer", 0x5400008b, gb8, gb8 + 0x100, true, "error: out of range"},
		{"cbz near", 0xb4000061, near, 0, false, "cbz x1, 0x1000000c; b 0x10000004"},
		{"cbz 2MB", 0xb4000061, mb2, 0, false, "cbnz x1, 0x10200008; b 0x1000000c; b 0x10000004"},
		{"cbnz w 2MB", 0x35ffffe2, mb2, 0, false, "cbz w2, 0x10200008; b 0xffffffc; b 0x10000004"},
		{"tbz near", 0x36080062, near, 0, false, "tbz w2, #1, 0x1000000c; b 0x10000004"},
		{"tbz 40KB", 0x36080062, S + 0xa000, 0, false, "tbnz w2, #1, 0x1000a008; b 0x1000000c; b 0x10000004"},
		{"tbnz x63 2MB", 0xb7f80003, mb2, 0, false, "tbz x3, #63, 0x10200008; b 0x10000000; b 0x10000004"},
		{"blr", 0xd63f0060, mb2, 0, false, "adrp x30, 0x10000000; add x30, x30, #0x4; ret x3"},
		{"blr near", 0xd63f0060, near, 0, false, "adr x30, 0x10000004; ret x3"},
		{"br", 0xd61f0060, gb8, gb8 + 0x100, false, "br x3; b 0x210000100"},
		{"resume out of range", 0x8b030041, gb8, 0, false, "error: out of range"},
		{"misaligned", 0x8b030041, near + 2, 0, false, "error: misaligned"},
	}
	for _, tc := range tests {
		in, err := Decode(tc.word, S)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		resume := tc.resume
		if resume == 0 {
			resume = S + 4
		}
		code, err := RelocateWith(in, tc.to, resume, Options{Veneer: tc.veneer})
		got := disasm(code, tc.to)
		if err != nil {
			got = "error: " + err.Error()
			if !strings.HasPrefix(tc.want, "error: ") || !strings.Contains(got, strings.TrimPrefix(tc.want, "error: ")) {
				t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
			}
			if strings.Contains(tc.want, "range") && !errors.Is(err, ErrOutOfRange) {
				t.Errorf("%s: %v does not wrap ErrOutOfRange", tc.name, err)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
		if len(code) > MaxWords {
			t.Errorf("%s: %d words > MaxWords", tc.name, len(code))
		}
	}
}

// TestRelocateEdges checks the exact reach of every branch form: the
// last displacement that fits uses the short form, one more the long one.
func TestRelocateEdges(t *testing.T) {
	const S = 0x40000000
	tests := []struct {
		name  string
		word  uint32 // with its target at S+4
		limit uint64 // the form's forward reach
		short int    // words of the short sequence (with the branch back)
	}{
		{"b.cond", 0x54000020, rangeCond, 2},
		{"cbz", 0xb4000021, rangeCond, 2},
		{"tbz", 0x36000021, rangeTBZ, 2},
		{"ldr literal", 0x58000021, rangeCond, 2},
		{"adr", 0x10000021, rangeCond, 2},
	}
	for _, tc := range tests {
		in, err := Decode(tc.word, S)
		if err != nil {
			t.Fatal(err)
		}
		// Backward: the target S+4 is -limit from to = S+4+limit (in
		// reach), -limit-4 one word further (not). Forward: +limit-4 from
		// to = S+8-limit (in reach), +limit from one word before (not).
		for _, c := range []struct {
			to    uint64
			short bool
		}{{S + 4 + tc.limit, true}, {S + 8 + tc.limit, false}, {S + 8 - tc.limit, true}, {S + 4 - tc.limit, false}} {
			code, err := Relocate(in, c.to, c.to+0x100)
			if err != nil {
				t.Fatalf("%s from %#x: %v", tc.name, c.to, err)
			}
			if (len(code) == tc.short) != c.short {
				t.Errorf("%s from %#x: %s, want short form %v", tc.name, c.to, disasm(code, c.to), c.short)
			}
		}
	}
	in, _ := Decode(0x14000001, S) // b .+4
	for _, c := range []struct {
		to uint64
		ok bool
	}{{S + 4 + rangeB, true}, {S + 8 + rangeB, false}, {S + 4 - (rangeB - 4), true}, {S - rangeB, false}} {
		_, err := Relocate(in, c.to, c.to+4)
		if (err == nil) != c.ok {
			t.Errorf("b to S+4 from %#x: %v, want ok=%v", c.to, err, c.ok)
		}
	}
}

// TestRelocatedSequencesDecode checks that every emitted sequence is made
// of instructions Decode accepts (no refused or unallocated word) and that
// arm64asm knows (but bc.cond), over random instructions and placements.
func TestRelocatedSequencesDecode(t *testing.T) {
	words := []uint32{0x300091a3, 0xb0ffffe5, 0x58000041, 0x98000083, 0x1c000044, 0x9c0000c6, 0xd8000040,
		0x14000010, 0x97ffffff, 0x5400008b, 0xb4000061, 0x36080062, 0xd63f0060, 0x8b030041}
	for _, w := range words {
		in, _ := Decode(w, 0x10000000)
		for _, to := range []uint64{0x10001000, 0x10200000, 0x10400000 + 0x7ffc, 0x200000000} {
			code, err := RelocateWith(in, to, to+0x100, Options{Veneer: true})
			if err != nil {
				continue
			}
			for i, c := range code {
				if _, err := Decode(c, to+4*uint64(i)); err != nil {
					t.Errorf("%#08x to %#x: word %d: %v", w, to, i, err)
				}
				if s := dis1(c, 0); strings.HasPrefix(s, ".word") {
					t.Errorf("%#08x to %#x: word %d %#08x unknown to arm64asm", w, to, i, c)
				}
			}
		}
	}
}

// TestHarnessEncodings checks the test-only encoders with arm64asm.
func TestHarnessEncodings(t *testing.T) {
	tests := []struct {
		w    uint32
		want string
	}{
		{tLdrX(3, 0, 536), "ldr x3, [x0,#536]"},
		{tStrX(29, 0, 544), "str x29, [x0,#544]"},
		{tLdrQ(7, 0, 576+16*7), "ldr q7, [x0,#688]"},
		{tStrQ(31, 0, 1088+16*31), "str q31, [x0,#1584]"},
		{tMovz(0, 2), "mov x0, #0x2"},
		{tB(0, 0x800), "b 0x800"},
		{tLdrLitX(1, 0, 0x80), "ldr x1, 0x80"},
		{tMovX1SP, "mov x1, sp"}, {tMovSPX1, "mov sp, x1"}, {tMovX0X1, "mov x0, x1"},
		{tMsrNZCVX1, "msr s3_3_c4_c2_0, x1"}, {tMrsX1NZCV, "mrs x1, s3_3_c4_c2_0"},
		{tPushX0, "str x0, [sp,#-16]!"}, {tStrX1SP8, "str x1, [sp,#8]"}, {tPopX1X2, "ldp x1, x2, [sp],#16"},
		{tRet, "ret"}, {tMovX2X0, "mov x2, x0"}, {tDcCvauX2, "dc cvau, x2"}, {tIcIvauX2, ".word 0xd50b7522"},
		{tAddX2X2_4, "add x2, x2, #0x4"}, {tCmpX2X1, "cmp x2, x1"}, {tBLoMinus12, "b.cc 0xfffffffffffffff4"},
		{tDsbIsh, "dsb ish"}, {tIsb, "isb"}, {tAddX1X2X3, "add x1, x2, x3"}, {tSubsX4X5X6, "subs x4, x5, x6"},
		{tStrX7SPm32, "stur x7, [sp,#-32]"}, {tStpX8X9SP16, "stp x8, x9, [sp,#16]"},
		{tFaddV, "fadd v0.4s, v1.4s, v2.4s"},
		{wordPushIP0, "str x16, [sp,#-16]!"}, {wordPopIP0, "ldr x16, [sp],#16"}, {wordBRIP0, "br x16"},
	}
	for _, tc := range tests {
		if got := dis1(tc.w, 0); got != tc.want {
			t.Errorf("%#08x: %s, want %s", tc.w, got, tc.want)
		}
	}
}

// FuzzDecodeRelocate checks that any word either is refused or relocates
// (to any place, resume in reach) into at most MaxWords words that Decode
// accepts, ending with a branch unless it branches itself.
func FuzzDecodeRelocate(f *testing.F) {
	for _, w := range []uint32{0x300091a3, 0x58000041, 0x9c0000c6, 0x97ffffff, 0x5400008b, 0x36080062, 0xd63f0060, 0xc85f7c20} {
		f.Add(w, uint64(0x400000), uint64(0x10000000))
	}
	f.Fuzz(func(t *testing.T, w uint32, pc, to uint64) {
		pc, to = pc&^3, to&^3
		in, err := Decode(w, pc)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatal(err)
			}
			return
		}
		code, err := RelocateWith(in, to, to+0x100, Options{Veneer: true})
		if err != nil {
			if !errors.Is(err, ErrOutOfRange) {
				t.Fatal(err)
			}
			return
		}
		if len(code) == 0 || len(code) > MaxWords {
			t.Fatalf("%d words", len(code))
		}
		for i, c := range code {
			if _, err := Decode(c, to+4*uint64(i)); err != nil {
				t.Fatalf("word %d: %v", i, err)
			}
		}
		last, _ := Decode(code[len(code)-1], to+4*uint64(len(code)-1))
		if last.Kind != KindB && last.Word != wordBRIP0 && last.Word&0xfffffc1f != 0xd65f0000 {
			t.Fatalf("ends with %s", dis1(last.Word, 0))
		}
	})
}
