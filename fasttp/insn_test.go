package fasttp

import (
	"debug/elf"
	"errors"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

func TestDecodeInsn(t *testing.T) {
	const addr = 0x401000
	tests := []struct {
		name    string
		code    []byte
		wantLen int
		kind    InsnKind
		enc     Encoding
		ripOff  int    // -1: no rip-relative operand
		target  uint64 // relative branches only
	}{
		{"endbr64 (x86asm: 1 byte)", []byte{0xf3, 0x0f, 0x1e, 0xfa}, 4, KindPlain, EncLegacy, -1, 0},
		{"endbr32", []byte{0xf3, 0x0f, 0x1e, 0xfb}, 4, KindPlain, EncLegacy, -1, 0},
		{"vzeroupper", []byte{0xc5, 0xf8, 0x77}, 3, KindPlain, EncVEX, -1, 0},
		{"vmovdqu xmm0,[rip+x] (VEX rip-relative)", []byte{0xc5, 0xfa, 0x6f, 0x05, 1, 2, 3, 4}, 8, KindPlain, EncVEX, 4, 0},
		{"vpcmpeqb ymm1,ymm0,[rip+x] (3-byte VEX)", []byte{0xc4, 0xe2, 0x7d, 0x00, 0x0d, 0x10, 0, 0, 0}, 9, KindPlain, EncVEX, 5, 0},
		{"vpshufd xmm0,[rip+x],imm8", []byte{0xc5, 0xf9, 0x70, 0x05, 0, 0, 0, 0, 0x1b}, 9, KindPlain, EncVEX, 4, 0},
		{"vpalignr ymm (0f3a map imm8)", []byte{0xc4, 0xe3, 0x7d, 0x0f, 0xc1, 0x04}, 6, KindPlain, EncVEX, -1, 0},
		{"vmovdqu64 zmm16,[rip+x] (EVEX)", []byte{0x62, 0xe1, 0xfe, 0x48, 0x6f, 0x05, 0, 1, 0, 0}, 10, KindPlain, EncEVEX, 6, 0},
		{"vpternlogd zmm (EVEX map 3 imm8)", []byte{0x62, 0xf3, 0x75, 0x48, 0x25, 0xc2, 0x96}, 7, KindPlain, EncEVEX, -1, 0},
		{"push rbp", []byte{0x55}, 1, KindPlain, EncLegacy, -1, 0},
		{"mov rbp,rsp", []byte{0x48, 0x89, 0xe5}, 3, KindPlain, EncLegacy, -1, 0},
		{"sub rsp,0x20", []byte{0x48, 0x83, 0xec, 0x20}, 4, KindPlain, EncLegacy, -1, 0},
		{"mov rax,[rip+0x10]", []byte{0x48, 0x8b, 0x05, 0x10, 0, 0, 0}, 7, KindPlain, EncLegacy, 3, 0},
		{"cmp byte [rip+x],imm8", []byte{0x80, 0x3d, 0x10, 0, 0, 0, 0x05}, 7, KindPlain, EncLegacy, 2, 0},
		{"mov dword [rip+x],imm32", []byte{0xc7, 0x05, 0x10, 0, 0, 0, 1, 2, 3, 4}, 10, KindPlain, EncLegacy, 2, 0},
		{"mov word [rip+x],imm16", []byte{0x66, 0xc7, 0x05, 0x10, 0, 0, 0, 1, 2}, 9, KindPlain, EncLegacy, 3, 0},
		{"test byte [rax],imm8 (f6 /0)", []byte{0xf6, 0x00, 0x11}, 3, KindPlain, EncLegacy, -1, 0},
		{"test eax,imm32 (f7 /0)", []byte{0xf7, 0xc0, 1, 2, 3, 4}, 6, KindPlain, EncLegacy, -1, 0},
		{"test ax,imm16 (66 f7 /0)", []byte{0x66, 0xf7, 0xc0, 1, 2}, 5, KindPlain, EncLegacy, -1, 0},
		{"neg eax (f7 /3, no imm)", []byte{0xf7, 0xd8}, 2, KindPlain, EncLegacy, -1, 0},
		{"movabs rax,imm64", []byte{0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8}, 10, KindPlain, EncLegacy, -1, 0},
		{"mov ax,imm16", []byte{0x66, 0xb8, 1, 2}, 4, KindPlain, EncLegacy, -1, 0},
		{"movabs al,moffs64", []byte{0xa0, 1, 2, 3, 4, 5, 6, 7, 8}, 9, KindPlain, EncLegacy, -1, 0},
		{"movabs moffs64,rax", []byte{0x48, 0xa3, 1, 2, 3, 4, 5, 6, 7, 8}, 10, KindPlain, EncLegacy, -1, 0},
		{"enter 0x10,0", []byte{0xc8, 0x10, 0x00, 0x00}, 4, KindPlain, EncLegacy, -1, 0},
		{"lea rax,[rsp+rbx*2+0x100]", []byte{0x48, 0x8d, 0x84, 0x5c, 0, 1, 0, 0}, 8, KindPlain, EncLegacy, -1, 0},
		{"mov eax,[disp32] (SIB, no base: not rip-relative)", []byte{0x8b, 0x04, 0x25, 0, 0x10, 0, 0}, 7, KindPlain, EncLegacy, -1, 0},
		{"mov rax,fs:[0x28]", []byte{0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0}, 9, KindPlain, EncLegacy, -1, 0},
		{"nop dword [rax+rax+0]", []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}, 5, KindPlain, EncLegacy, -1, 0},
		{"pshufd xmm0,xmm1,imm8", []byte{0x66, 0x0f, 0x70, 0xc1, 0x1b}, 5, KindPlain, EncLegacy, -1, 0},
		{"pcmpistri (0f3a)", []byte{0x66, 0x0f, 0x3a, 0x63, 0xc1, 0x0c}, 6, KindPlain, EncLegacy, -1, 0},
		{"pshufb xmm0,[rip+x] (0f38)", []byte{0x66, 0x0f, 0x38, 0x00, 0x05, 0, 0, 0, 0}, 9, KindPlain, EncLegacy, 5, 0},
		{"jmp rel8", []byte{0xeb, 0x10}, 2, KindJmpRel8, EncLegacy, -1, addr + 2 + 0x10},
		{"jmp rel8 backwards", []byte{0xeb, 0xfe}, 2, KindJmpRel8, EncLegacy, -1, addr},
		{"jmp rel32", []byte{0xe9, 0x00, 0x01, 0, 0}, 5, KindJmpRel32, EncLegacy, -1, addr + 5 + 0x100},
		{"je rel8", []byte{0x74, 0x05}, 2, KindJccRel8, EncLegacy, -1, addr + 7},
		{"jne rel32", []byte{0x0f, 0x85, 0xf0, 0xff, 0xff, 0xff}, 6, KindJccRel32, EncLegacy, -1, addr + 6 - 0x10},
		{"call rel32", []byte{0xe8, 0x10, 0, 0, 0}, 5, KindCallRel32, EncLegacy, -1, addr + 0x15},
		{"loop rel8", []byte{0xe2, 0xfc}, 2, KindLoopRel8, EncLegacy, -1, addr - 2},
		{"jrcxz rel8", []byte{0xe3, 0x03}, 2, KindLoopRel8, EncLegacy, -1, addr + 5},
		{"ret", []byte{0xc3}, 1, KindRet, EncLegacy, -1, 0},
		{"ret imm16", []byte{0xc2, 0x08, 0x00}, 3, KindRet, EncLegacy, -1, 0},
		{"bnd ret", []byte{0xf2, 0xc3}, 2, KindRet, EncLegacy, -1, 0},
		{"jmp rax", []byte{0xff, 0xe0}, 2, KindIndirectJmp, EncLegacy, -1, 0},
		{"jmp [rip+x]", []byte{0xff, 0x25, 0x10, 0, 0, 0}, 6, KindIndirectJmp, EncLegacy, 2, 0},
		{"call r11", []byte{0x41, 0xff, 0xd3}, 3, KindIndirectCall, EncLegacy, -1, 0},
		{"call [rip+x]", []byte{0xff, 0x15, 0x10, 0, 0, 0}, 6, KindIndirectCall, EncLegacy, 2, 0},
		{"call [rsp+8]", []byte{0xff, 0x54, 0x24, 0x08}, 4, KindIndirectCall, EncLegacy, -1, 0},
		{"int3", []byte{0xcc}, 1, KindInt3, EncLegacy, -1, 0},
		{"syscall", []byte{0x0f, 0x05}, 2, KindSyscall, EncLegacy, -1, 0},
		{"xbegin rel32", []byte{0xc7, 0xf8, 0x10, 0, 0, 0}, 6, KindXBegin, EncLegacy, -1, addr + 0x16},
		{"lock cmpxchg [rdi],esi", []byte{0xf0, 0x0f, 0xb1, 0x37}, 4, KindPlain, EncLegacy, -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := append(append([]byte(nil), tt.code...), 0x90, 0x90, 0x90, 0x90)
			in, err := DecodeInsn(code, addr)
			if err != nil {
				t.Fatalf("DecodeInsn(% x): %v", tt.code, err)
			}
			if in.Len != tt.wantLen || in.Kind != tt.kind || in.Encoding != tt.enc || in.RIPDispOffset != tt.ripOff {
				t.Errorf("got len %d kind %v enc %d ripoff %d; want %d %v %d %d", in.Len, in.Kind, in.Encoding, in.RIPDispOffset, tt.wantLen, tt.kind, tt.enc, tt.ripOff)
			}
			if tt.target != 0 && in.Target != tt.target {
				t.Errorf("target %#x, want %#x", in.Target, tt.target)
			}
			if string(in.Bytes) != string(tt.code) {
				t.Errorf("bytes % x, want % x", in.Bytes, tt.code)
			}
		})
	}
}

func TestDecodeInsnRefuses(t *testing.T) {
	tests := []struct {
		name      string
		code      []byte
		truncated bool
	}{
		{"3DNow!", []byte{0x0f, 0x0f, 0xc0, 0x0c}, false},
		{"push es (invalid in 64-bit)", []byte{0x06}, false},
		{"XOP", []byte{0x8f, 0xe8, 0x78, 0xc0, 0xc1, 0x00}, false},
		{"VEX after REX", []byte{0x48, 0xc5, 0xf8, 0x77}, false},
		{"eip-relative (67h)", []byte{0x67, 0x8b, 0x05, 0, 0, 0, 0}, false},
		{"66h call rel16", []byte{0x66, 0xe8, 0, 0}, false},
		{"vzeroupper with vvvv != 1111 (#UD)", []byte{0xc5, 0x30, 0x77, 0x30}, false},
		{"REX then VEX", []byte{0x40, 0xc4, 0xe2, 0x7d, 0x00, 0xc0}, false},
		{"too long", []byte{0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x90}, false},
		{"truncated disp32", []byte{0x48, 0x8b, 0x05, 0x10}, true},
		{"truncated imm64", []byte{0x48, 0xb8, 1, 2, 3}, true},
		{"empty", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := DecodeInsn(tt.code, 0x1000)
			if err == nil {
				t.Fatalf("DecodeInsn(% x) = len %d, want an error", tt.code, in.Len)
			}
			if tt.truncated != errors.Is(err, ErrTruncated) || tt.truncated == errors.Is(err, ErrRefused) {
				t.Errorf("error %v: truncated=%v refused=%v, want truncated=%v", err, errors.Is(err, ErrTruncated), errors.Is(err, ErrRefused), tt.truncated)
			}
		})
	}
}

func FuzzDecodeInsn(f *testing.F) {
	for _, seed := range [][]byte{
		{0xf3, 0x0f, 0x1e, 0xfa}, {0xc5, 0xf8, 0x77}, {0x48, 0x8b, 0x05, 1, 2, 3, 4},
		{0x62, 0xe1, 0xfe, 0x48, 0x6f, 0x05, 0, 1, 0, 0}, {0xc4, 0xe2, 0x7d, 0x00, 0x0d, 0x10, 0, 0, 0},
		{0xe8, 1, 2, 3, 4}, {0x0f, 0x85, 1, 2, 3, 4}, {0xff, 0x15, 0, 0, 0, 0}, {0x66, 0xc7, 0x05, 0, 0, 0, 0, 1, 2},
		{0xf7, 0x05, 1, 2, 3, 4, 5, 6, 7, 8}, {0xa1, 1, 2, 3, 4, 5, 6, 7, 8}, {0xc8, 1, 2, 3},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, code []byte) {
		in, err := DecodeInsn(code, 0x7f0000001000)
		if err != nil {
			return
		}
		if in.Len < 1 || in.Len > MaxInsnLen || in.Len > len(code) || len(in.Bytes) != in.Len {
			t.Fatalf("bad length %d for % x", in.Len, code)
		}
		if in.RIPDispOffset >= 0 && in.RIPDispOffset+4 > in.Len {
			t.Fatalf("rip displacement at %d outside %d-byte instruction", in.RIPDispOffset, in.Len)
		}
		if !isEndbr(in.Bytes) && !in.vzero {
			inst, err := x86asm.Decode(code, 64)
			if err == nil && inst.Op != 0 && inst.Len != in.Len {
				t.Fatalf("% x: length %d, x86asm says %d (%v)", code, in.Len, inst.Len, inst)
			}
			if in.Encoding == EncLegacy && (err != nil || inst.Op == 0) {
				t.Fatalf("% x: legacy instruction accepted that x86asm rejects", code)
			}
		}
		// Relocation of anything decoded must not panic either.
		if out, err := RelocateInsn(in, 0x7f0000801000); err == nil && len(out) == 0 {
			t.Fatalf("% x: relocated to nothing", code)
		}
	})
}

// TestDecodeRealText sweeps the whole .text of real binaries linearly
// (resynchronising one byte on after a refusal) and checks that almost every
// instruction decodes. libc's .text includes the AVX2/EVEX string functions.
func TestDecodeRealText(t *testing.T) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/gdb"} {
		t.Run(path, func(t *testing.T) {
			ef, err := elf.Open(path)
			if err != nil {
				t.Skipf("no %s: %v", path, err)
			}
			defer ef.Close()
			text := ef.Section(".text")
			if text == nil {
				t.Fatalf("%s has no .text", path)
			}
			data, err := text.Data()
			if err != nil {
				t.Fatalf("read .text: %v", err)
			}
			var total, refused, vex, vexRIP int
			reasons := map[string]int{}
			for off := uint64(0); off < uint64(len(data)); {
				pc := text.Addr + off
				in, err := DecodeInsn(data[off:min(off+MaxInsnLen, uint64(len(data)))], pc)
				total++
				if err != nil {
					refused++
					if len(reasons) < 20 {
						reasons[err.Error()]++
					}
					off++
					continue
				}
				if in.Encoding != EncLegacy {
					vex++
					if in.RIPDispOffset >= 0 {
						vexRIP++
					}
				}
				off += uint64(in.Len)
			}
			rate := float64(refused) / float64(total)
			t.Logf("%s: %d instructions (%d VEX/EVEX, %d of them rip-relative), %d refused (%.4f%%)", path, total, vex, vexRIP, refused, 100*rate)
			for r, n := range reasons {
				t.Logf("  %d x %s", n, r)
			}
			if total < 10000 {
				t.Errorf("only %d instructions swept", total)
			}
			if rate >= 0.01 {
				t.Errorf("refusal rate %.3f%% >= 1%%", 100*rate)
			}
		})
	}
}
