package fasttp

import (
	"bytes"
	"debug/elf"
	"errors"
	"maps"
	"slices"
	"testing"
)

func TestPlanSite(t *testing.T) {
	const addr = 0x401130
	nops := []byte{0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90}
	tests := []struct {
		name    string
		code    []byte
		covered int
		lens    []int
		puns    []int
	}{
		{"first instruction >= 5 bytes", []byte{0x48, 0x8b, 0x05, 0x10, 0, 0, 0}, 7, []int{7}, nil},
		{"call rel32 exactly 5", []byte{0xe8, 1, 2, 3, 4}, 5, []int{5}, nil},
		{"1+4: push rbp; sub rsp,0x20", []byte{0x55, 0x48, 0x83, 0xec, 0x20}, 5, []int{1, 4}, []int{1}},
		{"2+1+2: xor eax,eax; push rbx; mov ebx,edi", []byte{0x31, 0xc0, 0x53, 0x89, 0xfb}, 5, []int{2, 1, 2}, []int{2, 3}},
		{"3+3: mov rbp,rsp; mov rbx,rdi", []byte{0x48, 0x89, 0xe5, 0x48, 0x89, 0xfb}, 6, []int{3, 3}, []int{3}},
		{"1+1+1+1+1 pushes", []byte{0x55, 0x53, 0x50, 0x51, 0x52}, 5, []int{1, 1, 1, 1, 1}, []int{1, 2, 3, 4}},
		{"endbr64; push rbp", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55}, 5, []int{4, 1}, []int{4}},
		{"4+7: last instruction sticks out", []byte{0x48, 0x83, 0xec, 0x20, 0x48, 0x8b, 0x05, 0, 0, 0, 0}, 11, []int{4, 7}, []int{4}},
		{"je backwards to Addr is fine", []byte{0x74, 0xfe, 0x90, 0x90, 0x90}, 5, []int{2, 1, 1, 1}, []int{2, 3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := PlanSite(append(append([]byte(nil), tt.code...), nops...), addr)
			if err != nil {
				t.Fatalf("PlanSite: %v", err)
			}
			var lens []int
			for _, in := range s.Insns {
				lens = append(lens, in.Len)
			}
			if s.Addr != addr || s.Covered != tt.covered || !slices.Equal(lens, tt.lens) || !slices.Equal(s.Puns, tt.puns) {
				t.Fatalf("got covered %d lens %v puns %v; want %d %v %v", s.Covered, lens, s.Puns, tt.covered, tt.lens, tt.puns)
			}
			if len(s.Forced) != len(tt.puns) {
				t.Errorf("forced %v for puns %v", s.Forced, tt.puns)
			}
			for _, p := range tt.puns {
				if s.Forced[p-1] != Int3 {
					t.Errorf("forced %v: rel32 byte %d should be int3", s.Forced, p-1)
				}
			}
			if s.Resume() != addr+uint64(tt.covered) {
				t.Errorf("Resume %#x", s.Resume())
			}
		})
	}
}

func TestPlanSiteRefuses(t *testing.T) {
	tests := []struct {
		name string
		code []byte
	}{
		{"int3 covered", []byte{0x55, 0xcc, 0x90, 0x90, 0x90, 0x90}},
		{"ret then other bytes", []byte{0xc3, 0x90, 0x90, 0x90, 0x90, 0x90}},
		{"jmp rel8 then other bytes", []byte{0xeb, 0x10, 0x90, 0x90, 0x90, 0x90}},
		{"jcc into the covered bytes", []byte{0x74, 0x01, 0x90, 0x90, 0x90, 0x90}},
		{"xbegin", []byte{0xc7, 0xf8, 0, 0, 0, 0}},
		{"3DNow!", []byte{0x0f, 0x0f, 0xc0, 0x0c, 0x90, 0x90}},
		{"truncated", []byte{0x55, 0x48, 0x83}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := PlanSite(tt.code, 0x401000)
			if !errors.Is(err, ErrSiteRefused) {
				t.Fatalf("PlanSite = %+v, %v; want ErrSiteRefused", s, err)
			}
		})
	}
}

func FuzzPlanSite(f *testing.F) {
	for _, seed := range [][]byte{
		{0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20},
		{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5},
		{0x31, 0xc0, 0x53, 0x89, 0xfb, 0xc3},
		{0x74, 0x01, 0x90, 0x90, 0x90, 0x90},
		{0xe8, 1, 2, 3, 4, 0xc3},
		{0xff, 0x15, 0, 0, 0, 0},
	} {
		f.Add(seed, uint64(0x401000))
	}
	f.Fuzz(func(t *testing.T, code []byte, addr uint64) {
		s, err := PlanSite(code, addr)
		if err != nil {
			return
		}
		if s.Covered < JumpLen || s.Covered > JumpLen-1+MaxInsnLen {
			t.Fatalf("covered %d", s.Covered)
		}
		at := 0
		var heads []int
		for i, in := range s.Insns {
			if in.Addr != addr+uint64(at) {
				t.Fatalf("instruction %d at %#x, want %#x", i, in.Addr, addr+uint64(at))
			}
			if i > 0 {
				heads = append(heads, at)
			}
			at += in.Len
		}
		// The jump may end in padding after a ret or jmp (Dead bytes).
		if at+s.Dead != s.Covered || !slices.Equal(heads, s.Puns) || len(s.Forced) != len(s.Puns) {
			t.Fatalf("covered %d (sum %d, %d dead), puns %v (heads %v), forced %v", s.Covered, at, s.Dead, s.Puns, heads, s.Forced)
		}
		if s.Dead > 0 {
			if last := s.Insns[len(s.Insns)-1]; !last.NoFallThrough() {
				t.Fatalf("%d dead bytes after a %v, which falls through", s.Dead, last.Kind)
			}
		}
		for _, p := range s.Puns {
			if p < 1 || p > 4 || s.Forced[p-1] != Int3 {
				t.Fatalf("pun %d, forced %v", p, s.Forced)
			}
		}
		if _, _, err := RelocateRun(s.Insns, addr, s.Resume()); err != nil && !errors.Is(err, ErrOutOfReach) {
			t.Fatalf("planned instructions do not relocate: %v", err)
		}
	})
}

func TestSitePatchBytes(t *testing.T) {
	const addr = 0x401000
	tests := []struct {
		name    string
		site    Site
		pad     uint64
		want    []byte
		wantErr bool
	}{
		{"plain", Site{Addr: addr, Covered: 5}, addr + 5 + 0x1000, []byte{0xe9, 0x00, 0x10, 0, 0}, false},
		{"filler", Site{Addr: addr, Covered: 7}, addr + 5 - 0x10, []byte{0xe9, 0xf0, 0xff, 0xff, 0xff, 0xcc, 0xcc}, false},
		{"pun satisfied", Site{Addr: addr, Covered: 5, Puns: []int{2}, Forced: forced(1)}, addr + 5 + 0xcc00, []byte{0xe9, 0x00, 0xcc, 0, 0}, false},
		{"pun violated", Site{Addr: addr, Covered: 5, Puns: []int{2}, Forced: forced(1)}, addr + 5 + 0xcd00, nil, true},
		{"out of reach", Site{Addr: addr, Covered: 5}, addr + 3<<30, nil, true},
		{"too short", Site{Addr: addr, Covered: 4}, addr + 0x100, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.site.PatchBytes(tt.pad)
			if (err != nil) != tt.wantErr {
				t.Fatalf("PatchBytes: % x, %v; wantErr %v", got, err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got % x, want % x", got, tt.want)
			}
		})
	}
}

// Alignment padding after a ret or jmp may take the rest of the jump;
// anything else after them refuses the site.
func TestPlanSiteDeadPadding(t *testing.T) {
	nopl := []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}
	code := func(parts ...[]byte) []byte { return slices.Concat(append(parts, []byte{0x55, 0x48, 0x89, 0xe5})...) }
	tests := []struct {
		name       string
		addr       uint64
		code       []byte
		lens, puns []int
		dead       int // -1: refused
	}{
		{"ret, nopl to the boundary", 0x40100a, code([]byte{0xc3}, nopl), []int{1}, nil, 4},
		{"pop; ret; xchg ax,ax; nop", 0x40100b, code([]byte{0x5b, 0xc3, 0x66, 0x90, 0x90}), []int{1, 1}, []int{1}, 3},
		{"jmp rel8; int3 x3", 0x40100b, code([]byte{0xeb, 0x10, 0xcc, 0xcc, 0xcc}), []int{2}, nil, 3},
		{"jmp *rax; cs nopw", 0x401004, code([]byte{0xff, 0xe0, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}), []int{2}, nil, 3},
		{"pop; ret; nopl to an 8-byte boundary", 0x401002, code([]byte{0x5b, 0xc3, 0x0f, 0x1f, 0x40, 0x00}), []int{1, 1}, []int{1}, 3},
		{"ret; a nopl crossing the 16-byte boundary", 0x40100b, code([]byte{0x31, 0xc0, 0xc3}, nopl), nil, nil, -1},
		{"ret, nops, then code before the boundary", 0x40100b, code([]byte{0xc3, 0x90, 0x90, 0x53, 0x90}), nil, nil, -1},
		{"ret at the boundary's edge", 0x40100f, code([]byte{0xc3}), nil, nil, -1},
		{"ret, padding too short", 0x40100d, code([]byte{0xc3, 0x90, 0x90}), nil, nil, -1},
		{"ret, pause", 0x40100b, code([]byte{0xc3, 0xf3, 0x90, 0x90, 0x90}), nil, nil, -1},
		{"ret, xchg eax,r8d", 0x40100b, code([]byte{0xc3, 0x41, 0x90, 0x90, 0x90}), nil, nil, -1},
		{"ret, nopw 0f 1f /1 (not a nop)", 0x40100b, code([]byte{0xc3, 0x0f, 0x1f, 0x48, 0x00, 0x90}), nil, nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := PlanSite(tt.code, tt.addr)
			if tt.dead < 0 {
				if !errors.Is(err, ErrSiteRefused) {
					t.Fatalf("PlanSite = %+v, %v; want ErrSiteRefused", s, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("PlanSite: %v", err)
			}
			var lens []int
			for _, in := range s.Insns {
				lens = append(lens, in.Len)
			}
			if s.Covered != JumpLen || s.Dead != tt.dead || !slices.Equal(lens, tt.lens) || !slices.Equal(s.Puns, tt.puns) {
				t.Fatalf("covered %d dead %d lens %v puns %v; want %d %d %v %v", s.Covered, s.Dead, lens, s.Puns, JumpLen, tt.dead, tt.lens, tt.puns)
			}
			if _, err := s.PatchBytes(s.Addr + 0x1000); len(s.Puns) == 0 && err != nil {
				t.Errorf("PatchBytes: %v", err)
			}
		})
	}
}

// A punned site whose forced byte is rel32's top one has no pad address
// near a low (non-PIE) image; a prefix moves the pun to a lower byte.
func TestPaddedSites(t *testing.T) {
	const addr = 0x401000
	// sub rsp,0x20 (4 bytes); mov rbp,rsp (3); nops.
	code := []byte{0x48, 0x83, 0xec, 0x20, 0x48, 0x89, 0xe5, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90}
	site, err := PlanSite(code, addr)
	if err != nil {
		t.Fatal(err)
	}
	if site.Forced[3] != Int3 || site.Prefix != 0 {
		t.Fatalf("plain pun: forced %v prefix %d, want rel32 byte 3 forced", site.Forced, site.Prefix)
	}
	low := []Range{{0x10000, 0x400000}, {0x1000000, 0x7ffffffff000}} // image at 0x400000-0x1000000
	if p, err := FindPadAddr(site, low, 1024); err == nil {
		t.Fatalf("pad at %#x for a top byte of 0xcc next to a low image", p)
	}
	alts := PaddedSites(code, site)
	if len(alts) != 3 {
		t.Fatalf("%d padded variants, want 3 (1 to 3 prefixes: the first instruction has 4 bytes)", len(alts))
	}
	wantForced := []map[int]byte{{2: Int3}, {1: Int3}, {0: Int3, 3: Int3}} // 3 prefixes: covered grows to the nop at +7
	for i, alt := range alts {
		if alt.Prefix != i+1 || !maps.Equal(alt.Forced, wantForced[i]) || !slices.Equal(alt.Puns, []int{4, 7}[:len(wantForced[i])]) {
			t.Errorf("variant %d: prefix %d forced %v puns %v", i, alt.Prefix, alt.Forced, alt.Puns)
		}
	}
	alt := alts[0]
	pad, err := FindPadAddr(alt, low, 1024)
	if err != nil {
		t.Fatalf("one prefix: %v", err)
	}
	patch, err := alt.PatchBytes(pad)
	if err != nil {
		t.Fatal(err)
	}
	if len(patch) != alt.Covered || patch[0] != PadPrefix || patch[1] != 0xe9 || patch[4] != Int3 {
		t.Fatalf("patch % x", patch)
	}
	// The CPU's view: a 6-byte jump to the pad.
	in, err := DecodeInsn(patch, addr)
	if err != nil || in.Len != 6 || in.Kind != KindJmpRel32 || in.Target != pad {
		t.Fatalf("patch decodes as %+v, %v; want a 6-byte jmp to %#x", in, err, pad)
	}
}

// No variant puts a covered instruction's head on a prefix or the
// opcode, and a plain site has none.
func TestPaddedSitesLimits(t *testing.T) {
	// push rbx (1); sub rsp,0x20 (4): the head at +1 allows no prefix.
	code := []byte{0x53, 0x48, 0x83, 0xec, 0x20, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90}
	site, err := PlanSite(code, 0x401000)
	if err != nil {
		t.Fatal(err)
	}
	if alts := PaddedSites(code, site); len(alts) != 0 {
		t.Errorf("%d variants with a 1-byte first instruction", len(alts))
	}
	plain := []byte{0x48, 0x8b, 0x05, 0x10, 0, 0, 0, 0x90, 0x90, 0x90, 0x90}
	site, err = PlanSite(plain, 0x401000)
	if err != nil {
		t.Fatal(err)
	}
	if alts := PaddedSites(plain, site); len(alts) != 0 {
		t.Errorf("%d variants of a plain site", len(alts))
	}
}

// A successor-preserving pun replaces only the first instruction: the
// displacement's last bytes are the next instructions' own, so the patch
// leaves them as they are and the pad address follows from them.
func TestKeepSite(t *testing.T) {
	const addr = 0x7ffff7c40000
	free := []Range{{0x7fff00000000, 0x7ffff7c00000}, {0x7ffff7d00000, 0x7ffffff00000}}
	tests := []struct {
		name   string
		code   []byte
		keep   int
		refuse bool
	}{
		{"push rbp; mov rbp,rsp; inc eax", []byte{0x55, 0x48, 0x89, 0xe5, 0xff, 0xc0, 0x90, 0x90}, 4, false},
		{"ret, then a function", []byte{0xc3, 0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x90, 0x90}, 4, false},
		{"3-byte add, then movq", []byte{0x48, 0x01, 0xf0, 0x48, 0x89, 0xc2, 0x90, 0x90}, 2, false},
		{"first instruction is 5 bytes", []byte{0xe8, 1, 2, 3, 4, 0x90, 0x90, 0x90}, 0, true},
		{"jcc into the jump", []byte{0x74, 0x01, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90}, 0, true},
		{"int3 first", []byte{0xcc, 0x90, 0x90, 0x90, 0x90, 0x90}, 0, true},
		{"too short", []byte{0x55, 0x48}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := KeepSite(tt.code, addr)
			if tt.refuse {
				if !errors.Is(err, ErrSiteRefused) {
					t.Fatalf("KeepSite = %+v, %v; want ErrSiteRefused", s, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Keep != tt.keep || s.Covered != JumpLen-tt.keep || len(s.Insns) != 1 || len(s.Puns) != 0 || s.Footprint() != JumpLen {
				t.Fatalf("keep %d covered %d insns %d puns %v footprint %d", s.Keep, s.Covered, len(s.Insns), s.Puns, s.Footprint())
			}
			pad, err := FindPadAddr(s, free, 1024)
			if err != nil {
				t.Fatalf("no pad address: %v", err)
			}
			patch, err := s.PatchBytes(pad)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(patch[s.Covered:], tt.code[s.Covered:JumpLen]) {
				t.Errorf("patch % x changes the kept bytes % x", patch, tt.code[s.Covered:JumpLen])
			}
			in, err := DecodeInsn(patch, addr)
			if err != nil || in.Kind != KindJmpRel32 || in.Target != pad {
				t.Errorf("patch decodes as %+v, %v; want a jmp to %#x", in, err, pad)
			}
			if s.Resume() != addr+uint64(s.Covered) {
				t.Errorf("resume at %#x", s.Resume())
			}
		})
	}
}

// PaddedKeepSites moves a kept pun's forced bytes down the displacement
// with prefixes: from an executable mapped low, "xor eax,eax; mov
// rdx,rdi" keeps 48 89 fa, whose top byte 0xfa puns a pad 1.4 GB below
// address 0; one prefix keeps 48 89 fa 48 instead, a pad 1.2 GB above.
func TestPaddedKeepSites(t *testing.T) {
	const low = 0x401000
	lowFree := []Range{{0x10000, 0x400000}, {0x1000000, 0x7fff00000000}}
	tests := []struct {
		name     string
		code     []byte
		variants int
		pad      uint64 // the one pad address of the last variant (all four bytes kept), 0: not checked
	}{
		{"xor; mov; mov", []byte{0x31, 0xc0, 0x48, 0x89, 0xfa, 0x48, 0x01, 0xd0, 0xc3}, 1, low + 6 + 0x48fa8948},
		{"4-byte first instruction", []byte{0x48, 0x8b, 0x47, 0x10, 0x48, 0x89, 0xfa, 0x48, 0x01, 0xd0}, 3, 0},
		{"1-byte first instruction", []byte{0x53, 0x48, 0x89, 0xfb, 0xe8, 0, 0, 0, 0}, 0, 0},
		{"too little code for a prefix", []byte{0x31, 0xc0, 0x48, 0x89, 0xfa}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := KeepSite(tt.code, low)
			if err != nil {
				t.Fatal(err)
			}
			v := PaddedKeepSites(tt.code, k)
			if len(v) != tt.variants {
				t.Fatalf("%d variants, want %d", len(v), tt.variants)
			}
			for i, s := range v {
				if s.Prefix != i+1 || s.Covered != k.Covered || s.Keep != k.Keep+i+1 || s.Shape() != ShapeKept || s.Resume() != low+uint64(k.Covered) {
					t.Fatalf("variant %d: prefix %d covered %d keep %d shape %s resume %#x", i, s.Prefix, s.Covered, s.Keep, s.Shape(), s.Resume())
				}
			}
			if tt.pad == 0 {
				return
			}
			if _, err := FindPadAddr(k, lowFree, 1024); err == nil {
				t.Fatal("the unpadded pun found a pad address from a low image")
			}
			s := v[len(v)-1]
			pad, err := FindPadAddr(s, lowFree, 1024)
			if err != nil || pad != tt.pad {
				t.Fatalf("pad %#x, %v; want %#x", pad, err, tt.pad)
			}
			patch, err := s.PatchBytes(pad)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(patch[s.Covered:], tt.code[s.Covered:s.Footprint()]) || patch[0] != PadPrefix {
				t.Errorf("patch % x: not a prefix, the jump and the kept bytes % x", patch, tt.code[s.Covered:s.Footprint()])
			}
			in, err := DecodeInsn(patch, low)
			if err != nil || in.Kind != KindJmpRel32 || in.Target != pad || in.Len != s.Footprint() {
				t.Errorf("patch decodes as %+v, %v; want a %d-byte jmp to %#x", in, err, s.Footprint(), pad)
			}
		})
	}
}

// SiteCandidates orders the shapes: a plain jump alone; else the
// successor-preserving pun and its padded variants, the eviction (here the next instruction
// keeps the nops after it), the int3 pun, then its padded variants.
func TestSiteCandidates(t *testing.T) {
	plain := []byte{0x48, 0x8b, 0x05, 0x10, 0, 0, 0, 0x90, 0x90, 0x90, 0x90}
	c, err := SiteCandidates(nil, plain, 0x401000, nil)
	if err != nil || len(c) != 1 || c[0].Keep != 0 || len(c[0].Puns) != 0 {
		t.Fatalf("plain: %+v, %v", c, err)
	}
	short := []byte{0x48, 0x83, 0xec, 0x20, 0x48, 0x89, 0xe5, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90}
	c, err = SiteCandidates(nil, short, 0x401000, nil)
	if err != nil || len(c) != 9 || c[0].Keep != 1 || c[1].Keep != 2 || c[1].Prefix != 1 || c[3].Prefix != 3 ||
		c[4].Evicted == nil || c[4].Evicted.Keep == 0 ||
		len(c[5].Puns) != 1 || c[5].Prefix != 0 || c[6].Prefix != 1 || c[8].Prefix != 3 {
		t.Fatalf("short first instruction: %d candidates, %v", len(c), err)
	}
	ret := []byte{0xc3, 0x55, 0x48, 0x89, 0xe5, 0x90}
	c, err = SiteCandidates(nil, ret, 0x401003, nil) // code after the ret, no padding
	if err != nil || len(c) != 1 || c[0].Keep != 4 {
		t.Fatalf("ret then code: %+v, %v", c, err)
	}
	if _, err := SiteCandidates(nil, []byte{0xcc, 0x90, 0x90, 0x90, 0x90, 0x90}, 0x401000, nil); !errors.Is(err, ErrSiteRefused) {
		t.Fatalf("int3: %v", err)
	}
}

// TestKeptCandidatesOneDecode checks, at every byte of the C library's
// text, that KeptCandidates (which decodes the first instruction once
// and tries PlanSite only where it can pun nothing) gives what PlanSite
// then keptSites give: the plain jump alone when it puns nothing, else
// the successor-preserving jump and its padded variants, or a refusal.
func TestKeptCandidatesOneDecode(t *testing.T) {
	text := libcText(t)
	const base = 0x7f0000000000
	kept := 0
	for off := 0; off+ShortCodeLen <= len(text) && off < 400000; off++ {
		code := text[off : off+ShortCodeLen]
		addr := uint64(base + off)
		got, gerr := KeptCandidates(code, addr)
		var want []Site
		var werr error
		if site, err := PlanSite(code, addr); err == nil && len(site.Puns) == 0 {
			want = []Site{site}
		} else {
			want, werr = keptSites(code, addr)
		}
		if (gerr != nil) != (werr != nil) || len(got) != len(want) {
			t.Fatalf("%#x (% x): %d shapes (%v), want %d (%v)", addr, code[:8], len(got), gerr, len(want), werr)
		}
		for i := range got {
			if !sameSite(got[i], want[i]) {
				t.Fatalf("%#x (% x): shape %d differs:\n%+v\n%+v", addr, code[:8], i, got[i], want[i])
			}
		}
		if len(got) > 0 && got[0].Keep > 0 {
			kept++
		}
	}
	if kept < 1000 {
		t.Fatalf("only %d addresses had successor-preserving shapes", kept)
	}
}

// sameSite compares the planning fields of two sites.
func sameSite(a, b Site) bool {
	if a.Addr != b.Addr || a.Covered != b.Covered || a.Keep != b.Keep || a.Prefix != b.Prefix || a.Dead != b.Dead ||
		len(a.Insns) != len(b.Insns) || !slices.Equal(a.Puns, b.Puns) || !maps.Equal(a.Forced, b.Forced) {
		return false
	}
	for i := range a.Insns {
		if !bytes.Equal(a.Insns[i].Bytes, b.Insns[i].Bytes) {
			return false
		}
	}
	return true
}

// libcText returns the C library's .text section (skips without one).
func libcText(t *testing.T) []byte {
	t.Helper()
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		defer f.Close()
		if s := f.Section(".text"); s != nil {
			if data, err := s.Data(); err == nil {
				return data
			}
		}
	}
	t.Skip("no x86-64 libc.so.6 to read")
	return nil
}
