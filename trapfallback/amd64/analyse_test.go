package amd64

import (
	"encoding/binary"
	"errors"
	"testing"

	"gotpstub/trapfallback/displace"
)

func TestAnalyse(t *testing.T) {
	const addr = 0x401000
	tests := []struct {
		name    string
		code    []byte
		kind    stepKind
		length  int
		branch  branchKind
		target  uint64
		pcrel   bool
		indCall bool
		wantErr bool
	}{
		{name: "endbr64", code: []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55}, kind: skip, length: 4},
		{name: "nop", code: []byte{0x90}, kind: skip, length: 1},
		{name: "push rbp", code: []byte{0x55}, kind: emulateSimple, length: 1, branch: brPush},
		{name: "push r12", code: []byte{0x41, 0x54}, kind: emulateSimple, length: 2, branch: brPush},
		{name: "mov rbp,rsp", code: []byte{0x48, 0x89, 0xe5}, kind: emulateSimple, length: 3, branch: brMovRspRbp},
		{name: "ret", code: []byte{0xc3}, kind: emulateSimple, length: 1, branch: brRet},
		{name: "pop rbx", code: []byte{0x5b}, kind: emulateSimple, length: 1, branch: brPop},
		{name: "pop r15", code: []byte{0x41, 0x5f}, kind: emulateSimple, length: 2, branch: brPop},
		{name: "mov rbx,rdi", code: []byte{0x48, 0x89, 0xfb}, kind: copyAndStep, length: 3},
		{name: "jmp rel8", code: []byte{0xeb, 0x10}, kind: emulateBranch, length: 2, branch: brJmp, target: addr + 2 + 0x10},
		{name: "je rel8 backwards", code: []byte{0x74, 0xfe}, kind: emulateBranch, length: 2, branch: brJcc, target: addr},
		{name: "jne rel32", code: []byte{0x0f, 0x85, 0x00, 0x01, 0x00, 0x00}, kind: emulateBranch, length: 6, branch: brJcc, target: addr + 6 + 0x100},
		{name: "call rel32", code: []byte{0xe8, 0xfb, 0xff, 0xff, 0xff}, kind: emulateBranch, length: 5, branch: brCall, target: addr},
		{name: "loop", code: []byte{0xe2, 0x05}, kind: emulateBranch, length: 2, branch: brLoop, target: addr + 7},
		{name: "jrcxz", code: []byte{0xe3, 0x05}, kind: emulateBranch, length: 2, branch: brJrcxz, target: addr + 7},
		{name: "mov eax,[rip+0x10]", code: []byte{0x8b, 0x05, 0x10, 0, 0, 0}, kind: copyAndStep, length: 6, pcrel: true},
		{name: "cmp dword [rip+8],imm8", code: []byte{0x83, 0x3d, 0x08, 0, 0, 0, 0x05}, kind: copyAndStep, length: 7, pcrel: true},
		{name: "call [rip+0x20]", code: []byte{0xff, 0x15, 0x20, 0, 0, 0}, kind: copyAndStep, length: 6, pcrel: true, indCall: true},
		{name: "call rax", code: []byte{0xff, 0xd0}, kind: copyAndStep, length: 2, indCall: true},
		{name: "vex", code: []byte{0xc5, 0xf8, 0x77}, wantErr: true},
		{name: "int3", code: []byte{0xcc}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := analyse(addr, tc.code)
			if tc.wantErr {
				if !errors.Is(err, displace.ErrUnsupported) {
					t.Fatalf("err = %v, want displace.ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.kind != tc.kind || d.length != tc.length {
				t.Fatalf("kind/len = %v/%d, want %v/%d", d.kind, d.length, tc.kind, tc.length)
			}
			if (tc.kind == emulateBranch || tc.kind == emulateSimple) && (d.branch != tc.branch || d.target != tc.target) {
				t.Fatalf("branch %v -> %#x, want %v -> %#x", d.branch, d.target, tc.branch, tc.target)
			}
			if d.hasPCRel != tc.pcrel || d.indirectCall != tc.indCall {
				t.Fatalf("pcrel=%v indirectCall=%v, want %v %v", d.hasPCRel, d.indirectCall, tc.pcrel, tc.indCall)
			}
		})
	}
}

func TestRelocateKeepsTarget(t *testing.T) {
	const addr = 0x401000
	code := []byte{0x83, 0x3d, 0x08, 0, 0, 0, 0x05} // cmp dword [rip+8], 5
	d, err := analyse(addr, code)
	if err != nil {
		t.Fatal(err)
	}
	for _, scratch := range []uint64{addr + 0x10000, addr - 0x200000} {
		if err := d.relocate(scratch); err != nil {
			t.Fatal(err)
		}
		disp := int64(int32(binary.LittleEndian.Uint32(d.relocated[2:])))
		if got := int64(scratch) + int64(d.length) + disp; got != addr+7+8 {
			t.Fatalf("scratch %#x: target %#x, want %#x", scratch, got, addr+7+8)
		}
		if d.relocated[6] != 0x05 || d.relocated[0] != 0x83 {
			t.Fatalf("immediate or opcode changed: % x", d.relocated)
		}
		// The jump back to the next original instruction follows.
		if len(d.relocated) != 7+5 || d.relocated[7] != 0xe9 {
			t.Fatalf("no jmp rel32 after the copy: % x", d.relocated)
		}
		back := int64(int32(binary.LittleEndian.Uint32(d.relocated[8:])))
		if got := int64(scratch) + 12 + back; got != addr+7 {
			t.Fatalf("scratch %#x: jump back to %#x, want %#x", scratch, got, addr+7)
		}
		if len(d.relocated) > slotSize {
			t.Fatalf("%d bytes do not fit a %d-byte slot", len(d.relocated), slotSize)
		}
	}
	if err := d.relocate(addr + 1<<33); err == nil {
		t.Fatal("relocation out of rel32 reach must fail")
	}
}

func TestPushRegisterMapping(t *testing.T) {
	want := map[byte]int{0x50: 0, 0x51: 2, 0x52: 3, 0x53: 1, 0x54: 7, 0x55: 6, 0x56: 4, 0x57: 5}
	for op, reg := range want {
		_, got, ok := pushInsn([]byte{op})
		if !ok || got != reg {
			t.Errorf("push %#x: reg %d, want %d", op, got, reg)
		}
	}
	if _, got, _ := pushInsn([]byte{0x41, 0x57}); got != 15 {
		t.Errorf("push r15: reg %d", got)
	}
	for op, reg := range want {
		if _, got, ok := popInsn([]byte{op + 8}); !ok || got != reg {
			t.Errorf("pop %#x: reg %d, want %d", op+8, got, reg)
		}
	}
	if _, got, _ := popInsn([]byte{0x41, 0x5c}); got != 12 {
		t.Errorf("pop r12: reg %d", got)
	}
}

func TestConditionHolds(t *testing.T) {
	tests := []struct {
		cc    byte
		flags uint64
		want  bool
	}{
		{0x4, flagZF, true}, {0x4, 0, false}, // je
		{0x5, flagZF, false}, {0x5, 0, true}, // jne
		{0x2, flagCF, true}, {0x3, flagCF, false}, // jb / jae
		{0x6, flagZF, true}, {0x7, 0, true}, {0x7, flagCF, false}, // jbe / ja
		{0xc, flagSF, true}, {0xc, flagSF | flagOF, false}, // jl
		{0xd, flagSF | flagOF, true},                              // jge
		{0xe, flagZF, true}, {0xf, 0, true}, {0xf, flagZF, false}, // jle / jg
		{0x0, flagOF, true}, {0x1, flagOF, false}, {0x8, flagSF, true}, {0xa, flagPF, true}, {0xb, flagPF, false},
	}
	for _, tc := range tests {
		if got := conditionHolds(tc.cc, tc.flags); got != tc.want {
			t.Errorf("cc %x flags %#x = %v, want %v", tc.cc, tc.flags, got, tc.want)
		}
	}
}
