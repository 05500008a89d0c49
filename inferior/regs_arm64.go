package inferior

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"gotpstub/tdesc"
)

// Registers on arm64 come in register sets: NT_PRSTATUS (struct
// user_pt_regs: x0–x30, sp, pc, pstate; unix.PtraceRegs), NT_PRFPREG
// (NT_FPREGSET, struct user_fpsimd_state: v0–v31, fpsr, fpcr) or, when
// the layout has SVE, NT_ARM_SVE (sve.go), and NT_ARM_PAC_MASK for the
// pauth feature's read-only masks. There is no PTRACE_PEEKUSR on arm64:
// even the pc is read through the set.

// pstateSS is PSTATE.SS, the software-step bit: the kernel owns it (a
// thread that was single-stepped keeps it set until it next runs, and a
// register write cannot change it), so it is left out of cpsr as read
// and kept as it is on writes.
const pstateSS = 1 << 21

// Layout of struct user_fpsimd_state.
const (
	fpsimdVRegs = 0
	fpsimdFPSR  = 32 * 16
	fpsimdFPCR  = fpsimdFPSR + 4
	fpsimdSize  = fpsimdFPCR + 4 + 8 // two reserved words
)

func getPC(tid int) (uint64, error) {
	var r unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &r); err != nil {
		return 0, err
	}
	return r.Pc, nil
}

func setPC(tid int, pc uint64) error {
	var r unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &r); err != nil {
		return err
	}
	r.Pc = pc
	return unix.PtraceSetRegs(tid, &r)
}

// gpr maps a core register number to its field in PtraceRegs (cpsr is
// pstate's low 32 bits).
func gpr(r *unix.PtraceRegs, num int) *uint64 {
	switch {
	case num >= tdesc.AArch64X0 && num <= tdesc.AArch64LR:
		return &r.Regs[num-tdesc.AArch64X0]
	case num == tdesc.AArch64SP:
		return &r.Sp
	case num == tdesc.AArch64PC:
		return &r.Pc
	case num == tdesc.AArch64CPSR:
		return &r.Pstate
	}
	return nil
}

// isGPR reports whether num lives in struct user_pt_regs.
func isGPR(num int) bool { return num >= tdesc.AArch64X0 && num <= tdesc.AArch64CPSR }

// readFPState returns the thread's struct user_fpsimd_state.
func readFPState(tid int) ([]byte, error) {
	buf := make([]byte, fpsimdSize)
	n, err := getRegset(tid, unix.NT_PRFPREG, buf)
	if err != nil {
		return nil, fmt.Errorf("reading the FP/SIMD registers of %d: %w", tid, err)
	}
	if n < fpsimdFPCR+4 {
		return nil, fmt.Errorf("reading the FP/SIMD registers of %d: %d bytes", tid, n)
	}
	return buf, nil
}

// getRegs reads every register of a stopped thread.
func (p *Process) getRegs(tid int) (*tdesc.Regs, error) {
	r, _, err := p.getRegsRaw(tid)
	return r, err
}

// getRegsRaw reads every register and also returns the general-purpose
// set as ptrace gave it.
func (p *Process) getRegsRaw(tid int) (*tdesc.Regs, *unix.PtraceRegs, error) {
	var ur unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &ur); err != nil {
		return nil, nil, fmt.Errorf("reading the registers of %d: %w", tid, err)
	}
	r := p.layout.NewRegs()
	for num := tdesc.AArch64X0; num <= tdesc.AArch64CPSR; num++ {
		_ = r.SetUint64(num, *gpr(&ur, num))
	}
	_ = r.SetUint64(tdesc.AArch64CPSR, ur.Pstate&^pstateSS)
	if err := readVectorRegs(tid, r); err != nil {
		return nil, nil, err
	}
	readPAuthMasks(tid, r)
	return r, &ur, nil
}

// readVectorRegs fills r's vector registers and fpsr, fpcr: v0–v31, or
// with SVE z0–z31, p0–p15, ffr and vg.
func readVectorRegs(tid int, r *tdesc.Regs) error {
	if r.Layout.VQ > 0 {
		sve, err := readSVE(tid)
		if err != nil {
			return err
		}
		sve.fill(r)
		return nil
	}
	fp, err := readFPState(tid)
	if err != nil {
		return err
	}
	for i := 0; i < 32; i++ {
		_ = r.Set(tdesc.AArch64V0+i, fp[fpsimdVRegs+16*i:fpsimdVRegs+16*(i+1)])
	}
	_ = r.Set(tdesc.AArch64FPSR, fp[fpsimdFPSR:fpsimdFPSR+4])
	_ = r.Set(tdesc.AArch64FPCR, fp[fpsimdFPCR:fpsimdFPCR+4])
	return nil
}

// readPAuthMasks fills the pauth feature's masks when the layout has it
// (left unknown if the kernel does not give them).
func readPAuthMasks(tid int, r *tdesc.Regs) {
	dmask, ok := r.Layout.Find("pauth_dmask")
	if !ok {
		return
	}
	var b [16]byte // struct user_pac_mask: data_mask, insn_mask
	if n, err := getRegset(tid, unix.NT_ARM_PAC_MASK, b[:]); err != nil || n < len(b) {
		return
	}
	_ = r.Set(dmask.Num, b[0:8])
	_ = r.Set(dmask.Num+1, b[8:16])
}

// isVectorReg reports whether num is a register of the fpu or sve
// feature.
func isVectorReg(l *tdesc.Layout, num int) bool {
	f := l.Regs[num].Feature
	return f == tdesc.FeatureAArch64FPU || f == tdesc.FeatureAArch64SVE
}

// storeFP writes the valid FP/SIMD registers of r into a struct
// user_fpsimd_state.
func storeFP(r *tdesc.Regs, fp []byte) {
	valid := func(n int) bool { return n < len(r.Valid) && r.Valid[n] }
	for i := 0; i < 32; i++ {
		if valid(tdesc.AArch64V0 + i) {
			copy(fp[fpsimdVRegs+16*i:], r.Get(tdesc.AArch64V0+i))
		}
	}
	if valid(tdesc.AArch64FPSR) {
		binary.LittleEndian.PutUint32(fp[fpsimdFPSR:], uint32(r.Uint64(tdesc.AArch64FPSR)))
	}
	if valid(tdesc.AArch64FPCR) {
		binary.LittleEndian.PutUint32(fp[fpsimdFPCR:], uint32(r.Uint64(tdesc.AArch64FPCR)))
	}
}

// writeChangedRegs writes the registers of r that differ from cur (the
// thread's current registers, ur their general-purpose part) and reports
// whether anything was written.
func (p *Process) writeChangedRegs(tid int, cur *tdesc.Regs, ur *unix.PtraceRegs, r *tdesc.Regs) (bool, error) {
	gprChanged, fpChanged := false, false
	for num := range cur.Layout.Regs {
		if num >= len(r.Layout.Regs) || num >= len(r.Valid) || !r.Valid[num] {
			continue
		}
		if string(r.Get(num)) == string(cur.Get(num)) {
			continue
		}
		switch {
		case isGPR(num):
			v := r.Uint64(num)
			if num == tdesc.AArch64CPSR {
				// cpsr is pstate's low half, without SS.
				v = v&^pstateSS | ur.Pstate&(^uint64(0xffffffff)|pstateSS)
			}
			*gpr(ur, num) = v
			gprChanged = true
		case isVectorReg(cur.Layout, num):
			fpChanged = true
		}
		// The pauth masks are read-only.
	}
	if gprChanged {
		if err := unix.PtraceSetRegs(tid, ur); err != nil {
			return false, fmt.Errorf("writing the registers of %d: %w", tid, err)
		}
	}
	if fpChanged {
		if err := writeVectorRegs(tid, r); err != nil {
			return false, err
		}
	}
	return gprChanged || fpChanged, nil
}

// writeVectorRegs writes r's valid vector registers, fpsr and fpcr.
func writeVectorRegs(tid int, r *tdesc.Regs) error {
	if r.Layout.VQ > 0 {
		sve, err := readSVE(tid)
		if err != nil {
			return err
		}
		sve.store(r)
		if err := setRegset(tid, unix.NT_ARM_SVE, sve.encode()); err != nil {
			return fmt.Errorf("writing the SVE registers of %d: %w", tid, err)
		}
		return nil
	}
	fp, err := readFPState(tid)
	if err != nil {
		return err
	}
	storeFP(r, fp)
	if err := setRegset(tid, unix.NT_PRFPREG, fp); err != nil {
		return fmt.Errorf("writing the FP/SIMD registers of %d: %w", tid, err)
	}
	return nil
}

// threadPointer reads tid's thread pointer, tpidr_el0 (NT_ARM_TLS).
func threadPointer(tid int) (uint64, error) {
	var b [8]byte
	if _, err := getRegset(tid, unix.NT_ARM_TLS, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}
