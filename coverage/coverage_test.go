package coverage

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// build compiles testdata/cycles.c (a 3-byte instruction before a ret,
// and a function that is a lone ret) with the given flags.
func build(t *testing.T, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	out := filepath.Join(t.TempDir(), "cycles")
	args := append([]string{"-O2", "-o", out, "../testdata/cycles.c"}, flags...)
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return out
}

func symbol(t *testing.T, path, name string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("no symbol %s", name)
	return 0
}

func TestFile(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		base  uint64
	}{
		{"pie", []string{"-pie", "-fPIE"}, pieBase},
		{"nopie", []string{"-no-pie", "-fno-PIE"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			prog := build(t, c.flags...)
			r, err := File(prog)
			if err != nil {
				t.Fatal(err)
			}
			if r.Jump+len(r.Traps) != r.Instructions || r.Plain+r.Kept+r.Short+r.Neighbour+r.Evicted+r.Punned != r.Jump || r.EntryJump > r.Entries || r.Entries < 3 {
				t.Fatalf("inconsistent report %+v", r)
			}
			trapAt := map[uint64]string{}
			for _, tr := range r.Traps {
				var a uint64
				for _, ch := range strings.TrimPrefix(tr.Addr, "0x") {
					a = a*16 + uint64(strings.IndexRune("0123456789abcdef", ch))
				}
				trapAt[a] = tr.Reason
			}
			// site3 (a 3-byte addq, then a movq) takes a jump; leaf (a lone
			// ret, then the next function) takes one only as a
			// successor-preserving pun, whose pad address is fixed by the
			// next function's bytes: in a PIE there is room there.
			if why, ok := trapAt[c.base+symbol(t, prog, "site3")]; ok {
				t.Errorf("site3 is a trap: %s", why)
			}
			if why, ok := trapAt[c.base+symbol(t, prog, "leaf")]; ok && (c.base != 0 || !strings.Contains(why, "no pad address")) {
				t.Errorf("leaf (a lone ret) is a trap: %q", why)
			}
			if r.Kept == 0 || r.BranchTargetOverwritten != 0 {
				t.Errorf("%d successor-preserving jumps, %d overwritten branch targets", r.Kept, r.BranchTargetOverwritten)
			}
		})
	}
	if _, err := File("/nonexistent"); err == nil {
		t.Error("no error for a missing file")
	}
}
