package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// denseEntries is how many functions TestFastTraceDenseEntries traces.
const denseEntries = 300

// TestFastTraceDenseEntries places a fast tracepoint at the entry of each
// of 300 functions 20 bytes apart, each starting with a 1-byte push (a
// jump there keeps the next instructions' bytes, which fix its
// displacement: the places the jumps lead to are as close as the
// functions), and starts them all at once: every one must get such a
// jump, and each frame must be collected once; in a PIE and in a non-PIE
// executable (whose low image left most of them traps before the jumps
// went through a jump at the forced address; in a PIE most were int3
// puns).
func TestFastTraceDenseEntries(t *testing.T) {
	requireTools(t)
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver's agent needs 5-byte instructions at fast tracepoints")
	}
	for _, c := range []struct{ name, flag string }{{"PIE", "-pie"}, {"non-PIE", "-no-pie"}} {
		t.Run(c.name, func(t *testing.T) { denseEntriesSession(t, c.flag) })
	}
}

// denseEntriesSession is TestFastTraceDenseEntries' session, the program
// built with gcc flag pieFlag.
func denseEntriesSession(t *testing.T, pieFlag string) {
	dir := t.TempDir()
	var src strings.Builder
	src.WriteString("#include <stdio.h>\nvolatile long sink;\n")
	for i := range denseEntries {
		fmt.Fprintf(&src, `__asm__(".text\n.globl fn%d\n.type fn%d,@function\nfn%d:\npush %%rbx\nmov %%rdi,%%rbx\npop %%rbx\nimulq $%d,%%rdi,%%rax\naddq %%rax,sink(%%rip)\nret\n.size fn%d,.-fn%d\n");`+"\nvoid fn%d(long);\n", i, i, i, i+1, i, i, i)
	}
	src.WriteString("void (*fns[])(long) = {")
	for i := range denseEntries {
		fmt.Fprintf(&src, "fn%d,", i)
	}
	src.WriteString("};\n__attribute__((noinline)) void ready(void) { __asm__ volatile(\"\"); }\n")
	src.WriteString("__attribute__((noinline)) void done(void) { __asm__ volatile(\"\"); }\n")
	fmt.Fprintf(&src, "int main(void) { ready(); for (int i = 0; i < %d; i++) fns[i](1); done(); printf(\"sink=%%ld\\n\", sink); return 0; }\n", denseEntries)
	cfile, prog := filepath.Join(dir, "dense.c"), filepath.Join(dir, "dense")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("gcc", "-O2", "-g", pieFlag, "-o", prog, cfile).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	var script strings.Builder
	for i := range denseEntries {
		fmt.Fprintf(&script, "ftrace *fn%d\n", i)
	}
	stub := startStub(t, []string{"--once", "--debug"}, prog)
	out := runGDB(t, gdbSession{program: prog, commands: []string{"target remote " + stub.target() + `
break ready
continue
` + script.String() + `break done
tstart
continue
tstop
tstatus
continue`}})
	log := stub.output.String()
	if n := strings.Count(log, "trap instead of a jump"); n > 0 {
		t.Errorf("%d of %d fast tracepoints became traps:\n%s", n, denseEntries, log)
	}
	if n := len(regexpAll(log, `tracepoint \d+ at 0x[0-9a-f]+: successor-preserving jump over 1 bytes .*reached through a jump at`)); n != denseEntries {
		t.Errorf("%d of %d tracepoints got a successor-preserving jump reached through a jump", n, denseEntries)
	}
	if got := framesCollected(t, out); got != denseEntries {
		t.Errorf("%d frames, want %d", got, denseEntries)
	}
	want := denseEntries * (denseEntries + 1) / 2
	if !strings.Contains(log, fmt.Sprintf("sink=%d", want)) {
		t.Errorf("the program's result is not sink=%d:\n%s", want, log)
	}
}
