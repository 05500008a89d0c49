package fasttp

import (
	"slices"
	"testing"
)

const smapsSample = `aaaab0000000-aaaab0010000 r-xp 00000000 fe:01 1234   /usr/bin/true
Size:                 64 kB
VmFlags: rd ex mr mw me bt
aaaab0010000-aaaab0020000 rw-p 00010000 fe:01 1234   /usr/bin/true
Size:                 64 kB
VmFlags: rd wr mr mw me ac bt
ffff80000000-ffff80100000 r-xp 00000000 fe:01 99     /usr/lib/libc.so.6
Rss:                  12 kB
VmFlags: rd ex mr mw me
ffff90000000-ffff90001000 r-xp 00000000 00:00 0      [vdso]
VmFlags: rd ex mr mw me de
`

func TestParseGuarded(t *testing.T) {
	got := parseGuarded([]byte(smapsSample))
	want := []guardRange{
		{Range{0xaaaab0000000, 0xaaaab0010000}, true},
		{Range{0xffff80000000, 0xffff80100000}, false},
		{Range{0xffff90000000, 0xffff90001000}, false},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parseGuarded = %+v, want %+v", got, want)
	}
	tests := []struct {
		addr   uint64
		found  bool
		guards bool
	}{
		{0xaaaab0000000, true, true},
		{0xaaaab000fffc, true, true},
		{0xaaaab0010000, false, false}, // the writable data mapping is not code
		{0xffff80000040, true, false},
		{0x1000, false, false},
	}
	for _, tc := range tests {
		g, ok := guardAt(got, tc.addr)
		if ok != tc.found || g.bt != tc.guards {
			t.Errorf("guardAt(%#x) = %+v, %v; want found %v, bt %v", tc.addr, g, ok, tc.found, tc.guards)
		}
	}
}

func FuzzParseGuarded(f *testing.F) {
	f.Add([]byte(smapsSample))
	f.Add([]byte("1-0 r-xp 0 0 0\nVmFlags: bt\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, g := range parseGuarded(b) {
			if g.End <= g.Start {
				t.Fatalf("empty or reversed range %+v", g)
			}
		}
	})
}
