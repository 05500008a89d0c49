package fasttp

import (
	"encoding/binary"
	"encoding/hex"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// relocBlobSource is the GNU as source of the test functions executed by
// TestRelocatedCodeRuns (System V: arguments in rdi, rsi; result in rax).
//
//		.intel_syntax noprefix
//		.org 0x000
//	f_rip:	mov rax, [rip+data0]          // rdi + data0, through rip-relative
//		add rax, rdi                  // loads, stores, lea and cmp imm8
//		mov [rip+data1], rax
//		lea rcx, [rip+data1]
//		mov rdx, [rcx]
//		add dword ptr [rip+data1+8], 1
//		add rdx, [rip+data1+8]
//		cmp byte ptr [rip+data0], 0x34
//		sete cl
//		movzx ecx, cl
//		lea rax, [rdx+rcx*2]
//		ret
//		.org 0x080
//	f_vex:	vmovdqu xmm0, [rip+data2]     // VEX rip-relative load, vzeroupper
//		vmovq rax, xmm0
//		vpextrq rcx, xmm0, 1
//		vzeroupper
//		add rax, rcx
//		add rax, rdi
//		ret
//		.org 0x100
//	f_call:	push rbx                      // g(rdi, rsi) + rdi via call rel32
//		mov rbx, rdi
//		call g
//		add rax, rbx
//		pop rbx
//		ret
//		.org 0x180
//	f_icall: lea rax, [rip+g]             // g through [rsp], rcx and [rip+gptr]
//		push rax
//		call [rsp]
//		mov rdx, rax
//		lea rcx, [rip+g]
//		call rcx
//		add rdx, rax
//		call [rip+gptr]
//		add rax, rdx
//		pop rcx
//		ret
//		.org 0x200
//	f_jcc8:	cmp rdi, rsi                  // rdi < rsi ? 2 : 1
//		jl 1f
//		mov eax, 1
//		ret
//	1:	mov eax, 2
//		ret
//		.org 0x240
//	f_jcc32: cmp rdi, rsi                 // rdi >= rsi ? 4 : 3
//		{disp32} jge 1f
//		mov eax, 3
//		ret
//	1:	mov eax, 4
//		ret
//		.org 0x280
//	f_loop:	mov rcx, rdi                  // rdi * rsi
//		xor eax, eax
//	1:	add rax, rsi
//		loop 1b
//		ret
//		.org 0x2c0
//	f_jrcxz: mov rcx, rdi                 // rdi == 0 ? 9 : 7
//		jrcxz 1f
//		mov eax, 7
//		ret
//	1:	mov eax, 9
//		ret
//		.org 0x300
//	f_loopne: mov rcx, rdi
//		xor eax, eax
//	1:	inc rax
//		cmp rax, rsi
//		loopne 1b
//		shl rax, 8
//		add rax, rcx
//		ret
//		.org 0x340
//	f_jmp:	jmp 1f                        // rdi + rsi
//		ud2
//	1:	mov rax, rdi
//		{disp32} jmp 2f
//		ud2
//	2:	add rax, rsi
//		ret
//		.org 0x380
//	f_flags: cmp rdi, rsi                 // flags survive relocated calls:
//		call g2                       // (rdi < rsi) * 3
//		setl al
//		call [rip+g2ptr]
//		setl cl
//		add al, cl
//		add al, cl
//		movzx eax, al
//		ret
//		.org 0x400
//	f_syscall: mov eax, 39                // getpid
//		syscall
//		ret
//		.org 0x440
//	f_ijmp:	mov dword ptr [rip+data1], 0x77 // g(rdi, rsi+0x77): tail call
//		add rsi, [rip+data1]          // through [rip+gptr]
//		jmp [rip+gptr]
//		.org 0x800
//	g:	lea rax, [rdi+rsi*2]
//		ret
//	g2:	ret
//		.org 0x1000
//	data0:	.quad 0x1234
//	data1:	.quad 0, 5
//	data2:	.quad 0x1111, 0x2222
//	gptr:	.quad 0   // &g, written by the test
//	g2ptr:	.quad 0   // &g2, written by the test

// relocBlobHex is blob.s (see relocBlobSource) assembled with GNU as and
// objcopy -O binary, bytes 0x000-0x80f (the data at 0x1000 is written by the test).
const relocBlobHex = "" +
	"488b05f90f00004801f8488905f70f0000488d0df00f0000488b118305ee0f000001480315e70f0000803dd00f000034" +
	"0f94c10fb6c9488d044ac300000000000000000000000000000000000000000000000000000000000000000000000000" +
	"0000000000000000000000000000000000000000000000000000000000000000c5fa6f05900f0000c4e1f97ec0c4e3f9" +
	"16c101c5f8774801c84801f8c30000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"00000000000000000000000000000000534889fbe8f70600004801d85bc3000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"488d057906000050ff14244889c2488d0d6b060000ffd14801c2ff15880e00004801d059c30000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"00000000000000000000000000000000000000000000000000000000000000004839f77c06b801000000c3b802000000" +
	"c30000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"4839f70f8d06000000b803000000c3b804000000c3000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000004889f931c04801f0e2fbc3000000000000000000000000000000000000000000" +
	"00000000000000000000000000000000000000000000000000000000000000004889f9e306b807000000c3b809000000" +
	"c30000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"4889f931c048ffc04839f0e0f848c1e0084801c8c3000000000000000000000000000000000000000000000000000000" +
	"00000000000000000000000000000000eb020f0b4889f8e9020000000f0b4801f0c30000000000000000000000000000" +
	"00000000000000000000000000000000000000000000000000000000000000004839f7e87d0400000f9cc0ff159f0c00" +
	"000f9cc100c800c80fb6c0c3000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"00000000000000000000000000000000b8270000000f05c3000000000000000000000000000000000000000000000000" +
	"0000000000000000000000000000000000000000000000000000000000000000c705be0b000077000000480335b70b00" +
	"00ff25d10b00000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" +
	"0000000000000000000000000000000000000000000000000000000000000000488d0477c3c300000000000000000000"

// mapRWX maps anonymous read-write-execute memory for the test.
func mapRWX(t testing.TB, size int) []byte {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Skipf("cannot map RWX memory: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

// relocBlob maps relocBlobSource's code in RWX memory (1 MiB) and
// returns it, its address, and a function that resets its data.
func relocBlob(t *testing.T) (mem []byte, base uint64, resetData func()) {
	t.Helper()
	blob, err := hex.DecodeString(relocBlobHex)
	if err != nil {
		t.Fatal(err)
	}
	mem = mapRWX(t, 1<<20)
	base = uint64(uintptr(unsafe.Pointer(&mem[0])))
	copy(mem, blob)
	resetData = func() {
		for i, v := range []uint64{0x1234, 0, 5, 0x1111, 0x2222, base + 0x800, base + 0x805} {
			binary.LittleEndian.PutUint64(mem[0x1000+8*i:], v)
		}
	}
	resetData()
	return mem, base, resetData
}

// TestRelocatedCodeRuns relocates every instruction of the functions in
// relocBlobSource into a second mapping, more than 1 MB away, and checks that the relocated copies compute
// what the originals do (and what the Go model says).
func TestRelocatedCodeRuns(t *testing.T) {
	mem, base, resetData := relocBlob(t)
	far := mapRWX(t, 4<<20)
	lt := func(a, b uint64) uint64 {
		if int64(a) < int64(b) {
			return 1
		}
		return 0
	}
	loopne := func(a, b uint64) uint64 {
		rcx, rax := a, uint64(0)
		for {
			rax++
			zf := rax == b
			rcx--
			if rcx == 0 || zf {
				break
			}
		}
		return rax<<8 + rcx
	}
	pid := uint64(os.Getpid())
	args := [][2]uint64{{0, 0}, {1, 2}, {2, 1}, {3, 7}, {0xfffffffffffffffe, 5}, {5, 5}}
	tests := []struct {
		name   string
		off    uint64
		model  func(a, b uint64) uint64
		nonzer bool // needs rdi != 0
	}{
		{"rip-relative", 0x000, func(a, b uint64) uint64 { return 0x1234 + a + 8 }, false},
		{"vex rip-relative", 0x080, func(a, b uint64) uint64 { return 0x3333 + a }, false},
		{"call rel32", 0x100, func(a, b uint64) uint64 { return 2*a + 2*b }, false},
		{"indirect calls", 0x180, func(a, b uint64) uint64 { return 3 * (a + 2*b) }, false},
		{"jcc rel8", 0x200, func(a, b uint64) uint64 { return 1 + lt(a, b) }, false},
		{"jcc rel32", 0x240, func(a, b uint64) uint64 { return 4 - lt(a, b) }, false},
		{"loop", 0x280, func(a, b uint64) uint64 { return a * b }, true},
		{"jrcxz", 0x2c0, func(a, b uint64) uint64 {
			if a == 0 {
				return 9
			}
			return 7
		}, false},
		{"loopne", 0x300, loopne, true},
		{"jmp rel8/rel32", 0x340, func(a, b uint64) uint64 { return a + b }, false},
		{"flags across calls", 0x380, func(a, b uint64) uint64 { return 3 * lt(a, b) }, false},
		{"syscall", 0x400, func(a, b uint64) uint64 { return pid }, false},
		{"jmp [rip+x] tail call, imm after disp", 0x440, func(a, b uint64) uint64 { return a + 2*(b+0x77) }, false},
	}
	farBase := uint64(uintptr(unsafe.Pointer(&far[0])))
	to := farBase + 2<<20 // at least 2 MB from mem whichever side far is on
	if dist := int64(to - base); dist > -1<<20 && dist < 1<<20 || dist < -1<<30 || dist > 1<<30 {
		t.Skipf("the two mappings are %#x apart: not usable", dist)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			end := tt.off + 0x40
			if tt.off == 0x000 || tt.off == 0x180 {
				end = tt.off + 0x80
			}
			for end > tt.off && mem[end-1] == 0 {
				end--
			}
			var insns []Insn
			for pc := tt.off; pc < end; {
				in, err := DecodeInsn(mem[pc:pc+MaxInsnLen], base+pc) // the last one may end in zero bytes
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				insns = append(insns, in)
				pc += uint64(in.Len)
			}
			end = insns[len(insns)-1].Next() - base
			code, heads, err := RelocateRun(insns, to, base+end)
			if err != nil {
				t.Fatalf("RelocateRun: %v", err)
			}
			if heads[insns[0].Addr] != to || len(heads) != len(insns) {
				t.Fatalf("heads %v: want %d entries, first at %#x", heads, len(insns), to)
			}
			copy(far[to-farBase:], code)
			for _, a := range args {
				if tt.nonzer && a[0] == 0 || tt.nonzer && a[0] > 100 {
					continue
				}
				want := tt.model(a[0], a[1])
				resetData()
				orig := callNative(uintptr(base+tt.off), uintptr(a[0]), uintptr(a[1]))
				resetData()
				moved := callNative(uintptr(to), uintptr(a[0]), uintptr(a[1]))
				if orig != want || moved != want {
					t.Errorf("f(%#x, %#x): original %#x, relocated %#x, want %#x", a[0], a[1], orig, moved, want)
				}
			}
			to += uint64(len(code)+15) &^ 15
		})
	}
}
