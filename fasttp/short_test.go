package fasttp

import (
	"errors"
	"testing"
)

func TestShortSite(t *testing.T) {
	const addr = 0x401000
	yes := func(uint64) bool { return true }
	nops := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = 0x90
		}
		return b
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	label := []byte{0xb8, 1, 0, 0, 0, 0xc3} // mov eax, 1; ret
	mov5 := label[:5]
	// bytes repeats b n times.
	bytes := func(b []byte, n int) []byte {
		var out []byte
		for range n {
			out = append(out, b[:5]...)
		}
		return out
	}
	tests := []struct {
		name   string
		code   []byte
		isCode CodeOracle
		slot   uint64 // 0: refused
		cover  int
	}{
		{"pop r14; ret; 13 nops", cat([]byte{0x41, 0x5e, 0xc3}, nops(13), label), nil, addr + 3, 2},
		{"jmp rel8; 14 nops: the slot after the jump itself", cat([]byte{0xeb, 0x20}, nops(14), label), nil, addr + 2, 2},
		{"ret; 15 nops: the ret and a dead byte", cat([]byte{0xc3}, nops(15), label), nil, addr + 2, 2},
		{"ret; 3 nops at an odd place: too little padding", cat([]byte{0x31, 0xc0}, mov5, mov5, []byte{0xc3}, nops(3), label), nil, 0, 0},
		{"pop rbx; ret; padding: a 1-byte pop", cat([]byte{0x5b, 0xc3}, nops(14), label), nil, 0, 0},
		{"too little padding, then a label's ret and padding, unvouched", cat([]byte{0x31, 0xc0}, mov5, mov5, []byte{0xc3}, nops(3), label, nops(10), label), nil, 0, 0},
		{"too little padding, then a label's ret and padding, vouched", cat([]byte{0x31, 0xc0}, mov5, mov5, []byte{0xc3}, nops(3), label, nops(10), label), yes, addr + 22, 2},
		{"padding 122 bytes on: within a short jump's reach", cat([]byte{0x31, 0xc0}, mov5, mov5, []byte{0xc3}, nops(3), bytes(label, 21), []byte{0xc3}, nops(6), label), yes, addr + 122, 2},
		{"padding 132 bytes on: beyond a short jump's reach", cat([]byte{0x31, 0xc0}, mov5, mov5, []byte{0xc3}, nops(3), bytes(label, 23), []byte{0xc3}, nops(12), label), yes, 0, 0},
		{"mov (3 bytes); jmp *rax; int3 padding", cat([]byte{0x48, 0x89, 0xc7, 0xff, 0xe0}, []byte{0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc}, label), nil, addr + 5, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ShortSite(tt.code, addr, tt.isCode)
			if tt.slot == 0 {
				if !errors.Is(err, ErrSiteRefused) {
					t.Fatalf("ShortSite = %+v, %v; want a refusal", s, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Slot != tt.slot || s.Covered != tt.cover || s.Footprint() != tt.cover {
				t.Fatalf("slot %#x covering %d (footprint %d), want %#x covering %d", s.Slot, s.Covered, s.Footprint(), tt.slot, tt.cover)
			}
			patch, err := s.PatchBytes(0x500000)
			if err != nil {
				t.Fatal(err)
			}
			if patch[0] != 0xeb || addr+2+uint64(patch[1]) != s.Slot || len(patch) != s.Covered {
				t.Errorf("short jump % x does not go to the slot %#x", patch, s.Slot)
			}
			slot, err := s.SlotBytes(0x500000)
			if err != nil {
				t.Fatal(err)
			}
			if got := jumpTarget(slot, 0, s.Slot); got != 0x500000 {
				t.Errorf("the slot's jump goes to %#x", got)
			}
			if !s.Overlaps(s.Slot+4, 1) || s.Overlaps(s.Slot+5, 1) || !s.Overlaps(addr, 1) {
				t.Errorf("Overlaps does not cover the slot and the short jump exactly")
			}
		})
	}
}

// TestShortSitesShareThePadding: 13 bytes of padding hold two slots, so
// two tracepoints nearby can both take a short jump there.
func TestShortSitesShareThePadding(t *testing.T) {
	code := []byte{0x41, 0x5e, 0xc3, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xb8, 1, 0, 0, 0, 0xc3}
	sites, err := ShortSites(nil, code, 0x401000, nil)
	if err != nil {
		t.Fatal(err)
	}
	var slots []uint64
	for _, s := range sites {
		slots = append(slots, s.Slot)
	}
	if len(slots) != 2 || slots[0] != 0x401003 || slots[1] != 0x401008 {
		t.Fatalf("slots %#x, want 0x401003 and 0x401008", slots)
	}
}

// FuzzSiteCandidates checks every shape SiteCandidates offers against
// the code it was planned from: the bytes each writes lie in the code,
// a short jump's slot lies in nops or int3s after its own bytes and
// within reach, and the patches jump where FindPadAddrs put the pads.
func FuzzSiteCandidates(f *testing.F) {
	for _, seed := range [][]byte{
		{0x41, 0x5e, 0xc3, 0x0f, 0x1f, 0x40, 0x00, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xb8, 1, 0, 0, 0},
		{0x5b, 0xb8, 1, 0, 0, 0, 0x90, 0x90},
		{0xeb, 0x10, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc},
		{0x31, 0xc0, 0xe8, 1, 2, 3, 4, 0xc3},
	} {
		f.Add(seed, uint64(0x401000), true, uint8(0))
	}
	f.Add([]byte{0xc3, 0x0f, 0x1f, 0x44, 0, 0, 0x90, 0x90, 0x90, 0x41, 0x5e, 0x5b, 0xc3}, uint64(0x401009), true, uint8(9))
	f.Fuzz(func(t *testing.T, code []byte, addr uint64, vouch bool, backLen uint8) {
		if addr > 1<<46 || addr < 1<<20 {
			return
		}
		back := code[:min(int(backLen), len(code))]
		code = code[len(back):]
		var isCode CodeOracle
		if vouch {
			isCode = func(uint64) bool { return true }
		}
		cands, err := SiteCandidates(back, code, addr, isCode)
		if err != nil {
			return
		}
		free := []Range{{0x10000, addr &^ 0xfff}, {(addr + 0x10000) &^ 0xfff, 1 << 47}}
		for _, s := range cands {
			if s.Footprint() > len(code) || s.Footprint() < 1 {
				t.Fatalf("%+v: footprint %d of %d bytes of code", s, s.Footprint(), len(code))
			}
			pad, tramp, err := FindPadAddrs(s, free, 1024)
			if err != nil {
				continue
			}
			s.Tramp = tramp
			patch, err := s.PatchBytes(pad)
			if err != nil {
				t.Fatalf("%+v: PatchBytes: %v", s, err)
			}
			if len(patch) != s.Footprint() {
				t.Fatalf("patch of %d bytes, footprint %d", len(patch), s.Footprint())
			}
			if s.Slot == 0 {
				if s.Evicted == nil && s.Prefix == 0 && jumpTarget(patch, 0, addr) != pad {
					t.Fatalf("% x does not jump to the pad %#x", patch, pad)
				}
				continue
			}
			if h := s.Host; h != nil {
				if s.Slot != h.Addr+JumpLen || h.Covered < HostMinLen || s.Tramp == 0 || (h.Addr < addr+uint64(s.Covered) && h.Addr+uint64(h.Covered) > addr) {
					t.Fatalf("slot %#x in the neighbour %+v (trampoline %#x) of a short jump at %#x", s.Slot, h, s.Tramp, addr)
				}
				hb, err := s.HostBytes(pad)
				if err != nil || jumpTarget(hb, 0, h.Addr) != s.Tramp || jumpTarget(hb, JumpLen, h.Addr) != pad {
					t.Fatalf("neighbour bytes % x (%v)", hb, err)
				}
				continue
			}
			if s.Slot < addr {
				if s.Slot+JumpLen > addr || s.Slot+128 < addr+ShortJumpLen || s.Slot < addr-uint64(len(back)) {
					t.Fatalf("backward slot %#x for a short jump at %#x", s.Slot, addr)
				}
				continue
			}
			off := int(s.Slot - addr)
			if patch[0] != 0xeb || off < s.Covered || off+JumpLen > len(code) || off-ShortJumpLen > ShortReach {
				t.Fatalf("short jump % x to slot %#x (covered %d)", patch, s.Slot, s.Covered)
			}
			if !inPadding(code, addr, off) {
				t.Fatalf("slot %#x is not in nops or int3s after a ret or jmp (code % x)", s.Slot, code)
			}
			slot, err := s.SlotBytes(pad)
			if err != nil || jumpTarget(slot, 0, s.Slot) != pad {
				t.Fatalf("slot jump % x (%v) does not go to %#x", slot, err, pad)
			}
		}
	})
}

// inPadding reports whether the JumpLen bytes at code[off:] lie in a run
// of nops or int3s that follows a ret or jmp, decoding from the start.
func inPadding(code []byte, addr uint64, off int) bool {
	for at := 0; at < len(code); {
		in, err := DecodeInsn(code[at:], addr+uint64(at))
		if err != nil {
			return false
		}
		at += in.Len
		if !in.NoFallThrough() {
			continue
		}
		run := at
		for run < off+JumpLen && run < len(code) {
			if code[run] == Int3 {
				run++
				continue
			}
			nop, err := DecodeInsn(code[run:], addr+uint64(run))
			if err != nil || !nop.IsNop() {
				break
			}
			run += nop.Len
		}
		if at <= off && run >= off+JumpLen {
			return true
		}
	}
	return false
}

// TestShortSitesBackward: padding before the site, after a ret the
// oracle vouches for, takes a short jump backward; without the oracle
// nothing before the site counts.
func TestShortSitesBackward(t *testing.T) {
	back := []byte{0xc3, 0x0f, 0x1f, 0x44, 0, 0, 0x90, 0x90, 0x55} // ret; nopl; nop; nop | push rbp
	code := []byte{0x41, 0x5e, 0x5b, 0xc3}                         // pop r14; pop rbx; ret
	const addr = 0x401009
	isCode := func(a uint64) bool { return a == 0x401000 || a == 0x401008 || a >= addr }
	sites, err := ShortSites(back, code, addr, isCode)
	if err != nil {
		t.Fatal(err)
	}
	if len(sites) != 1 || sites[0].Slot != 0x401001 {
		t.Fatalf("%d sites, first slot %#x; want one, at 0x401001", len(sites), sites[0].Slot)
	}
	patch, err := sites[0].PatchBytes(0x500000)
	if err != nil {
		t.Fatal(err)
	}
	if patch[0] != 0xeb || int8(patch[1]) != -10 {
		t.Errorf("short jump % x, want eb f6 (back to 0x401001)", patch)
	}
	if _, err := ShortSites(back, code, addr, nil); !errors.Is(err, ErrSiteRefused) {
		t.Errorf("without an oracle: %v, want a refusal", err)
	}
}

// TestShortSiteIntoNeighbour: with no padding in reach, a short jump's
// slot goes inside a neighbour of 10 bytes or more, which gets a jump
// of its own to a trampoline and lends the rest of its bytes.
func TestShortSiteIntoNeighbour(t *testing.T) {
	// xor eax, eax; mov dword [rip+0x10], 0x2a (10 bytes); add eax, 1; pop rbx; push rbx
	code := []byte{0x31, 0xc0, 0xc7, 0x05, 0x10, 0, 0, 0, 0x2a, 0, 0, 0, 0x83, 0xc0, 0x01, 0x5b, 0x53}
	const addr = 0x401000
	sites, err := ShortSites(nil, code, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := sites[0]
	if s.Host == nil || s.Host.Addr != addr+2 || s.Slot != addr+7 || s.Host.Covered != 10 {
		t.Fatalf("site %+v: want a slot at %#x in the neighbour at %#x", s, addr+7, addr+2)
	}
	free := []Range{{0x10000, 0x400000}, {0x500000, 0x7ffff000}}
	pad, tramp, err := FindPadAddrs(s, free, 1024)
	if err != nil {
		t.Fatal(err)
	}
	s.Tramp = tramp
	host, err := s.HostBytes(pad)
	if err != nil {
		t.Fatal(err)
	}
	if len(host) != 10 || jumpTarget(host, 0, s.Host.Addr) != tramp || jumpTarget(host, 5, s.Host.Addr) != pad {
		t.Errorf("neighbour bytes % x: want a jump to the trampoline %#x, then one to the pad %#x", host, tramp, pad)
	}
	patch, err := s.PatchBytes(pad)
	if err != nil || patch[0] != 0xeb || addr+2+uint64(patch[1]) != s.Slot {
		t.Errorf("short jump % x (%v) does not go to the slot %#x", patch, err, s.Slot)
	}
	if !s.Overlaps(addr+3, 1) || !s.Overlaps(addr+11, 1) || s.Overlaps(addr+12, 1) {
		t.Errorf("Overlaps does not cover the neighbour exactly")
	}
}
