package e2e

import (
	"runtime"
	"testing"
)

// No tracepoint goes inside an arm64 atomic sequence (from a
// load-exclusive to its store-exclusive): a trap or a jump there would
// make the store-exclusive fail for ever. tstart fails and says why, the
// program runs on unchanged; a tracepoint just after the loop works.
func TestTracepointInAtomicSequenceRefused(t *testing.T) {
	if runtime.GOARCH != "arm64" {
		t.Skip("atomic sequences of load/store-exclusive instructions are arm64's")
	}
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's refusal")
	}
	prog := buildProgram(t, "atomic")
	// The add after the ldaxr, then the instruction after the loop.
	const find = `python
insns = gdb.selected_frame().architecture().disassemble(int(gdb.parse_and_eval("(long)&bump")), count=40)
i = next(k for k, x in enumerate(insns) if x["asm"].startswith("ldaxr"))
gdb.set_convenience_variable("inside", insns[i + 1]["addr"])
gdb.set_convenience_variable("after", insns[i + 4]["addr"])
end`
	for _, c := range []struct {
		kind, where string
		refused     bool
	}{
		{"trace", "$inside", true}, {"ftrace", "$inside", true}, {"ftrace", "$after", false},
	} {
		t.Run(c.kind+" "+c.where, func(t *testing.T) {
			out, _ := traceSession(t, prog, []string{"200"}, find+"\n"+c.kind+" *"+c.where, "done", "print counter")
			if c.refused {
				mustContain(t, out, "inside an atomic sequence")
				return
			}
			mustContain(t, out, "$1 = 200")
			if n := framesCollected(t, out); n != 200 {
				t.Errorf("%d frames, want 200 (one per call)", n)
			}
		})
	}
}
