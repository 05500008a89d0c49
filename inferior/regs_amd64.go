package inferior

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"gotpstub/tdesc"
)

// Offsets in struct user (x86-64).
const (
	userRIP      = 16 * 8 // regs.rip
	userDebugReg = 848    // offsetof(struct user, u_debugreg)
)

// Layout of the XSAVE area (tdesc.FillXSave decodes it).
const (
	fxsaveSize     = tdesc.FXSaveSize
	xstateBVOffset = tdesc.XStateBVOffset
	ymmHiOffset    = tdesc.YMMHiOffset
	xsaveAVXSize   = tdesc.XSaveAVXSize
	xfeatureX87    = tdesc.XFeatureX87
	xfeatureSSE    = tdesc.XFeatureSSE
	xfeatureAVX    = tdesc.XFeatureAVX
)

func getPC(tid int) (uint64, error) { return peekUser(tid, userRIP) }

func setPC(tid int, pc uint64) error { return pokeUser(tid, userRIP, pc) }

// gpr maps a general register number to its field in PtraceRegs.
func gpr(r *unix.PtraceRegs, num int) *uint64 {
	switch num {
	case tdesc.RAX:
		return &r.Rax
	case tdesc.RBX:
		return &r.Rbx
	case tdesc.RCX:
		return &r.Rcx
	case tdesc.RDX:
		return &r.Rdx
	case tdesc.RSI:
		return &r.Rsi
	case tdesc.RDI:
		return &r.Rdi
	case tdesc.RBP:
		return &r.Rbp
	case tdesc.RSP:
		return &r.Rsp
	case tdesc.R8:
		return &r.R8
	case tdesc.R9:
		return &r.R9
	case tdesc.R10:
		return &r.R10
	case tdesc.R11:
		return &r.R11
	case tdesc.R12:
		return &r.R12
	case tdesc.R13:
		return &r.R13
	case tdesc.R14:
		return &r.R14
	case tdesc.R15:
		return &r.R15
	case tdesc.RIP:
		return &r.Rip
	case tdesc.EFLAGS:
		return &r.Eflags
	case tdesc.CS:
		return &r.Cs
	case tdesc.SS:
		return &r.Ss
	case tdesc.DS:
		return &r.Ds
	case tdesc.ES:
		return &r.Es
	case tdesc.FS:
		return &r.Fs
	case tdesc.GS:
		return &r.Gs
	case tdesc.ORIGRAX:
		return &r.Orig_rax
	case tdesc.FSBASE:
		return &r.Fs_base
	case tdesc.GSBASE:
		return &r.Gs_base
	}
	return nil
}

// isGPR reports whether num lives in struct user_regs_struct.
func isGPR(num int) bool {
	return num <= tdesc.GS || num == tdesc.ORIGRAX || num == tdesc.FSBASE || num == tdesc.GSBASE
}

// readFPState returns the thread's XSAVE area (or FXSAVE area when XSAVE
// is unavailable).
func (p *Process) readFPState(tid int) ([]byte, error) {
	if p.xstateLen >= 0 {
		// One buffer per process, reused: only the ptrace goroutine
		// calls this, and callers copy out of it before the next call.
		if p.fpBuf == nil {
			p.fpBuf = make([]byte, 16384)
		}
		buf := p.fpBuf
		n, err := getRegset(tid, unix.NT_X86_XSTATE, buf)
		if err == nil && n >= fxsaveSize {
			p.xstateLen = n
			return buf[:n], nil
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.EIO) {
			return nil, fmt.Errorf("reading the xstate of %d: %w", tid, err)
		}
		p.xstateLen = -1
	}
	buf := make([]byte, fxsaveSize)
	if err := ptracePtr(unix.PTRACE_GETFPREGS, tid, 0, unsafe.Pointer(&buf[0])); err != nil {
		return nil, fmt.Errorf("reading the FPU state of %d: %w", tid, err)
	}
	return buf, nil
}

func (p *Process) writeFPState(tid int, buf []byte) error {
	if len(buf) > fxsaveSize {
		return setRegset(tid, unix.NT_X86_XSTATE, buf)
	}
	return ptracePtr(unix.PTRACE_SETFPREGS, tid, 0, unsafe.Pointer(&buf[0]))
}

// abridgedTag compresses an x87 tag word to FXSAVE's one bit per register.
func abridgedTag(tag uint16) byte {
	var b byte
	for phys := 0; phys < 8; phys++ {
		if (tag>>(2*phys))&3 != 3 {
			b |= 1 << phys
		}
	}
	return b
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
	fp, err := p.readFPState(tid)
	if err != nil {
		return nil, nil, err
	}
	r := p.layout.NewRegs()
	for num := range r.Layout.Regs {
		if isGPR(num) {
			_ = r.SetUint64(num, *gpr(&ur, num))
		}
	}
	tdesc.FillXSave(r, fp)
	return r, &ur, nil
}

// storeFP writes the valid x87/SSE/AVX registers of r into an XSAVE area
// and marks their components in use. It reports whether fp changed.
func storeFP(r *tdesc.Regs, fp []byte) {
	le := binary.LittleEndian
	valid := func(n int) bool { return n < len(r.Valid) && r.Valid[n] }
	var bv uint64
	for i := 0; i < 8; i++ {
		if valid(tdesc.ST0 + i) {
			copy(fp[32+16*i:], r.Get(tdesc.ST0+i))
			bv |= xfeatureX87
		}
	}
	if valid(tdesc.FCTRL) {
		le.PutUint16(fp[0:], uint16(r.Uint64(tdesc.FCTRL)))
		bv |= xfeatureX87
	}
	if valid(tdesc.FSTAT) {
		le.PutUint16(fp[2:], uint16(r.Uint64(tdesc.FSTAT)))
		bv |= xfeatureX87
	}
	if valid(tdesc.FTAG) {
		fp[4] = abridgedTag(uint16(r.Uint64(tdesc.FTAG)))
		bv |= xfeatureX87
	}
	if valid(tdesc.FOP) {
		le.PutUint16(fp[6:], uint16(r.Uint64(tdesc.FOP)&0x7ff))
		bv |= xfeatureX87
	}
	if valid(tdesc.FIOFF) {
		le.PutUint32(fp[8:], uint32(r.Uint64(tdesc.FIOFF)))
		bv |= xfeatureX87
	}
	if valid(tdesc.FISEG) {
		le.PutUint16(fp[12:], uint16(r.Uint64(tdesc.FISEG)))
		bv |= xfeatureX87
	}
	if valid(tdesc.FOOFF) {
		le.PutUint32(fp[16:], uint32(r.Uint64(tdesc.FOOFF)))
		bv |= xfeatureX87
	}
	if valid(tdesc.FOSEG) {
		le.PutUint16(fp[20:], uint16(r.Uint64(tdesc.FOSEG)))
		bv |= xfeatureX87
	}
	for i := 0; i < 16; i++ {
		if valid(tdesc.XMM0 + i) {
			copy(fp[160+16*i:], r.Get(tdesc.XMM0+i))
			bv |= xfeatureSSE
		}
	}
	if valid(tdesc.MXCSR) {
		le.PutUint32(fp[24:], uint32(r.Uint64(tdesc.MXCSR)))
		bv |= xfeatureSSE
	}
	if r.Layout.HasAVX && len(fp) >= xsaveAVXSize {
		for i := 0; i < 16; i++ {
			if valid(tdesc.YMM0H + i) {
				copy(fp[ymmHiOffset+16*i:], r.Get(tdesc.YMM0H+i))
				bv |= xfeatureAVX
			}
		}
	}
	if len(fp) >= xstateBVOffset+8 {
		le.PutUint64(fp[xstateBVOffset:], le.Uint64(fp[xstateBVOffset:])|bv)
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
		if isGPR(num) {
			*gpr(ur, num) = r.Uint64(num)
			gprChanged = true
		} else {
			fpChanged = true
		}
	}
	if gprChanged {
		if err := unix.PtraceSetRegs(tid, ur); err != nil {
			return false, fmt.Errorf("writing the registers of %d: %w", tid, err)
		}
	}
	if fpChanged {
		fp, err := p.readFPState(tid)
		if err != nil {
			return false, err
		}
		storeFP(r, fp)
		if err := p.writeFPState(tid, fp); err != nil {
			return false, fmt.Errorf("writing the FPU/vector registers of %d: %w", tid, err)
		}
	}
	return gprChanged || fpChanged, nil
}

// userFSBase is the offset of fs_base in struct user.
const userFSBase = 21 * 8

// threadPointer reads tid's thread pointer, fs_base.
func threadPointer(tid int) (uint64, error) { return peekUser(tid, userFSBase) }
