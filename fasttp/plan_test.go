package fasttp

import (
	"errors"
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
		if at != s.Covered || !slices.Equal(heads, s.Puns) || len(s.Forced) != len(s.Puns) {
			t.Fatalf("covered %d (sum %d), puns %v (heads %v), forced %v", s.Covered, at, s.Puns, heads, s.Forced)
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
