package inferior

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"gotpstub/tdesc"
)

// SVE registers through NT_ARM_SVE: a struct user_sve_header (size,
// max_size, vl, max_vl, flags) then, when flags say SVE_PT_REGS_SVE, the
// Z registers (vq×16 bytes each), the P registers and FFR (vq×2 bytes
// each), fpsr and fpcr at the next 16-byte boundary; otherwise (a thread
// that has not used SVE) a struct user_fpsimd_state, whose V registers
// are the Z registers' low 128 bits, the rest zero. The stub always
// writes the SVE form, as gdbserver does.

const (
	sveHeaderSize = 16
	svePTRegsSVE  = 1  // flags: the payload is in SVE form
	sveMaxVQ      = 16 // the architecture's largest vector length
	sveVQBytes    = 16 // a quadword
	sveFlagsMask  = 2  // flags kept on writes: SVE_PT_VL_INHERIT
)

// sveZOffset, svePOffset, sveFFROffset and sveFPSROffset are where the
// registers of a vector length of vq quadwords start in the SVE form.
func sveZOffset(vq, n int) int { return sveHeaderSize + n*vq*sveVQBytes }
func svePOffset(vq, n int) int { return sveZOffset(vq, 32) + n*vq*2 }
func sveFFROffset(vq int) int  { return svePOffset(vq, 16) }
func sveFPSROffset(vq int) int {
	return (sveFFROffset(vq) + vq*2 + sveVQBytes - 1) / sveVQBytes * sveVQBytes
}

// sveSize is the size of the SVE form (the header's size); sveBufSize
// rounds it up to what PTRACE_GETREGSET and SETREGSET take, whole
// quadwords.
func sveSize(vq int) int    { return sveFPSROffset(vq) + 8 }
func sveBufSize(vq int) int { return (sveSize(vq) + sveVQBytes - 1) / sveVQBytes * sveVQBytes }

// sveRegs is a thread's SVE state at its own vector length.
type sveRegs struct {
	vq         int
	maxSize    uint32
	maxVL      uint16
	flags      uint16 // without the payload's form
	z          [32][]byte
	p          [16][]byte
	ffr        []byte
	fpsr, fpcr uint32
}

// readSVE reads tid's SVE state, in either form.
func readSVE(tid int) (*sveRegs, error) {
	buf := make([]byte, sveBufSize(sveMaxVQ))
	n, err := getRegset(tid, unix.NT_ARM_SVE, buf)
	if err != nil {
		return nil, fmt.Errorf("reading the SVE registers of %d: %w", tid, err)
	}
	if n < sveHeaderSize {
		return nil, fmt.Errorf("reading the SVE registers of %d: %d bytes", tid, n)
	}
	le := binary.LittleEndian
	vl, flags := int(le.Uint16(buf[8:])), le.Uint16(buf[12:])
	s := &sveRegs{vq: vl / sveVQBytes, maxSize: le.Uint32(buf[4:]), maxVL: le.Uint16(buf[10:]), flags: flags & sveFlagsMask}
	if s.vq == 0 || s.vq > sveMaxVQ {
		return nil, fmt.Errorf("reading the SVE registers of %d: vector length %d", tid, vl)
	}
	sveForm := flags&svePTRegsSVE != 0
	need := sveHeaderSize + fpsimdSize
	if sveForm {
		need = sveSize(s.vq)
	}
	if n < need {
		return nil, fmt.Errorf("reading the SVE registers of %d: %d bytes, want %d", tid, n, need)
	}
	s.ffr = make([]byte, s.vq*2)
	for i := range s.p {
		s.p[i] = make([]byte, s.vq*2)
	}
	for i := range s.z {
		s.z[i] = make([]byte, s.vq*sveVQBytes)
	}
	if !sveForm {
		fp := buf[sveHeaderSize:]
		for i := range s.z {
			copy(s.z[i], fp[fpsimdVRegs+16*i:fpsimdVRegs+16*(i+1)])
		}
		s.fpsr, s.fpcr = le.Uint32(fp[fpsimdFPSR:]), le.Uint32(fp[fpsimdFPCR:])
		return s, nil
	}
	for i := range s.z {
		copy(s.z[i], buf[sveZOffset(s.vq, i):])
	}
	for i := range s.p {
		copy(s.p[i], buf[svePOffset(s.vq, i):])
	}
	copy(s.ffr, buf[sveFFROffset(s.vq):])
	s.fpsr = le.Uint32(buf[sveFPSROffset(s.vq):])
	s.fpcr = le.Uint32(buf[sveFPSROffset(s.vq)+4:])
	return s, nil
}

// fill stores the state into r, whose layout's vector length may differ
// from the thread's (a program that changed its own): the registers are
// cut or zero-extended.
func (s *sveRegs) fill(r *tdesc.Regs) {
	set := func(num int, b []byte) {
		v := make([]byte, r.Layout.Regs[num].Size)
		copy(v, b)
		_ = r.Set(num, v)
	}
	for i, z := range s.z {
		set(tdesc.AArch64Z0+i, z)
	}
	for i, p := range s.p {
		set(tdesc.AArch64P0+i, p)
	}
	set(tdesc.AArch64FFR, s.ffr)
	_ = r.SetUint64(tdesc.AArch64FPSR, uint64(s.fpsr))
	_ = r.SetUint64(tdesc.AArch64FPCR, uint64(s.fpcr))
	_ = r.SetUint64(tdesc.AArch64VG, uint64(s.vq*2))
}

// store takes r's valid registers into the state (vg, the vector
// length, is not changed).
func (s *sveRegs) store(r *tdesc.Regs) {
	valid := func(n int) bool { return n < len(r.Valid) && r.Valid[n] }
	for i, z := range s.z {
		if valid(tdesc.AArch64Z0 + i) {
			copy(z, r.Get(tdesc.AArch64Z0+i))
		}
	}
	for i, p := range s.p {
		if valid(tdesc.AArch64P0 + i) {
			copy(p, r.Get(tdesc.AArch64P0+i))
		}
	}
	if valid(tdesc.AArch64FFR) {
		copy(s.ffr, r.Get(tdesc.AArch64FFR))
	}
	if valid(tdesc.AArch64FPSR) {
		s.fpsr = uint32(r.Uint64(tdesc.AArch64FPSR))
	}
	if valid(tdesc.AArch64FPCR) {
		s.fpcr = uint32(r.Uint64(tdesc.AArch64FPCR))
	}
}

// encode returns the state as NT_ARM_SVE's SVE form.
func (s *sveRegs) encode() []byte {
	le := binary.LittleEndian
	buf := make([]byte, sveBufSize(s.vq))
	le.PutUint32(buf[0:], uint32(sveSize(s.vq)))
	le.PutUint32(buf[4:], s.maxSize)
	le.PutUint16(buf[8:], uint16(s.vq*sveVQBytes))
	le.PutUint16(buf[10:], s.maxVL)
	le.PutUint16(buf[12:], s.flags|svePTRegsSVE)
	for i, z := range s.z {
		copy(buf[sveZOffset(s.vq, i):], z)
	}
	for i, p := range s.p {
		copy(buf[svePOffset(s.vq, i):], p)
	}
	copy(buf[sveFFROffset(s.vq):], s.ffr)
	le.PutUint32(buf[sveFPSROffset(s.vq):], s.fpsr)
	le.PutUint32(buf[sveFPSROffset(s.vq)+4:], s.fpcr)
	return buf
}
