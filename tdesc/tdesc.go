// Package tdesc describes the amd64 and aarch64 GNU/Linux register files
// the way GDB's remote protocol sees them: register numbers, the byte
// layout of the `g` packet, and the target-description XML documents
// served through qXfer:features:read. Host returns the layout of this
// machine's processes.
//
// On amd64 the register order follows GDB's i386 feature files: core
// (rax … fop), sse (xmm0 … xmm15, mxcsr), linux (orig_rax), segments
// (fs_base, gs_base) and, when the CPU has AVX, avx (ymm0h … ymm15h). On
// aarch64 (AArch64Linux) it follows GDB's aarch64 feature files: core
// (x0 … x30, sp, pc, cpsr) and fpu (v0 … v31, fpsr, fpcr); SVE, pointer
// authentication, MTE and TLS are not described. Registers are numbered
// consecutively in that order and packed without padding in the `g`
// packet, exactly as gdbserver does for the same description.
//
// Regs holds one thread's register values as raw little-endian bytes in
// that layout; trace frames store the same bytes in their `R` blocks.
package tdesc

import (
	"encoding/binary"
	"fmt"
)

// Register numbers in GDB's amd64 Linux numbering.
const (
	RAX = iota
	RBX
	RCX
	RDX
	RSI
	RDI
	RBP
	RSP
	R8
	R9
	R10
	R11
	R12
	R13
	R14
	R15
	RIP    // 16
	EFLAGS // 17
	CS
	SS
	DS
	ES
	FS
	GS
	ST0 // 24; st1…st7 follow
)

// More register numbers: the x87 control registers, SSE, Linux and
// segment-base registers, and the first AVX upper half.
const (
	FCTRL    = ST0 + 8 // 32
	FSTAT    = FCTRL + 1
	FTAG     = FCTRL + 2
	FISEG    = FCTRL + 3
	FIOFF    = FCTRL + 4
	FOSEG    = FCTRL + 5
	FOOFF    = FCTRL + 6
	FOP      = FCTRL + 7 // 39
	XMM0     = 40        // xmm1…xmm15 follow
	MXCSR    = XMM0 + 16 // 56
	ORIGRAX  = 57
	FSBASE   = 58
	GSBASE   = 59
	YMM0H    = 60 // ymm1h…ymm15h follow; present only with AVX
	NumNoAVX = 60 // registers without AVX
	NumAVX   = 76 // registers with AVX
)

// Feature names of GDB's i386 target-description features.
const (
	FeatureCore     = "org.gnu.gdb.i386.core"
	FeatureSSE      = "org.gnu.gdb.i386.sse"
	FeatureLinux    = "org.gnu.gdb.i386.linux"
	FeatureSegments = "org.gnu.gdb.i386.segments"
	FeatureAVX      = "org.gnu.gdb.i386.avx"
)

// Reg describes one register.
type Reg struct {
	Name    string // GDB's name, e.g. "rip"
	Num     int    // GDB register number (the p/P packet number)
	Size    int    // bytes
	Offset  int    // byte offset in the g packet
	Type    string // the target-description type, e.g. "int64", "vec128"
	Group   string // the register group if the feature file names one ("float", "vector")
	Feature string // the feature the register belongs to, e.g. FeatureCore
}

// Layout is a register file: every register in number order and the size
// of the g packet.
type Layout struct {
	Regs   []Reg  // indexed by register number
	Size   int    // g packet bytes
	HasAVX bool   // the avx feature (ymm0h…ymm15h) is present
	Arch   string // the target description's architecture: "i386:x86-64", "aarch64"
	// The numbers of the program counter, stack pointer and frame
	// pointer (rip, rsp, rbp; pc, sp, x29).
	PC, SP, FP int
	// LR is the link register's number (x30), -1 where calls keep the
	// return address on the stack only (x86-64).
	LR int
	// VQ is an aarch64 layout's SVE vector length in 128-bit quadwords
	// (0: no SVE).
	VQ int

	byName map[string]int
}

// add appends a register of size bytes to the layout.
func (l *Layout) add(feature, name string, size int, typ, group string) {
	r := Reg{Name: name, Num: len(l.Regs), Size: size, Offset: l.Size, Type: typ, Group: group, Feature: feature}
	l.Regs = append(l.Regs, r)
	l.byName[name] = r.Num
	l.Size += size
}

var (
	layoutAVX   = build(true)
	layoutNoAVX = build(false)
)

// AMD64Linux returns the amd64 GNU/Linux layout, with the AVX upper halves
// when avx is true. The returned layout is shared and must not be
// modified.
func AMD64Linux(avx bool) *Layout {
	if avx {
		return layoutAVX
	}
	return layoutNoAVX
}

func build(avx bool) *Layout {
	l := &Layout{HasAVX: avx, Arch: "i386:x86-64", PC: RIP, SP: RSP, FP: RBP, LR: -1, byName: map[string]int{}}
	add := l.add
	for _, n := range []string{"rax", "rbx", "rcx", "rdx", "rsi", "rdi"} {
		add(FeatureCore, n, 8, "int64", "")
	}
	add(FeatureCore, "rbp", 8, "data_ptr", "")
	add(FeatureCore, "rsp", 8, "data_ptr", "")
	for i := 8; i <= 15; i++ {
		add(FeatureCore, fmt.Sprintf("r%d", i), 8, "int64", "")
	}
	add(FeatureCore, "rip", 8, "code_ptr", "")
	add(FeatureCore, "eflags", 4, "i386_eflags", "")
	for _, n := range []string{"cs", "ss", "ds", "es", "fs", "gs"} {
		add(FeatureCore, n, 4, "int32", "")
	}
	for i := 0; i < 8; i++ {
		add(FeatureCore, fmt.Sprintf("st%d", i), 10, "i387_ext", "")
	}
	for _, n := range []string{"fctrl", "fstat", "ftag", "fiseg", "fioff", "foseg", "fooff", "fop"} {
		add(FeatureCore, n, 4, "int", "float")
	}
	for i := 0; i < 16; i++ {
		add(FeatureSSE, fmt.Sprintf("xmm%d", i), 16, "vec128", "")
	}
	add(FeatureSSE, "mxcsr", 4, "i386_mxcsr", "vector")
	add(FeatureLinux, "orig_rax", 8, "int", "")
	add(FeatureSegments, "fs_base", 8, "int", "")
	add(FeatureSegments, "gs_base", 8, "int", "")
	if avx {
		for i := 0; i < 16; i++ {
			add(FeatureAVX, fmt.Sprintf("ymm%dh", i), 16, "uint128", "")
		}
	}
	return l
}

// Find returns the register called name.
func (l *Layout) Find(name string) (Reg, bool) {
	if l.byName == nil {
		// A Layout built by hand, not by AMD64Linux.
		for _, r := range l.Regs {
			if r.Name == name {
				return r, true
			}
		}
		return Reg{}, false
	}
	n, ok := l.byName[name]
	if !ok {
		return Reg{}, false
	}
	return l.Regs[n], true
}

// NewRegs returns an all-invalid, zeroed register set for l.
func (l *Layout) NewRegs() *Regs {
	return &Regs{Layout: l, Data: make([]byte, l.Size), Valid: make([]bool, len(l.Regs))}
}

// Regs holds one thread's registers as raw little-endian bytes in g-packet
// layout. Valid[n] tells whether register n's value is known (unknown
// registers are sent as "xx" in a g reply).
type Regs struct {
	Layout *Layout
	Data   []byte // Layout.Size bytes
	Valid  []bool // one per register
}

// Get returns register num's bytes (a slice of Data: writing to it changes
// the register), or nil for a number outside the layout.
func (r *Regs) Get(num int) []byte {
	if num < 0 || num >= len(r.Layout.Regs) {
		return nil
	}
	reg := r.Layout.Regs[num]
	if reg.Offset+reg.Size > len(r.Data) {
		return nil
	}
	return r.Data[reg.Offset : reg.Offset+reg.Size]
}

// Set stores v as register num's value and marks it valid. v must be
// exactly the register's size.
func (r *Regs) Set(num int, v []byte) error {
	if num < 0 || num >= len(r.Layout.Regs) {
		return fmt.Errorf("register %d: no such register", num)
	}
	reg := r.Layout.Regs[num]
	if len(v) != reg.Size {
		return fmt.Errorf("register %s: value is %d bytes, want %d", reg.Name, len(v), reg.Size)
	}
	if reg.Offset+reg.Size > len(r.Data) {
		return fmt.Errorf("register %s: register data is %d bytes, too short", reg.Name, len(r.Data))
	}
	copy(r.Data[reg.Offset:], v)
	if num < len(r.Valid) {
		r.Valid[num] = true
	}
	return nil
}

// Uint64 returns a register of at most 8 bytes as a number (zero for an
// unknown or wider register).
func (r *Regs) Uint64(num int) uint64 {
	b := r.Get(num)
	if b == nil || len(b) > 8 {
		return 0
	}
	var v [8]byte
	copy(v[:], b)
	return binary.LittleEndian.Uint64(v[:])
}

// SetUint64 stores v in a register of at most 8 bytes (truncated to its
// size) and marks it valid.
func (r *Regs) SetUint64(num int, v uint64) error {
	if num < 0 || num >= len(r.Layout.Regs) {
		return fmt.Errorf("register %d: no such register", num)
	}
	size := r.Layout.Regs[num].Size
	if size > 8 {
		return fmt.Errorf("register %s: %d bytes, too wide for a number", r.Layout.Regs[num].Name, size)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return r.Set(num, b[:size])
}

// Clone returns an independent copy of r.
func (r *Regs) Clone() *Regs {
	return &Regs{
		Layout: r.Layout,
		Data:   append([]byte(nil), r.Data...),
		Valid:  append([]bool(nil), r.Valid...),
	}
}
