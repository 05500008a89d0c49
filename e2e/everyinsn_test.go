package e2e

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// insnsPython defines insns(name) in gdb's Python: the addresses of the
// instructions of the function named.
const insnsPython = `python
import re
def insns(name):
    addr = int(gdb.parse_and_eval("(long)&" + name))
    b = gdb.current_progspace().block_for_pc(addr)
    while b.function is None:
        b = b.superblock
    arch = gdb.selected_frame().architecture()
    return [i["addr"] for i in arch.disassemble(b.start, b.end - 1)]
end`

// everyInsnScript is gdb Python run in one session on testdata/everyinsn.c
// stopped at round_done: for every instruction of the functions named, it
// puts one tracepoint of the kind given (trace or ftrace) there, runs one
// round of the program (tstart, continue to round_done, tstop) and prints
// "RESULT kind address frames sum placement".
const everyInsnScript = `python
def one(kind, addr):
    gdb.execute("%s *%d" % (kind, addr), to_string=True)
    gdb.execute("tstart", to_string=True)
    placed = gdb.execute("monitor ftrace", to_string=True).strip().splitlines()[0]
    gdb.execute("continue", to_string=True)
    s = int(gdb.parse_and_eval("sum"))
    gdb.execute("tstop", to_string=True)
    st = gdb.execute("tstatus", to_string=True)
    m = re.search(r"Collected (\d+) trace frames", st)
    gdb.execute("delete tracepoints", to_string=True)
    print("RESULT %s %#x %s %d %s" % (kind, addr, m.group(1) if m else "?", s, placed))

for fn in FUNCTIONS:
    for a in insns(fn):
        for kind in ("trace", "ftrace"):
            one(kind, a)
end`

// everyInsnCase is one run of TestFastTraceEveryInstruction: the build
// flags, the stub's --ftrace-shapes and the kinds of jumps that must
// occur (everyInstruction).
type everyInsnCase struct {
	name   string
	flags  []string
	shapes string
	want   []string
}

// A tracepoint at every instruction of several functions (a jump table,
// loops, calls, a leaf, ret sites), one at a time: with a fast tracepoint
// the program computes what it computes untraced, and each one counts as
// many hits as a trap tracepoint at the same address (issue 9, item 5).
// The non-PIE build sits at low addresses, where most int3-punned jumps
// need prefixes (fasttp.PaddedSites) to find a pad; --ftrace-shapes
// makes one run use them.
func TestFastTraceEveryInstruction(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's monitor command")
	}
	for _, c := range everyInsnCases { // isa_*_test.go
		t.Run(c.name, func(t *testing.T) {
			prog := buildC(t, t.TempDir()+"/everyinsn", []string{"everyinsn.c"}, c.flags...)
			everyInstruction(t, prog, "--ftrace-shapes="+c.shapes, c.want)
		})
	}
}

// everyInsnSession runs script (gdb Python using insns, with FUNCTIONS
// replaced by three functions of testdata/everyinsn.c) in a session on
// prog stopped at round_done; it returns gdb's output and the round's
// sum untraced ("" when missing: the test has failed).
func everyInsnSession(t *testing.T, prog, flag, script string) (out, sum string) {
	stub := startStub(t, []string{"--once", flag}, prog, "100000")
	out = runGDB(t, gdbSession{program: prog, commands: []string{strings.Join([]string{
		"target remote " + stub.target(),
		"break round_done",
		"continue",
		`print sum`,
		insnsPython,
		strings.Replace(script, "FUNCTIONS", `("leaf", "dispatch", "work")`, 1),
		"kill",
	}, "\n")}})
	if ref := mustMatch(t, out, `\$1 = (-?\d+)`); ref != nil {
		sum = ref[1]
	}
	return out, sum
}

// everyInstruction runs everyInsnScript on prog with the stub flag given
// and checks the results; want names the kinds of jumps that must occur
// (evicting, short, prefixed, int3, and which prefixed shape).
func everyInstruction(t *testing.T, prog, flag string, want []string) {
	out, sum := everyInsnSession(t, prog, flag, everyInsnScript)
	if sum == "" {
		return
	}
	ref := []string{"", sum}
	type result struct {
		frames int
		sum    string
		placed string
	}
	byKind := map[string]map[string]result{"trace": {}, "ftrace": {}}
	re := regexp.MustCompile(`(?m)^RESULT (\w+) (0x[0-9a-f]+) (\d+) (-?\d+) (.*)$`)
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[3])
		byKind[m[1]][m[2]] = result{frames: n, sum: m[4], placed: m[5]}
	}
	traps, fast := byKind["trace"], byKind["ftrace"]
	if len(fast) < 60 || len(fast) != len(traps) {
		t.Fatalf("%d fast and %d trap results, want the same number (at least 60)", len(fast), len(traps))
	}
	jumps, hit := 0, 0
	kinds := map[string]int{}
	for addr, f := range fast {
		tr := traps[addr]
		if f.sum != ref[1] || tr.sum != ref[1] {
			t.Errorf("%s: round sum %s with ftrace, %s with trace, want %s", addr, f.sum, tr.sum, ref[1])
		}
		if f.frames != tr.frames {
			t.Errorf("%s: %d frames with ftrace (%s), %d with trace", addr, f.frames, f.placed, tr.frames)
		}
		for kind, marker := range map[string]string{"prefixed": " prefix bytes", "evicting": "evicting jump", "short": "short jump", "int3": "int3 at covered heads"} {
			if strings.Contains(f.placed, marker) {
				kinds[kind]++
			}
		}
		if strings.Contains(f.placed, " prefix bytes") {
			switch {
			case strings.Contains(f.placed, "successor-preserving jump"):
				kinds["kept, prefixed"]++ // PaddedKeepSites
			case strings.Contains(f.placed, "int3 at covered heads"):
				kinds["int3, prefixed"]++ // PaddedSites
			}
		}
		if strings.Contains(f.placed, " jump over ") {
			jumps++
			if f.frames > 0 {
				hit++
			}
		}
	}
	t.Logf("%d instructions: %d with a jump (%d of them executed in a round; %v)", len(fast), jumps, hit, kinds)
	for _, kind := range want {
		if kinds[kind] == 0 {
			t.Errorf("no %s jump: the test does not exercise them", kind)
		}
	}
	if jumps < len(fast)*3/4 || hit < 20 {
		t.Errorf("only %d of %d instructions got a jump (%d executed): the test would not exercise jumps", jumps, len(fast), hit)
	}
}

// allAtOnceScript puts a tracepoint of the kind given at every
// instruction of the functions named at once, runs one round and prints
// "HITS kind address count" for each, then "PLACED" lines (monitor
// ftrace).
const allAtOnceScript = `python
def all_at_once(kind):
    for fn in FUNCTIONS:
        for a in insns(fn):
            gdb.execute("%s *%d" % (kind, a), to_string=True)
    gdb.execute("tstart", to_string=True)
    placed = gdb.execute("monitor ftrace", to_string=True)
    gdb.execute("continue", to_string=True)
    s = int(gdb.parse_and_eval("sum"))
    counts = {}
    addr = None
    for line in gdb.execute("info tracepoints", to_string=True).splitlines():
        m = re.match(r"\d+\s+(?:fast )?tracepoint\s+keep\s+\S+\s+(0x[0-9a-f]+)", line)
        if m:
            addr = int(m.group(1), 16)
            counts[addr] = 0
            continue
        m = re.search(r"already hit (\d+) time", line)
        if m and addr is not None:
            counts[addr] = int(m.group(1))
    for a in sorted(counts):
        print("HITS %s %#x %d %d" % (kind, a, counts[a], s))
    gdb.execute("tstop", to_string=True)
    gdb.execute("delete tracepoints", to_string=True)
    for line in placed.splitlines():
        print("PLACED " + line)

for kind in ("trace", "ftrace"):
    all_at_once(kind)
end`

// All the tracepoints at once (issue 9): neighbouring jumps overlap (the
// later one turns the earlier into a trap) and short jumps share the
// padding they go to; every tracepoint must count what a trap counts
// there, and the program must compute what it computes untraced.
func TestFastTraceAllAtOnce(t *testing.T) {
	prog := buildC(t, t.TempDir()+"/everyinsn", []string{"everyinsn.c"}, "-O2", "-no-pie")
	out, sum := everyInsnSession(t, prog, "--ftrace-shapes=all", allAtOnceScript)
	if sum == "" {
		return
	}
	ref := []string{"", sum}
	hits := map[string]map[string]string{"trace": {}, "ftrace": {}}
	for _, m := range regexp.MustCompile(`(?m)^HITS (\w+) (0x[0-9a-f]+) (\d+) (-?\d+)$`).FindAllStringSubmatch(out, -1) {
		hits[m[1]][m[2]] = m[3]
		if m[4] != ref[1] {
			t.Errorf("%s at every instruction: round sum %s, want %s", m[1], m[4], ref[1])
			break
		}
	}
	if len(hits["trace"]) < 60 || len(hits["ftrace"]) != len(hits["trace"]) {
		t.Fatalf("%d trace and %d ftrace hit counts, want the same number (at least 60)", len(hits["trace"]), len(hits["ftrace"]))
	}
	for addr, n := range hits["trace"] {
		if hits["ftrace"][addr] != n {
			t.Errorf("%s: ftrace hit %s times, trace %s", addr, hits["ftrace"][addr], n)
		}
	}
	slots := map[string]int{}
	jumps, short := 0, 0
	for _, m := range regexp.MustCompile(`(?m)^PLACED tracepoint \d+ at 0x[0-9a-f]+: `+jumpShape+` jump[^\n]*?(?:in the padding at (0x[0-9a-f]+))?$`).FindAllStringSubmatch(out, -1) {
		jumps++
		if m[1] != "" {
			short++
			slots[m[1]]++
		}
	}
	t.Logf("%d tracepoints at once: %d jumps, %d of them short jumps to %d slots", len(hits["ftrace"]), jumps, short, len(slots))
	if jumps < 20 {
		t.Errorf("only %d jumps: the test does not exercise jumps side by side", jumps)
	}
	for slot, n := range slots {
		if n > 1 {
			t.Errorf("%d short jumps share the slot %s", n, slot)
		}
	}
}
