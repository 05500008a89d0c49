package fasttp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// JumpLen is the length of the `jmp rel32` written at a fast tracepoint.
const JumpLen = 5

// Int3 is the breakpoint opcode a punned rel32 byte must hold.
const Int3 = 0xcc

// ErrSiteRefused is wrapped by every PlanSite error: the site cannot take a
// jump and should use a trap tracepoint instead.
var ErrSiteRefused = errors.New("site cannot take a 5-byte jump")

// Site is the plan for patching a `jmp rel32` over the instruction at Addr.
//
// The jump overwrites the first Covered bytes (JumpLen bytes of jump; any
// remaining bytes of the last covered instruction are filler). Insns are the
// covered instructions, which run relocated in the pad area.
//
// Instruction punning: when a covered instruction other than the first
// starts at offset 1..4 (inside the jump), a thread may still arrive there
// (a branch target, a return address, or a thread that was stopped there).
// The rel32 byte at that offset must then be int3 (0xcc), so such a thread
// traps and the stub can move it to the relocated copy of that instruction
// (RelocateRun's heads). Puns lists those offsets; Forced maps the rel32
// byte index (offset-1, 0..3) to the value it must have (always Int3), and
// FindPadAddr only returns pad addresses whose rel32 has those bytes.
type Site struct {
	// Addr is the tracepoint address, where the jump goes.
	Addr uint64
	// Insns are the instructions the jump covers, in order; their total
	// length is Covered (>= JumpLen).
	Insns []Insn
	// Covered is the number of bytes from Addr occupied by Insns.
	Covered int
	// Puns are the offsets (1..4) inside the jump where a covered
	// instruction other than the first starts.
	Puns []int
	// Forced maps rel32 byte index (0..3, i.e. offset-1) to the value it
	// must have: Int3 for each pun.
	Forced map[int]byte
}

// Resume is the address where execution continues after the relocated
// covered instructions: the first instruction after the jump.
func (s Site) Resume() uint64 { return s.Addr + uint64(s.Covered) }

// PlanSite decodes the instructions at addr (code holds the bytes from
// addr; 20 bytes are always enough) until at least JumpLen bytes are
// covered and plans the jump. It refuses (error wrapping ErrSiteRefused)
// when:
//   - an instruction cannot be decoded safely (see DecodeInsn) or
//     relocated (int3, xbegin, far transfers, odd prefixes: RelocateInsn);
//   - a covered instruction other than the last is an unconditional
//     transfer (jmp, ret, indirect jmp): the bytes after it may not be
//     instructions of this function at all;
//   - a covered relative branch targets the inside of the covered range
//     (Addr+1 .. Addr+Covered-1), which the jump destroys.
func PlanSite(code []byte, addr uint64) (Site, error) {
	s := Site{Addr: addr, Forced: map[int]byte{}}
	for s.Covered < JumpLen {
		in, err := DecodeInsn(code[s.Covered:], addr+uint64(s.Covered))
		if err != nil {
			return Site{}, fmt.Errorf("plan site %#x: %w: %w", addr, ErrSiteRefused, err)
		}
		if _, err := RelocateInsn(in, in.Addr); err != nil {
			return Site{}, fmt.Errorf("plan site %#x: %w: %w", addr, ErrSiteRefused, err)
		}
		if len(s.Insns) > 0 {
			prev := s.Insns[len(s.Insns)-1]
			switch prev.Kind {
			case KindJmpRel8, KindJmpRel32, KindRet, KindIndirectJmp:
				return Site{}, fmt.Errorf("plan site %#x: %w: the jump would cover bytes after the %v at %#x", addr, ErrSiteRefused, prev.Kind, prev.Addr)
			}
			s.Puns = append(s.Puns, s.Covered)
			s.Forced[s.Covered-1] = Int3
		}
		s.Insns = append(s.Insns, in)
		s.Covered += in.Len
	}
	for _, in := range s.Insns {
		if in.RelSize > 0 && in.Target > addr && in.Target < s.Resume() {
			return Site{}, fmt.Errorf("plan site %#x: %w: the %v at %#x targets %#x inside the covered bytes", addr, ErrSiteRefused, in.Kind, in.Addr, in.Target)
		}
	}
	return s, nil
}

// PatchBytes returns the Covered bytes to write at Addr for a jump to the
// pad entry pad: `jmp rel32` followed by int3 filler for the rest of the
// last covered instruction. It fails if rel32 does not fit or does not have
// the bytes Forced requires (a pad address not obtained from FindPadAddr).
func (s Site) PatchBytes(pad uint64) ([]byte, error) {
	if s.Covered < JumpLen {
		return nil, fmt.Errorf("patch for %#x: site covers only %d bytes", s.Addr, s.Covered)
	}
	d, err := rel32(s.Addr+JumpLen, pad)
	if err != nil {
		return nil, fmt.Errorf("patch for %#x: %w", s.Addr, err)
	}
	patch := make([]byte, s.Covered)
	patch[0] = 0xe9
	binary.LittleEndian.PutUint32(patch[1:], uint32(d))
	for i := JumpLen; i < s.Covered; i++ {
		patch[i] = Int3
	}
	for idx, v := range s.Forced {
		if idx < 0 || idx > 3 || patch[1+idx] != v {
			return nil, fmt.Errorf("patch for %#x: rel32 %#08x does not have byte %d = %#02x", s.Addr, uint32(d), idx, v)
		}
	}
	return patch, nil
}
