package jit

import (
	"encoding/binary"
	"os"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"gotpstub/agentexpr"
)

// Flag bits used by the pad tests.
const (
	flagCF = 1 << 0
	flagPF = 1 << 2
	flagZF = 1 << 6
	flagSF = 1 << 7
	flagDF = 1 << 10
	flagOF = 1 << 11
)

// siteImm is the immediate of the site instruction add rcx, imm32.
const siteImm = 0x12345678

// padRig is an in-process stand-in for an inferior: an RWX code region
// holding a site (add rcx, imm32; ret), a ret-only function, the tail
// (the site instruction + jmp back to the ret) and the pad; and an RW
// region with the control block, the TSVs, a data buffer, a PROT_NONE page
// and the ring.
type padRig struct {
	code                  []byte
	site, retOnly, tail   uintptr
	padAddr               uintptr
	pad                   *JumpPad
	data                  []byte
	ctlMem                []byte
	ctl                   uintptr
	tsvs                  []int64
	dataAddr, guardAddr   uint64
	ring                  []byte
	ringAddr              uint64
	siteBytes, patchBytes []byte
}

const (
	rigCodeSize = 1 << 16
	rigPadOff   = 4096
)

func newPadRig(t testing.TB, ringSize int) *padRig {
	t.Helper()
	code, err := unix.Mmap(-1, 0, rigCodeSize, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap rwx: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(code) })
	ringPages := (ringSize + pageSize - 1) / pageSize
	rw, err := unix.Mmap(-1, 0, (4+ringPages)*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap rw: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(rw) })
	if err := unix.Mprotect(rw[3*pageSize:4*pageSize], unix.PROT_NONE); err != nil {
		t.Fatalf("mprotect guard: %v", err)
	}
	r := &padRig{code: code, ctlMem: rw[:pageSize], data: rw[2*pageSize : 3*pageSize], ring: rw[4*pageSize : 4*pageSize+ringSize]}
	base := uintptr(unsafe.Pointer(&code[0]))
	r.site = base
	r.siteBytes = []byte{0x48, 0x81, 0xc1, 0x78, 0x56, 0x34, 0x12} // add rcx, 0x12345678
	copy(code, r.siteBytes)
	code[len(r.siteBytes)] = 0xc3
	r.retOnly = base + 32
	code[32] = 0xc3
	r.tail = base + 64
	n := copy(code[64:], r.siteBytes)
	code[64+n] = 0xe9
	binary.LittleEndian.PutUint32(code[64+n+1:], uint32(int32(int64(r.site+uintptr(len(r.siteBytes)))-int64(r.tail+uintptr(n)+5))))
	r.padAddr = base + rigPadOff
	r.ctl = uintptr(unsafe.Pointer(&rw[0]))
	r.tsvs = unsafe.Slice((*int64)(unsafe.Pointer(&rw[pageSize])), 64)
	r.dataAddr = uint64(uintptr(unsafe.Pointer(&r.data[0])))
	r.guardAddr = uint64(uintptr(unsafe.Pointer(&rw[3*pageSize])))
	r.ringAddr = uint64(uintptr(unsafe.Pointer(&r.ring[0])))
	for i := range r.data {
		r.data[i] = byte(i*7 + 1)
	}
	r.reset(true)
	return r
}

// field returns a pointer to the control block's 8-byte field at off.
func (r *padRig) field(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.ctlMem[off])) }

// tpField returns a pointer to field off of tracepoint table entry i.
func (r *padRig) tpField(i, off int) *uint64 { return r.field(CtlTPs + i*CtlTPSize + off) }

// reset zeroes the control block and the ring and sets it up.
func (r *padRig) reset(active bool) {
	clear(r.ctlMem)
	clear(r.ring)
	if active {
		*r.field(CtlActive) = 1
	}
	*r.field(CtlRingBase) = r.ringAddr
	*r.field(CtlRingSize) = uint64(len(r.ring))
	*r.field(CtlTSVs) = uint64(uintptr(unsafe.Pointer(&r.tsvs[0])))
	*r.field(CtlNTSVs) = uint64(len(r.tsvs))
	*r.field(CtlPid) = uint64(os.Getpid())
}

// install builds a pad for spec (Addr, TPAddr, Ctl, TailAddr filled in),
// copies it in and patches the site.
func (r *padRig) install(t testing.TB, spec PadSpec) {
	t.Helper()
	spec.Addr, spec.TPAddr, spec.Ctl, spec.TailAddr = uint64(r.padAddr), uint64(r.site), uint64(r.ctl), uint64(r.tail)
	p, err := BuildJumpPadAMD64(spec)
	if err != nil {
		t.Fatalf("BuildJumpPadAMD64: %v", err)
	}
	if rigPadOff+len(p.Code) > len(r.code) {
		t.Fatalf("pad too large: %d bytes", len(p.Code))
	}
	r.pad = p
	copy(r.code[rigPadOff:], p.Code)
	r.code[0] = 0xe9
	binary.LittleEndian.PutUint32(r.code[1:], uint32(int32(int64(r.padAddr)-int64(r.site+5))))
}

// unpatch restores the site's original bytes.
func (r *padRig) unpatch() { copy(r.code, r.siteBytes) }

// compileAX assembles and compiles an agent expression for amd64.
func compileAX(t testing.TB, src string) *Code {
	t.Helper()
	bc, err := agentexpr.Assemble(src)
	if err != nil {
		t.Fatalf("assemble %q: %v", src, err)
	}
	e, err := agentexpr.Parse(bc)
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	c, err := Compile(e, "amd64", Options{})
	if err != nil || c.Fallback != "" {
		t.Fatalf("compile %q: %v %s", src, err, c.Fallback)
	}
	return c
}

// padStack is a machine stack for callSite: its memory and its top.
func padStack(t testing.TB) ([]byte, uintptr) {
	t.Helper()
	s, err := unix.Mmap(-1, 0, 16*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap stack: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(s) })
	return s, uintptr(unsafe.Pointer(&s[0])) + uintptr(len(s))
}

// checkCanary verifies the red zone below the site's stack pointer sp in
// the stack memory stackMem.
func checkCanary(t testing.TB, stackMem []byte, sp uint64) {
	t.Helper()
	base := uint64(uintptr(unsafe.Pointer(&stackMem[0])))
	if sp < base+128 || sp > base+uint64(len(stackMem)) {
		t.Fatalf("site rsp %#x outside the stack", sp)
	}
	for i := 0; i < 16; i++ {
		got := binary.LittleEndian.Uint64(stackMem[sp-128+uint64(8*i)-base:])
		if got != padCanary(i) {
			t.Errorf("red zone qword %d = %#x, want %#x", i, got, padCanary(i))
		}
	}
}

// testRecord is one ring record as the tests see it.
type testRecord struct {
	off                   uint64
	size, tp, used, flags uint32
	regs                  [PadRegs]uint64
	blocks                []byte
}

// readRing returns the committed records between tail and head, failing
// the test on anything malformed.
func readRing(t testing.TB, ring []byte, tail, head uint64) []testRecord {
	t.Helper()
	var recs []testRecord
	size := uint64(len(ring))
	for c := tail; c < head; {
		off := c % size
		h := ring[off:]
		rec := testRecord{off: off, size: binary.LittleEndian.Uint32(h), tp: binary.LittleEndian.Uint32(h[4:]),
			used: binary.LittleEndian.Uint32(h[8:]), flags: binary.LittleEndian.Uint32(h[12:])}
		if rec.size == 0 {
			t.Fatalf("record at cursor %d (offset %d) not committed, head %d", c, off, head)
		}
		if rec.size%16 != 0 || off+uint64(rec.size) > size {
			t.Fatalf("record at offset %d: bad size %d", off, rec.size)
		}
		if rec.flags == 0 {
			for i := range rec.regs {
				rec.regs[i] = binary.LittleEndian.Uint64(h[RecHeaderSize+8*i:])
			}
			rec.blocks = h[RecHeaderSize+padBlockBytes : RecHeaderSize+padBlockBytes+int(rec.used)]
		}
		recs = append(recs, rec)
		c += uint64(rec.size)
	}
	return recs
}

func TestPadEncodings(t *testing.T) {
	m := at(r15, 16)
	checkInsn(t, "pushfq", emit(func(a *asm) { a.pushfq() }), x86asm.PUSHFQ)
	checkInsn(t, "popfq", emit(func(a *asm) { a.popfq() }), x86asm.POPFQ)
	checkInsn(t, "cld", emit(func(a *asm) { a.cld() }), x86asm.CLD)
	checkInsn(t, "int3", emit(func(a *asm) { a.int3() }), x86asm.INT, x86asm.Imm(3))
	if inst, err := x86asm.Decode(emit(func(a *asm) { a.repMovsq() }), 64); err != nil || inst.Op != x86asm.MOVSQ || inst.Len != 3 ||
		inst.Prefix[0]&0xff != x86asm.PrefixREP {
		t.Errorf("rep movsq: %v %v", inst, err)
	}
	for _, r := range allGPRs {
		for _, mm := range []mem{m, at(rSP, 8), at(r13, 0), at(rBX, CtlHead)} {
			checkInsn(t, "xadd", emit(func(a *asm) { a.lockXadd(mm, r) }), x86asm.XADD, memArg(mm), reg64(r))
			checkInsn(t, "cmpxchg", emit(func(a *asm) { a.lockCmpxchg(mm, r) }), x86asm.CMPXCHG, memArg(mm), reg64(r))
		}
	}
	for _, mm := range testMems() {
		checkInsn(t, "lock add", emit(func(a *asm) { a.lockAluMI(aluAdd, mm, 1) }), x86asm.ADD, memArg(mm), x86asm.Imm(1))
		checkInsn(t, "store32Imm", emit(func(a *asm) { a.store32Imm(mm, 0x1234abcd) }), x86asm.MOV, memArg(mm), x86asm.Imm(0x1234abcd))
		checkInsn(t, "div mem", emit(func(a *asm) { a.divMem(mm) }), x86asm.DIV, memArg(mm))
	}
	for _, r := range allGPRs {
		for s, want := range []x86asm.Reg{x86asm.ES, x86asm.CS, x86asm.SS, x86asm.DS, x86asm.FS, x86asm.GS} {
			checkInsn(t, "mov r64, sreg", emit(func(a *asm) { a.movFromSreg(r, sreg(s)) }), x86asm.MOV, reg64(r), want)
		}
	}
	// The lock prefix is really there.
	if b := emit(func(a *asm) { a.lockXadd(m, rAX) }); b[0] != 0xf0 {
		t.Errorf("lock xadd: % x", b)
	}
	if b := emit(func(a *asm) { a.lockCmpxchg(m, rAX) }); b[0] != 0xf0 {
		t.Errorf("lock cmpxchg: % x", b)
	}
}

// TestPadShape decodes a whole pad: its first instruction moves rsp below
// the red zone, nothing touches an x87/MMX/SSE register, the trap
// addresses hold int3, PassTrap+1 is Skip, and the last jump of the body
// goes to TailAddr.
func TestPadShape(t *testing.T) {
	cond := compileAX(t, "const8 1; reg 1; div_unsigned; end")
	coll := compileAX(t, "reg 4; const8 16; trace; end")
	spec := PadSpec{Addr: 0x7000_0000_1000, TPAddr: 0x40_1000, Ctl: 0x7100_0000_0000, TPIndex: 3,
		Cond: cond, Collect: []*Code{coll}, CollectCap: 100, TailAddr: 0x7000_0000_0800}
	p, err := BuildJumpPadAMD64(spec)
	if err != nil {
		t.Fatal(err)
	}
	sawTail := false
	for off := 0; off < len(p.Code); {
		inst, err := x86asm.Decode(p.Code[off:], 64)
		if err != nil {
			t.Fatalf("offset %d: % x: %v", off, p.Code[off:min(off+8, len(p.Code))], err)
		}
		if off == 0 && x86asm.IntelSyntax(inst, 0, nil) != "lea rsp, ptr [rsp-0x80]" {
			t.Errorf("first instruction %q", x86asm.IntelSyntax(inst, 0, nil))
		}
		for _, a := range inst.Args {
			if r, ok := a.(x86asm.Reg); ok && (r >= x86asm.F0 && r <= x86asm.X15 || r >= x86asm.Y0 && r <= x86asm.Y15) {
				t.Errorf("offset %d: %s touches %v", off, x86asm.IntelSyntax(inst, 0, nil), r)
			}
		}
		if rel, ok := inst.Args[0].(x86asm.Rel); ok && inst.Op == x86asm.JMP && inst.Len == 5 {
			if spec.Addr+uint64(off+inst.Len)+uint64(int64(rel)) == spec.TailAddr {
				sawTail = true
			}
		}
		off += inst.Len
	}
	if !sawTail {
		t.Errorf("no jmp to TailAddr")
	}
	for name, addr := range map[string]uint64{"FullTrap": p.FullTrap, "PassTrap": p.PassTrap} {
		if addr < spec.Addr || addr >= spec.Addr+uint64(len(p.Code)) || p.Code[addr-spec.Addr] != 0xcc {
			t.Errorf("%s %#x is not an int3 in the pad", name, addr)
		}
	}
	if p.PassTrap+1 != p.Skip {
		t.Errorf("PassTrap+1 = %#x, Skip = %#x", p.PassTrap+1, p.Skip)
	}
	if p.Retry <= spec.Addr || p.Retry >= p.FullTrap {
		t.Errorf("Retry %#x not before FullTrap %#x", p.Retry, p.FullTrap)
	}

	bad := []PadSpec{
		{Cond: &Code{Arch: "amd64", Fallback: "printf needs the interpreter"}},
		{Collect: []*Code{nil}},
		{Collect: []*Code{{Arch: "arm64", Text: []byte{0}}}},
		{TPIndex: 1 << 30},
		{Addr: 0x7000_0000_0000, TailAddr: 0x1000},
	}
	for i, s := range bad {
		if _, err := BuildJumpPadAMD64(s); err == nil {
			t.Errorf("bad spec %d: no error", i)
		}
	}
}

// padCase is one run of the patched site.
type padCase struct {
	name   string
	active bool
	rbx    uint64 // the condition is 1 / rbx: true for 1, false for 2, error for 0
	rsi    string // "data" or "guard": what the collection traces
	flags  uint64
	want   string // "none", "ok", "condErr", "collErr"
}

func TestPadHit(t *testing.T) {
	rig := newPadRig(t, 1<<16)
	stackMem, stack := padStack(t)
	cond := compileAX(t, "const8 1; reg 1; div_unsigned; end")
	collect := []*Code{compileAX(t, "reg 4; const8 16; trace; end"), compileAX(t, "tracev 3; end")}
	const tpIndex = 2
	const collectCap = 64
	rig.install(t, PadSpec{TPIndex: tpIndex, Cond: cond, Collect: collect, CollectCap: collectCap})
	cases := []padCase{
		{"true", true, 1, "data", 0x2, "ok"},
		{"true CF ZF PF SF OF", true, 1, "data", 0x2 | flagCF | flagZF | flagPF | flagSF | flagOF, "ok"},
		{"true DF", true, 1, "data", 0x2 | flagDF | flagCF, "ok"},
		{"false", true, 2, "data", 0x2 | flagZF, "none"},
		{"condition error", true, 0, "data", 0x2 | flagSF, "condErr"},
		{"collection error", true, 1, "guard", 0x2 | flagOF, "collErr"},
		{"inactive", false, 1, "data", 0x2 | flagCF, "none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rig.reset(tc.active)
			rig.tsvs[3] = -12345
			var in, expect, entry, out [18]uint64
			for i := range 16 {
				in[i] = 0x1111_0000_0000_0000*uint64(i+1) + uint64(i)
			}
			in[1] = tc.rbx
			in[4] = rig.dataAddr + 40
			if tc.rsi == "guard" {
				in[4] = rig.guardAddr + 8
			}
			in[16] = tc.flags
			rig.unpatch()
			callSite(rig.retOnly, &in, &entry, stack)
			callSite(rig.site, &in, &expect, stack)
			if expect[2] != in[2]+siteImm {
				t.Fatalf("unpatched site: rcx %#x", expect[2])
			}
			rig.install(t, PadSpec{TPIndex: tpIndex, Cond: cond, Collect: collect, CollectCap: collectCap})
			callSite(rig.site, &in, &out, stack)
			if out != expect {
				for i := range out {
					if out[i] != expect[i] {
						t.Errorf("slot %d after the patched site: %#x, unpatched gives %#x", i, out[i], expect[i])
					}
				}
			}
			checkCanary(t, stackMem, out[17])
			head, tail := *rig.field(CtlHead), *rig.field(CtlTail)
			recs := readRing(t, rig.ring, tail, head)
			hits, errs := *rig.tpField(tpIndex, TPHits), *rig.tpField(tpIndex, TPErrors)
			counts := map[string][3]uint64{ // hits, errors, records
				"none": {0, 0, 0}, "ok": {1, 0, 1}, "condErr": {0, 1, 1}, "collErr": {1, 1, 1},
			}[tc.want]
			wantHits, wantErrs, wantRecs := counts[0], counts[1], int(counts[2])
			if hits != wantHits || errs != wantErrs || len(recs) != wantRecs {
				t.Fatalf("hits %d errors %d records %d, want %d %d %d", hits, errs, len(recs), wantHits, wantErrs, wantRecs)
			}
			if wantRecs == 0 {
				if head != 0 {
					t.Errorf("head moved to %d without a record", head)
				}
				return
			}
			rec := recs[0]
			if rec.tp != tpIndex {
				t.Errorf("record tp index %d", rec.tp)
			}
			switch tc.want {
			case "condErr":
				if rec.flags != RecError || rec.used != ErrDivZero || rec.size != RecHeaderSize {
					t.Errorf("condition error record: %+v", rec)
				}
				return
			case "collErr":
				if rec.flags != RecError || rec.used != ErrCollect || uint64(rec.size) != PadRecordSize(collectCap) {
					t.Errorf("collection error record: %+v", rec)
				}
				return
			}
			if rec.flags != 0 || uint64(rec.size) != PadRecordSize(collectCap) {
				t.Errorf("record size %d flags %d", rec.size, rec.flags)
			}
			for i := range 16 {
				want := in[i]
				if i == 7 {
					want = out[17]
				}
				if rec.regs[i] != want {
					t.Errorf("record reg %d = %#x, want %#x", i, rec.regs[i], want)
				}
			}
			if rec.regs[16] != uint64(rig.site) {
				t.Errorf("record rip %#x, want the site %#x", rec.regs[16], rig.site)
			}
			if rec.regs[17] != entry[16] {
				t.Errorf("record eflags %#x, want %#x", rec.regs[17], entry[16])
			}
			if rec.regs[18] != 0x33 || rec.regs[19] != 0x2b {
				t.Errorf("record cs %#x ss %#x", rec.regs[18], rec.regs[19])
			}
			var want []byte
			want = append(want, BlockMemory)
			want = binary.LittleEndian.AppendUint64(want, in[4])
			want = binary.LittleEndian.AppendUint16(want, 16)
			want = append(want, rig.data[40:56]...)
			want = append(want, BlockTSV)
			want = binary.LittleEndian.AppendUint32(want, 3)
			want = binary.LittleEndian.AppendUint64(want, uint64(rig.tsvs[3]))
			if string(rec.blocks) != string(want) {
				t.Errorf("blocks\n % x\nwant\n % x", rec.blocks, want)
			}
		})
	}
}

// TestPadNoCondition: a pad without condition or collection records the
// registers of every hit.
func TestPadNoCondition(t *testing.T) {
	rig := newPadRig(t, 1<<12)
	_, stack := padStack(t)
	rig.install(t, PadSpec{TPIndex: 0})
	in := [18]uint64{16: 0x2}
	var out [18]uint64
	for i := range 3 {
		in[0] = uint64(i)
		callSite(rig.site, &in, &out, stack)
	}
	recs := readRing(t, rig.ring, 0, *rig.field(CtlHead))
	if len(recs) != 3 || *rig.tpField(0, TPHits) != 3 {
		t.Fatalf("%d records, hits %d", len(recs), *rig.tpField(0, TPHits))
	}
	for i, r := range recs {
		if r.regs[0] != uint64(i) || r.used != 0 || uint64(r.size) != PadRecordSize(0) {
			t.Errorf("record %d: %+v", i, r)
		}
	}
}

// TestPadRingWrap drives a ring that holds fewer than three records: the
// third reservation does not fit before the end and leaves a RecSkip
// filler. The test consumes (zeroes and advances the tail) between hits.
func TestPadRingWrap(t *testing.T) {
	const collectCap = 64
	recSize := PadRecordSize(collectCap) // 272
	ringSize := 800
	rig := newPadRig(t, ringSize)
	_, stack := padStack(t)
	rig.install(t, PadSpec{TPIndex: 1, Collect: []*Code{compileAX(t, "tracev 0; end")}, CollectCap: collectCap})
	var in, out [18]uint64
	in[16] = 0x2
	type step struct {
		offs  []uint64 // record offsets expected from this hit
		flags []uint32
	}
	steps := []step{
		{[]uint64{0}, []uint32{0}},
		{[]uint64{recSize}, []uint32{0}},
		{[]uint64{2 * recSize, 0}, []uint32{RecSkip, 0}},
		{[]uint64{recSize}, []uint32{0}},
		{[]uint64{2 * recSize, 0}, []uint32{RecSkip, 0}},
	}
	for i, st := range steps {
		in[0] = uint64(i)
		rig.tsvs[0] = int64(100 + i)
		callSite(rig.site, &in, &out, stack)
		head, tail := *rig.field(CtlHead), *rig.field(CtlTail)
		recs := readRing(t, rig.ring, tail, head)
		if len(recs) != len(st.offs) {
			t.Fatalf("hit %d: %d records, want %d", i, len(recs), len(st.offs))
		}
		for j, r := range recs {
			if r.off != st.offs[j] || r.flags != st.flags[j] {
				t.Errorf("hit %d record %d: offset %d flags %d, want %d %d", i, j, r.off, r.flags, st.offs[j], st.flags[j])
			}
			if r.flags == RecSkip && uint64(r.size) != uint64(ringSize)-r.off {
				t.Errorf("hit %d: filler size %d at %d", i, r.size, r.off)
			}
			if r.flags == 0 && (r.regs[0] != uint64(i) || len(r.blocks) != 13 || int64(binary.LittleEndian.Uint64(r.blocks[5:])) != int64(100+i)) {
				t.Errorf("hit %d: record %+v", i, r)
			}
		}
		// Consume: zero what was read, then publish the tail.
		for c := tail; c < head; c++ {
			rig.ring[c%uint64(ringSize)] = 0
		}
		*rig.field(CtlTail) = head
	}
}

// TestPadConcurrent: four OS threads hit the same pad 10000 times each.
func TestPadConcurrent(t *testing.T) {
	const threads, perThread = 4, 10000
	const collectCap = 16
	ringSize := int(PadRecordSize(collectCap)) * threads * perThread
	rig := newPadRig(t, ringSize)
	rig.install(t, PadSpec{TPIndex: 5, Cond: compileAX(t, "reg 8; const8 100; less_unsigned; end"),
		Collect: []*Code{compileAX(t, "tracev 1; end")}, CollectCap: collectCap})
	stacks := make([]uintptr, threads)
	for i := range stacks {
		_, stacks[i] = padStack(t)
	}
	sps := make([]uint64, threads)
	var wg sync.WaitGroup
	for th := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var in, out [18]uint64
			in[8] = uint64(th)
			in[16] = 0x2 | flagCF
			for i := range perThread {
				in[9] = uint64(i)
				in[2] = uint64(i) << 20
				callSite(rig.site, &in, &out, stacks[th])
				if out[2] != in[2]+siteImm || out[9] != in[9] {
					t.Errorf("thread %d hit %d: rcx %#x r9 %#x", th, i, out[2], out[9])
					return
				}
			}
			sps[th] = out[17]
		}()
	}
	wg.Wait()
	if h := *rig.tpField(5, TPHits); h != threads*perThread {
		t.Errorf("hits %d", h)
	}
	recs := readRing(t, rig.ring, 0, *rig.field(CtlHead))
	if len(recs) != threads*perThread {
		t.Fatalf("%d records", len(recs))
	}
	seen := map[[2]uint64]bool{}
	for _, r := range recs {
		th, i := r.regs[8], r.regs[9]
		if th >= threads || i >= perThread || seen[[2]uint64{th, i}] || r.flags != 0 || r.tp != 5 {
			t.Fatalf("record %+v", r)
		}
		seen[[2]uint64{th, i}] = true
		if r.regs[2] != i<<20 || r.regs[7] != sps[th] || r.regs[16] != uint64(rig.site) || len(r.blocks) != 13 {
			t.Fatalf("thread %d hit %d: inconsistent record %+v", th, i, r)
		}
	}
}

// BenchmarkPadHit compares one call of the unpatched site with one call of
// the patched site whose pad evaluates a register condition and collects a
// trace state variable.
func BenchmarkPadHit(b *testing.B) {
	rig := newPadRig(b, 1<<20)
	_, stack := padStack(b)
	var in, out [18]uint64
	in[16] = 0x2
	in[8] = 7
	b.Run("unpatched", func(b *testing.B) {
		rig.unpatch()
		for b.Loop() {
			callSite(rig.site, &in, &out, stack)
		}
	})
	b.Run("patched", func(b *testing.B) {
		rig.install(b, PadSpec{Cond: compileAX(b, "reg 8; const8 100; less_unsigned; end"),
			Collect: []*Code{compileAX(b, "tracev 1; end")}, CollectCap: 16})
		n := 0
		for b.Loop() {
			callSite(rig.site, &in, &out, stack)
			if n++; n == 1000 { // keep the ring from filling
				*rig.field(CtlHead), *rig.field(CtlTail), n = 0, 0, 0
			}
		}
	})
}

// TestPadRingFull exercises the ring-full path without a SIGTRAP: the
// int3 at FullTrap is replaced by a jmp to what the stub would do. "skip"
// jumps to Skip (tracing stopped): the thread continues with its state
// intact and no record. "retry" jumps to code that drains the ring (tail =
// head) and continues at Retry: the record is then written.
func TestPadRingFull(t *testing.T) {
	recSize := PadRecordSize(0)
	for _, mode := range []string{"skip", "retry"} {
		t.Run(mode, func(t *testing.T) {
			rig := newPadRig(t, int(2*recSize))
			_, stack := padStack(t)
			in := [18]uint64{0: 11, 1: 22, 2: 33, 15: 44, 16: 0x2 | flagCF | flagOF}
			var expect, out [18]uint64
			rig.unpatch()
			callSite(rig.site, &in, &expect, stack)
			rig.install(t, PadSpec{TPIndex: 0})
			*rig.field(CtlHead) = 2 * recSize // full: nothing consumed
			base := uintptr(unsafe.Pointer(&rig.code[0]))
			jmpTo := func(from, to uintptr) {
				rig.code[from-base] = 0xe9
				binary.LittleEndian.PutUint32(rig.code[from-base+1:], uint32(int32(int64(to)-int64(from+5))))
			}
			if mode == "skip" {
				jmpTo(uintptr(rig.pad.FullTrap), uintptr(rig.pad.Skip))
			} else {
				// mov rax, [rbx+CtlHead]; mov [rbx+CtlTail], rax; jmp Retry
				drain := base + 128
				copy(rig.code[128:], []byte{0x48, 0x8b, 0x43, CtlHead, 0x48, 0x89, 0x43, CtlTail})
				jmpTo(drain+8, uintptr(rig.pad.Retry))
				jmpTo(uintptr(rig.pad.FullTrap), drain)
			}
			callSite(rig.site, &in, &out, stack)
			if out != expect {
				t.Errorf("registers after the hit %v, want %v", out, expect)
			}
			if h := *rig.tpField(0, TPHits); h != 1 {
				t.Errorf("hits %d", h)
			}
			head := *rig.field(CtlHead)
			switch mode {
			case "skip":
				if head != 2*recSize || binary.LittleEndian.Uint32(rig.ring) != 0 {
					t.Errorf("full ring: head %d, first size %d", head, binary.LittleEndian.Uint32(rig.ring))
				}
			case "retry":
				recs := readRing(t, rig.ring, 2*recSize, head)
				if len(recs) != 1 || recs[0].off != 0 || recs[0].regs[15] != 44 || recs[0].regs[16] != uint64(rig.site) {
					t.Errorf("after the retry: head %d, records %+v", head, recs)
				}
			}
		})
	}
}

// TestPadPassCount runs a pad whose tracepoint has a pass count of 2 with
// the int3 at PassTrap replaced by a nop (the stub resumes at PassTrap+1):
// every hit, including the one that reaches the pass count, restores the
// thread and records normally.
func TestPadPassCount(t *testing.T) {
	rig := newPadRig(t, 1<<12)
	_, stack := padStack(t)
	ins := make([][18]uint64, 3)
	expect := make([][18]uint64, 3)
	for i := range ins {
		ins[i] = [18]uint64{2: uint64(i) << 62, 3: uint64(i), 16: 0x2 | flagSF}
		callSite(rig.site, &ins[i], &expect[i], stack)
	}
	rig.install(t, PadSpec{TPIndex: 1})
	*rig.tpField(1, TPPassCount) = 2
	base := uintptr(unsafe.Pointer(&rig.code[0]))
	rig.code[uintptr(rig.pad.PassTrap)-base] = 0x90
	for i := range ins {
		var out [18]uint64
		callSite(rig.site, &ins[i], &out, stack)
		if out != expect[i] {
			t.Errorf("hit %d: %v, want %v", i, out, expect[i])
		}
	}
	if recs := readRing(t, rig.ring, 0, *rig.field(CtlHead)); len(recs) != 3 || *rig.tpField(1, TPHits) != 3 {
		t.Errorf("%d records, %d hits", len(recs), *rig.tpField(1, TPHits))
	}
}

// TestPadStackBytes checks JumpPad.StackBytes against the deepest stack
// byte a hit actually writes (condition, collection through the
// process_vm_readv helper).
func TestPadStackBytes(t *testing.T) {
	rig := newPadRig(t, 1<<14)
	stackMem, stack := padStack(t)
	rig.install(t, PadSpec{Cond: compileAX(t, "const8 1; reg 8; const8 1; add; div_unsigned; end"),
		Collect: []*Code{compileAX(t, "reg 4; const8 16; trace; reg 4; ref32; pop; end")}, CollectCap: 64})
	for i := range stackMem {
		stackMem[i] = 0xa5
	}
	in := [18]uint64{4: rig.dataAddr, 8: 0, 16: 0x2}
	var out [18]uint64
	callSite(rig.site, &in, &out, stack)
	if recs := readRing(t, rig.ring, 0, *rig.field(CtlHead)); len(recs) != 1 || len(recs[0].blocks) != 27 {
		t.Fatalf("records %+v", recs)
	}
	lowest := 0
	for lowest < len(stackMem) && stackMem[lowest] == 0xa5 {
		lowest++
	}
	base := uint64(uintptr(unsafe.Pointer(&stackMem[0])))
	used := int(out[17] - (base + uint64(lowest)))
	if used > rig.pad.StackBytes || used < padRedZone+padSaveBytes+padBlockBytes+CtxSize {
		t.Errorf("the hit used %d stack bytes; StackBytes %d", used, rig.pad.StackBytes)
	}
	t.Logf("stack used %d of %d bytes", used, rig.pad.StackBytes)
}
