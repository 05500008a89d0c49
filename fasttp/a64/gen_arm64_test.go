package a64

// Random instances of every kind for TestRelocateExec.

// execKind generates cases of one kind for a copy at r.
type execKind struct {
	name string
	gen  func(w *world, r uint64) execCase
}

var execKinds = []execKind{
	{"plain", genPlain},
	{"br/ret", genBrRet},
	{"adr", genADR},
	{"adrp", genADRP},
	{"ldr literal", genLoadLit},
	{"ldr literal fp", genLoadLitFP},
	{"prfm literal", genPrefetch},
	{"b", func(w *world, r uint64) execCase { return genB(w, r, 0x14000000) }},
	{"bl", func(w *world, r uint64) execCase { return genB(w, r, 0x94000000) }},
	{"b.cond", genBCond},
	{"cbz/cbnz", genCBZ},
	{"tbz/tbnz", genTBZ},
	{"blr", genBLR},
}

// randRegs is a random register file with sp in the middle of the stack.
func (w *world) randRegs() regs {
	var r regs
	for i := range r.X {
		r.X[i] = w.rng.Uint64()
	}
	for i := range r.V {
		r.V[i] = [2]uint64{w.rng.Uint64(), w.rng.Uint64()}
	}
	r.SP = w.h.stackBase() + stackSize/2
	r.NZCV = uint64(w.rng.Intn(16)) << 28
	return r
}

// reg is a random register number but x28 (Go's g), 31 only if allowed.
func (w *world) reg(allow31 bool) uint32 {
	for {
		n := uint32(w.rng.Intn(32))
		if n != 28 && (n != 31 || allow31) {
			return n
		}
	}
}

// target picks T within ±limit of the site, a multiple of 4, in region A
// and clear of the site, its stub and a copy at r.
func (w *world) target(r uint64, limit int64) uint64 {
	for {
		t := w.s + uint64((w.rng.Int63n(2*limit)-limit)&^3)
		clear := func(a, lo, hi uint64) bool { return a+32 <= lo || a >= hi+32 }
		if t >= w.a.base+0x1000 && t+32 < w.a.base+regionASize &&
			clear(t, w.s, w.s+16) && clear(t, r, r+0x110) {
			return t
		}
	}
}

func genPlain(w *world, _ uint64) execCase {
	words := []uint32{tAddX1X2X3, tSubsX4X5X6, tStrX7SPm32, tStpX8X9SP16, tFaddV, 0xd53b4203 /* mrs x3, nzcv */, wordNOP}
	return execCase{word: words[w.rng.Intn(len(words))], regs: w.randRegs()}
}

func genBrRet(w *world, r uint64) execCase {
	c := execCase{target: w.target(r, 1<<20), stub: true, regs: w.randRegs()}
	n := w.reg(false)
	c.regs.X[n] = c.target
	c.word = []uint32{0xd61f0000, 0xd65f0000}[w.rng.Intn(2)] | n<<5 // br xn, ret xn
	return c
}

func genADR(w *world, _ uint64) execCase {
	imm := w.rng.Int63n(1<<21) - 1<<20
	c := execCase{target: w.s + uint64(imm), regs: w.randRegs()}
	c.word = 0x10000000 | uint32(imm&3)<<29 | uint32(imm>>2)&0x7ffff<<5 | w.reg(true)
	return c
}

func genADRP(w *world, _ uint64) execCase {
	imm := w.rng.Int63n(1<<21) - 1<<20
	c := execCase{target: w.s&^0xfff + uint64(imm<<12), regs: w.randRegs()}
	c.word = 0x90000000 | uint32(imm&3)<<29 | uint32(imm>>2)&0x7ffff<<5 | w.reg(true)
	return c
}

// literal returns a literal-class word loading from a random T holding
// random bytes.
func (w *world) literal(r uint64, op uint32, rt uint32) execCase {
	c := execCase{target: w.target(r, 1<<20), regs: w.randRegs()}
	w.rng.Read(w.a.mem[c.target-w.a.base : c.target-w.a.base+16])
	c.word = op | uint32(int64(c.target-w.s)>>2)&0x7ffff<<5 | rt
	return c
}

func genLoadLit(w *world, r uint64) execCase {
	opc := uint32(w.rng.Intn(3)) // ldr w, ldr x, ldrsw
	return w.literal(r, opc<<30|0x18000000, w.reg(true))
}

func genLoadLitFP(w *world, r uint64) execCase {
	opc := uint32(w.rng.Intn(3)) // s, d, q
	return w.literal(r, opc<<30|0x1c000000, uint32(w.rng.Intn(32)))
}

func genPrefetch(w *world, r uint64) execCase {
	return w.literal(r, 0xd8000000, uint32(w.rng.Intn(32)))
}

func genB(w *world, r uint64, op uint32) execCase {
	c := execCase{target: w.target(r, 1<<20), stub: true, regs: w.randRegs()}
	c.word = op | uint32(int64(c.target-w.s)>>2)&0x3ffffff
	return c
}

func genBCond(w *world, r uint64) execCase {
	c := execCase{target: w.target(r, 1<<20), stub: true, regs: w.randRegs()}
	c.word = 0x54000000 | uint32(int64(c.target-w.s)>>2)&0x7ffff<<5 | uint32(w.rng.Intn(16))
	return c
}

func genCBZ(w *world, r uint64) execCase {
	c := execCase{target: w.target(r, 1<<20), stub: true, regs: w.randRegs()}
	rt := w.reg(true)
	switch w.rng.Intn(4) {
	case 0:
		c.regs.X[rt&31%31] = 0
	case 1:
		c.regs.X[rt&31%31] &^= 0xffffffff // zero as a W register only
	}
	op := uint32(w.rng.Intn(4)) // sf, cbnz
	c.word = op>>1<<31 | 0x34000000 | op&1<<24 | uint32(int64(c.target-w.s)>>2)&0x7ffff<<5 | rt
	return c
}

func genTBZ(w *world, r uint64) execCase {
	c := execCase{target: w.target(r, 1<<15), stub: true, regs: w.randRegs()}
	bit, nz := uint32(w.rng.Intn(64)), uint32(w.rng.Intn(2))
	c.word = bit>>5<<31 | 0x36000000 | nz<<24 | bit&31<<19 | uint32(int64(c.target-w.s)>>2)&0x3fff<<5 | w.reg(true)
	return c
}

func genBLR(w *world, r uint64) execCase {
	c := execCase{target: w.target(r, 1<<20), stub: true, regs: w.randRegs()}
	n := w.reg(false)
	for n == 30 {
		n = w.reg(false)
	}
	c.regs.X[n] = c.target
	c.word = 0xd63f0000 | n<<5
	return c
}
