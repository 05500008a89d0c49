package e2e

import (
	"debug/elf"
	"fmt"
	"strings"
	"testing"
)

// TestConditionalBreakpointsStepOver: breakpoints whose conditions the
// stub evaluates and finds false are stepped over by the stub itself,
// out of line (package trapfallback's displaced steps: an emulated push
// at hit's entry, a copied `lock addl` whose rip-relative operand is
// re-encoded), while four threads run through them 200 times each, in
// all-stop and in non-stop mode. The program's count must be exact.
func TestConditionalBreakpointsStepOver(t *testing.T) {
	const threads, hits = 4, 200
	prog := buildProgram(t, "threads")
	ripRel := ripRelativeIn(t, prog, "hit")
	for _, nonStop := range []bool{false, true} {
		t.Run(fmt.Sprintf("non-stop=%v", nonStop), func(t *testing.T) {
			stub := startStub(t, []string{"--once"}, prog, fmt.Sprint(threads), fmt.Sprint(hits))
			var cmds []string
			cont := "continue"
			if nonStop {
				cmds = append(cmds, "set non-stop on")
				cont = "continue -a"
			}
			cmds = append(cmds,
				"target remote "+stub.target(),
				"break *hit if total_hits < 0",
				fmt.Sprintf("break *hit+%d if total_hits < 0", ripRel),
				"break threads_done",
				cont,
				"info breakpoints",
				"kill")
			out := runGDB(t, gdbSession{program: prog, commands: []string{strings.Join(cmds, "\n")}})
			mustMatch(t, out, `Breakpoint 3, (0x[0-9a-f]+ in )?threads_done`)
			mustContain(t, stub.output.String(), fmt.Sprintf("total hits %d", threads*hits))
		})
	}
}

// ripRelativeIn returns the offset in function fn of prog of its first
// instruction with a pc-relative operand other than a branch target.
func ripRelativeIn(t *testing.T, prog, fn string) int {
	t.Helper()
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != fn {
			continue
		}
		text := f.Section(".text")
		code, err := text.Data()
		if err != nil {
			t.Fatal(err)
		}
		body := code[s.Value-text.Addr : s.Value-text.Addr+s.Size]
		if off, ok := firstPCRelative(body, s.Value); ok {
			return off
		}
	}
	t.Fatalf("no pc-relative instruction (but a branch) in %s", fn)
	return 0
}
