package fasttp

import (
	"debug/elf"
	"errors"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// decodeAll decodes code (located at addr) with x86asm.
func decodeAll(t *testing.T, code []byte, addr uint64) []x86asm.Inst {
	t.Helper()
	var out []x86asm.Inst
	for off := 0; off < len(code); {
		if off+4 <= len(code) && isEndbr(code[off:off+4]) { // x86asm: 1 byte
			out = append(out, x86asm.Inst{Op: x86asm.NOP, Len: 4, PCRelOff: off})
			off += 4
			continue
		}
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			t.Fatalf("x86asm cannot decode emitted % x at +%d: %v", code, off, err)
		}
		inst.PCRelOff = off // reuse: where this instruction starts
		out = append(out, inst)
		off += inst.Len
	}
	return out
}

// branchTarget is the absolute target of a relative branch decoded at
// addr+inst.PCRelOff (see decodeAll).
func branchTarget(t *testing.T, inst x86asm.Inst, addr uint64) uint64 {
	t.Helper()
	rel, ok := inst.Args[0].(x86asm.Rel)
	if !ok {
		t.Fatalf("%v: not a relative branch", inst)
	}
	return addr + uint64(inst.PCRelOff+inst.Len) + uint64(int64(rel))
}

// ripTarget is the address referenced by the rip-relative memory operand of
// inst, decoded at addr+inst.PCRelOff.
func ripTarget(t *testing.T, inst x86asm.Inst, addr uint64) uint64 {
	t.Helper()
	for _, a := range inst.Args {
		if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.RIP {
			// x86asm reports a negative disp32 zero-extended.
			return addr + uint64(inst.PCRelOff+inst.Len) + uint64(int64(int32(m.Disp)))
		}
	}
	t.Fatalf("%v: no rip-relative operand", inst)
	return 0
}

func TestRelocateInsnEncodings(t *testing.T) {
	const from = 0x555555554000
	const to = from + 0x7000_0000 // 1.75 GB away: rel8 targets need rel32 now
	tests := []struct {
		name  string
		code  []byte
		ops   []x86asm.Op // the emitted sequence
		check func(t *testing.T, in Insn, got []x86asm.Inst)
	}{
		{"mov rax,[rip+x]", []byte{0x48, 0x8b, 0x05, 0x10, 0, 0, 0}, []x86asm.Op{x86asm.MOV}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if w, _ := in.RIPTarget(); ripTarget(t, got[0], to) != w {
				t.Errorf("rip target %#x, want %#x", ripTarget(t, got[0], to), w)
			}
		}},
		{"cmp byte [rip-x],imm8", []byte{0x80, 0x3d, 0xf0, 0xff, 0xff, 0xff, 0x05}, []x86asm.Op{x86asm.CMP}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if w, _ := in.RIPTarget(); ripTarget(t, got[0], to) != w {
				t.Errorf("rip target %#x, want %#x", ripTarget(t, got[0], to), w)
			}
			if got[0].Args[1] != x86asm.Imm(5) {
				t.Errorf("immediate %v, want 5", got[0].Args[1])
			}
		}},
		{"jmp rel8", []byte{0xeb, 0x10}, []x86asm.Op{x86asm.JMP}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if got[0].Len != 5 || branchTarget(t, got[0], to) != from+0x12 {
				t.Errorf("%v (len %d) goes to %#x, want rel32 to %#x", got[0], got[0].Len, branchTarget(t, got[0], to), from+0x12)
			}
		}},
		{"je rel8", []byte{0x74, 0xfe}, []x86asm.Op{x86asm.JE}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if got[0].Len != 6 || branchTarget(t, got[0], to) != from {
				t.Errorf("%v goes to %#x, want %#x", got[0], branchTarget(t, got[0], to), uint64(from))
			}
		}},
		{"bnd jmp rel32", []byte{0xf2, 0xe9, 0, 1, 0, 0}, []x86asm.Op{x86asm.JMP}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if branchTarget(t, got[0], to) != from+0x106 {
				t.Errorf("goes to %#x, want %#x", branchTarget(t, got[0], to), from+0x106)
			}
		}},
		{"jg rel32", []byte{0x0f, 0x8f, 0, 1, 0, 0}, []x86asm.Op{x86asm.JG}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if branchTarget(t, got[0], to) != from+0x106 {
				t.Errorf("goes to %#x, want %#x", branchTarget(t, got[0], to), from+0x106)
			}
		}},
		{"call rel32", []byte{0xe8, 0x20, 0, 0, 0}, []x86asm.Op{x86asm.LEA, x86asm.MOV, x86asm.MOV, x86asm.JMP}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			lo, hi := got[1].Args[1].(x86asm.Imm), got[2].Args[1].(x86asm.Imm)
			if pushed := uint64(uint32(lo)) | uint64(uint32(hi))<<32; pushed != from+5 {
				t.Errorf("pushes %#x, want return address %#x", pushed, from+5)
			}
			if branchTarget(t, got[3], to) != from+0x25 {
				t.Errorf("jumps to %#x, want %#x", branchTarget(t, got[3], to), from+0x25)
			}
		}},
		{"call [rip+x]", []byte{0xff, 0x15, 0x00, 0x10, 0, 0}, []x86asm.Op{x86asm.PUSH, x86asm.PUSH, x86asm.MOV, x86asm.MOV, x86asm.RET}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if w, _ := in.RIPTarget(); ripTarget(t, got[0], to) != w {
				t.Errorf("pushes from %#x, want %#x", ripTarget(t, got[0], to), w)
			}
			lo, hi := got[2].Args[1].(x86asm.Imm), got[3].Args[1].(x86asm.Imm)
			if ret := uint64(uint32(lo)) | uint64(uint32(hi))<<32; ret != from+6 {
				t.Errorf("return address %#x, want %#x", ret, from+6)
			}
		}},
		{"call r11", []byte{0x41, 0xff, 0xd3}, []x86asm.Op{x86asm.PUSH, x86asm.PUSH, x86asm.MOV, x86asm.MOV, x86asm.RET}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if got[0].Args[0] != x86asm.R11 {
				t.Errorf("pushes %v, want R11", got[0].Args[0])
			}
		}},
		{"loop rel8", []byte{0xe2, 0xf0}, []x86asm.Op{x86asm.LOOP, x86asm.JMP, x86asm.JMP}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if branchTarget(t, got[0], to) != to+4 || branchTarget(t, got[1], to) != to+9 {
				t.Errorf("loop hops to %#x and skips to %#x, want %#x and %#x", branchTarget(t, got[0], to), branchTarget(t, got[1], to), to+4, to+9)
			}
			if branchTarget(t, got[2], to) != from+2-0x10 {
				t.Errorf("far jump to %#x, want %#x", branchTarget(t, got[2], to), from+2-0x10)
			}
		}},
		{"jecxz rel8 (67h kept)", []byte{0x67, 0xe3, 0x10}, []x86asm.Op{x86asm.JECXZ, x86asm.JMP, x86asm.JMP}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if got[0].Len != 3 || branchTarget(t, got[0], to) != to+5 || branchTarget(t, got[2], to) != from+0x13 {
				t.Errorf("emitted %v: hop to %#x, far jump to %#x", got, branchTarget(t, got[0], to), branchTarget(t, got[2], to))
			}
		}},
		{"ret", []byte{0xc3}, []x86asm.Op{x86asm.RET}, nil},
		{"syscall", []byte{0x0f, 0x05}, []x86asm.Op{x86asm.SYSCALL}, nil},
		{"jmp [rip+x]", []byte{0xff, 0x25, 0x10, 0, 0, 0}, []x86asm.Op{x86asm.JMP}, func(t *testing.T, in Insn, got []x86asm.Inst) {
			if w, _ := in.RIPTarget(); ripTarget(t, got[0], to) != w {
				t.Errorf("rip target %#x, want %#x", ripTarget(t, got[0], to), w)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := DecodeInsn(tt.code, from)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			code, err := RelocateInsn(in, to)
			if err != nil {
				t.Fatalf("RelocateInsn: %v", err)
			}
			got := decodeAll(t, code, to)
			if len(got) != len(tt.ops) {
				t.Fatalf("emitted %v, want ops %v", got, tt.ops)
			}
			for i, op := range tt.ops {
				if got[i].Op != op {
					t.Fatalf("instruction %d is %v, want %v", i, got[i], op)
				}
			}
			if tt.check != nil {
				tt.check(t, in, got)
			}
		})
	}
}

func TestRelocateInsnRefuses(t *testing.T) {
	const from = 0x400000
	tests := []struct {
		name string
		code []byte
		to   uint64
		want error
	}{
		{"int3", []byte{0xcc}, from + 0x1000, ErrNotRelocatable},
		{"xbegin", []byte{0xc7, 0xf8, 0, 0, 0, 0}, from + 0x1000, ErrNotRelocatable},
		{"far call", []byte{0xff, 0x18}, from + 0x1000, ErrNotRelocatable},
		{"rip-relative 3 GB away", []byte{0x48, 0x8b, 0x05, 0, 0, 0, 0}, from + 3<<30, ErrOutOfReach},
		{"jcc 3 GB away", []byte{0x74, 0x00}, from + 3<<30, ErrOutOfReach},
		{"call 3 GB away", []byte{0xe8, 0, 0, 0, 0}, from + 3<<30, ErrOutOfReach},
		{"call [rip] 3 GB away", []byte{0xff, 0x15, 0, 0, 0, 0}, from + 3<<30, ErrOutOfReach},
		{"data16 jmp rel8", []byte{0x66, 0xeb, 0x00}, from + 0x1000, ErrNotRelocatable},
		{"data16 loop", []byte{0x66, 0xe2, 0x00}, from + 0x1000, ErrNotRelocatable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := DecodeInsn(tt.code, from)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if code, err := RelocateInsn(in, tt.to); !errors.Is(err, tt.want) {
				t.Fatalf("RelocateInsn = % x, %v; want %v", code, err, tt.want)
			}
		})
	}
}

func TestRelocateRun(t *testing.T) {
	const from, to = 0x401000, 0x7effc0000000 // to: far more than 2 GB away
	// push rbp; mov rbp,rsp; je +2 (3+2 bytes cover the 5-byte jump)
	code := []byte{0x55, 0x48, 0x89, 0xe5, 0x74, 0x02, 0x90, 0x90}
	var insns []Insn
	for off := 0; off < 6; {
		in, err := DecodeInsn(code[off:], from+uint64(off))
		if err != nil {
			t.Fatal(err)
		}
		insns = append(insns, in)
		off += in.Len
	}
	const pad = from + 0x10000000
	out, heads, err := RelocateRun(insns, pad, from+6)
	if err != nil {
		t.Fatalf("RelocateRun: %v", err)
	}
	want := map[uint64]uint64{from: pad, from + 1: pad + 1, from + 4: pad + 4}
	for k, v := range want {
		if heads[k] != v {
			t.Errorf("heads[%#x] = %#x, want %#x", k, heads[k], v)
		}
	}
	got := decodeAll(t, out, pad)
	if len(got) != 4 || got[2].Op != x86asm.JE || got[3].Op != x86asm.JMP {
		t.Fatalf("emitted %v", got)
	}
	if branchTarget(t, got[2], pad) != from+8 || branchTarget(t, got[3], pad) != from+6 {
		t.Errorf("je to %#x, resume jmp to %#x; want %#x, %#x", branchTarget(t, got[2], pad), branchTarget(t, got[3], pad), from+8, from+6)
	}
	if _, _, err := RelocateRun(insns, to, from+6); !errors.Is(err, ErrOutOfReach) {
		t.Errorf("RelocateRun to %#x: %v, want ErrOutOfReach", uint64(to), err)
	}
	if _, _, err := RelocateRun([]Insn{insns[0], insns[2]}, pad, from+6); err == nil {
		t.Errorf("RelocateRun accepted non-consecutive instructions")
	}
}

// TestRelocateRealText relocates every instruction of libc's .text 1 GB
// away, decodes the result back with x86asm and checks that branch targets
// and (legacy-encoded) rip-relative operands still reach the original
// addresses. It also plans a jump site at every instruction boundary and
// logs how many are accepted.
func TestRelocateRealText(t *testing.T) {
	const path = "/lib/x86_64-linux-gnu/libc.so.6"
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
	const distance = 1 << 30
	var total, relocRefused, sites, sitesRefused, checkedRIP, checkedVEXRIP, checkedBranch int
	for off := uint64(0); off < uint64(len(data)); {
		pc := text.Addr + off
		in, err := DecodeInsn(data[off:min(off+MaxInsnLen, uint64(len(data)))], pc)
		if err != nil {
			off++
			continue
		}
		off += uint64(in.Len)
		total++
		sites++
		if _, err := PlanSite(data[pc-text.Addr:min(pc-text.Addr+20, uint64(len(data)))], pc); err != nil {
			sitesRefused++
		}
		to := pc + distance
		code, err := RelocateInsn(in, to)
		if err != nil {
			relocRefused++
			continue
		}
		got := decodeAll(t, code, to)
		switch in.Kind {
		case KindJmpRel8, KindJmpRel32, KindJccRel8, KindJccRel32:
			checkedBranch++
			if tg := branchTarget(t, got[0], to); tg != in.Target {
				t.Fatalf("%#x % x: relocated branch goes to %#x, want %#x", pc, in.Bytes, tg, in.Target)
			}
		case KindCallRel32, KindLoopRel8:
			checkedBranch++
			if tg := branchTarget(t, got[len(got)-1], to); tg != in.Target {
				t.Fatalf("%#x % x: relocated %v goes to %#x, want %#x", pc, in.Bytes, in.Kind, tg, in.Target)
			}
		}
		if want, ok := in.RIPTarget(); ok && in.Encoding == EncLegacy {
			checkedRIP++
			if tg := ripTarget(t, got[0], to); tg != want {
				t.Fatalf("%#x % x: relocated operand reaches %#x, want %#x", pc, in.Bytes, tg, want)
			}
		} else if ok && in.Kind == KindPlain {
			// VEX/EVEX: x86asm does not see the operand; use our decoder.
			checkedVEXRIP++
			back, err := DecodeInsn(code, to)
			if err != nil || back.Len != len(code) {
				t.Fatalf("%#x: relocated % x does not decode back: %v", pc, code, err)
			}
			if tg, _ := back.RIPTarget(); tg != want {
				t.Fatalf("%#x % x: relocated VEX operand reaches %#x, want %#x", pc, in.Bytes, tg, want)
			}
		}
	}
	t.Logf("%s: %d instructions, %d not relocatable; %d branches, %d rip-relative and %d VEX/EVEX rip-relative operands checked; %d of %d sites refused (%.2f%%)",
		path, total, relocRefused, checkedBranch, checkedRIP, checkedVEXRIP, sitesRefused, sites, 100*float64(sitesRefused)/float64(sites))
	if checkedBranch < 1000 || checkedRIP < 1000 {
		t.Errorf("too few instructions checked")
	}
}
