package fasttp

import (
	"errors"
	"testing"
)

func TestPushLen(t *testing.T) {
	cases := []struct {
		code []byte
		want int
	}{
		{[]byte{0x53}, 1},             // push %rbx
		{[]byte{0x55, 0x48}, 1},       // push %rbp
		{[]byte{0x57}, 1},             // push %rdi
		{[]byte{0x41, 0x54}, 2},       // push %r12
		{[]byte{0x41, 0x57}, 2},       // push %r15
		{[]byte{0x58}, 0},             // pop %rax
		{[]byte{0x48, 0x53}, 0},       // REX.W push: not emitted by compilers, refused
		{[]byte{0x41}, 0},             // truncated
		{[]byte{0x41, 0x5c}, 0},       // pop %r12
		{[]byte{0xff, 0x35, 0, 0}, 0}, // push mem
		{nil, 0},
	}
	for _, c := range cases {
		if got := pushLen(c.code); got != c.want {
			t.Errorf("pushLen(% x) = %d, want %d", c.code, got, c.want)
		}
	}
}

func TestLeadSites(t *testing.T) {
	const addr = 0x471263
	// python3.11's _PyObject_DebugTypeStats: push %rbx; mov %rdi,%rbx;
	// call; mov %rbx,%rdi; call.
	code := []byte{0x53, 0x48, 0x89, 0xfb, 0xe8, 0x2f, 0x01, 0x00, 0x00, 0x48, 0x89, 0xdf, 0xe8, 0x66, 0x04, 0x00, 0x00, 0x90, 0x90, 0x90}
	cands, err := LeadSites(nil, code, addr, nil)
	if err != nil || len(cands) == 0 {
		t.Fatalf("LeadSites: %d sites, %v", len(cands), err)
	}
	for _, c := range cands {
		if c.Lead != 1 || c.Addr != addr+1 || c.Start() != addr || c.Span() != 1+c.Footprint() || c.Insns[0].Addr != addr+1 {
			t.Errorf("site %+v: want the jump at %#x after a 1-byte push", c, addr+1)
		}
		if !c.Overlaps(addr, 1) || c.Overlaps(addr-1, 1) || !c.Overlaps(addr+1, 1) {
			t.Errorf("site at %#x: Overlaps must cover the push and the jump, not the byte before", c.Addr)
		}
		if r := c.Ranges()[0]; r.Start != addr {
			t.Errorf("site at %#x: first range %+v, want it from the push", c.Addr, r)
		}
	}
	r12 := append([]byte{0x41, 0x54}, code[1:]...) // push %r12
	if cands, err := LeadSites(nil, r12, addr, nil); err != nil || cands[0].Lead != 2 || cands[0].Addr != addr+2 {
		t.Errorf("push %%r12: %v", err)
	}
	if _, err := LeadSites(nil, code[1:], addr, nil); !errors.Is(err, ErrSiteRefused) {
		t.Errorf("a mov first: %v, want refused", err)
	}
}

func TestDecodeFactsTargets(t *testing.T) {
	// push %rbx; mov %rdi,%rbx; jmp back to the mov (rel8 -5); ret.
	fn := Function{Addr: 0x1000, Size: 7, Code: []byte{0x53, 0x48, 0x89, 0xfb, 0xeb, 0xfb, 0xc3}}
	f := decodeFacts(fn)
	if f.entry != 0x1000 || !f.starts[0x1001] || f.starts[0x1002] || !f.targets[0x1001] || f.targets[0x1000] {
		t.Errorf("facts %+v: want starts at 0x1001, a target at 0x1001 only", f)
	}
}
