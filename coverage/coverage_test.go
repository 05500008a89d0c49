package coverage

import (
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// build compiles testdata/cycles.c (a 3-byte instruction before a ret,
// and a function that is a lone ret) with the given flags.
func build(t *testing.T, flags ...string) string {
	t.Helper()
	return buildSource(t, "cycles", flags...)
}

// buildSource compiles testdata/NAME.c with -O2 and the given flags.
func buildSource(t *testing.T, name string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-O2", "-o", out, "../testdata/" + name + ".c"}, flags...)
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return out
}

// symbol returns the address of the function name in the ELF file at
// path (for a Go function, its ABIInternal or ABI0 symbol).
func symbol(t *testing.T, path, name string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == name || s.Name == name+".abi0" {
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
			if r.Jump+len(r.Traps) != r.Instructions || r.Plain+r.Kept+r.Short+r.Neighbour+r.Evicted+r.Punned+r.AfterPush != r.Jump || r.EntryJump > r.Entries || r.Entries < 3 {
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

// TestAfterPush: afterpush.c's after_push, non-PIE, gets no jump at its
// entry but one after its push, counted apart from the other shapes.
func TestAfterPush(t *testing.T) {
	prog := buildSource(t, "afterpush", "-no-pie", "-fno-PIE")
	r, err := File(prog)
	if err != nil {
		t.Fatal(err)
	}
	entry := symbol(t, prog, "after_push")
	for _, tr := range r.Traps {
		if tr.Addr == fmt.Sprintf("%#x", entry) {
			t.Errorf("after_push's entry is a trap: %s", tr.Reason)
		}
	}
	if r.AfterPush == 0 || r.EntryJump != r.Entries || r.BranchTargetOverwritten != 0 {
		t.Errorf("%d jumps after a push, %d of %d entries, %d overwritten branch targets", r.AfterPush, r.EntryJump, r.Entries, r.BranchTargetOverwritten)
	}
}
