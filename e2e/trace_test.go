package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// traceIterations is how many times trace.c's loop runs in these tests
// (its first argument).
const traceIterations = 10

// traceSession starts the stub on prog and runs one gdb script: stop in
// main (tracepoints set before the shared libraries are loaded make gdb
// re-send them at the library event, which gdbserver rejects), then
// setup (tracepoint definitions), a breakpoint at done, tstart, continue,
// tstop, tstatus, then after (queries). It returns gdb's output and the stub.
func traceSession(t *testing.T, prog string, progArgs []string, setup, done, after string) (string, *stubProcess) {
	t.Helper()
	return traceSessionFlags(t, []string{"--once"}, prog, progArgs, setup, done, after)
}

// traceSessionFlags is traceSession with the stub's flags given.
func traceSessionFlags(t *testing.T, flags []string, prog string, progArgs []string, setup, done, after string) (string, *stubProcess) {
	t.Helper()
	stub := startStub(t, flags, append([]string{prog}, progArgs...)...)
	script := strings.Join([]string{
		"target remote " + stub.target(),
		"break main",
		"continue",
		strings.TrimSpace(setup),
		"break " + done,
		"tstart",
		"continue",
		"tstop",
		"tstatus",
		strings.TrimSpace(after),
	}, "\n")
	out := runGDB(t, gdbSession{program: prog, commands: []string{script}})
	return out, stub
}

// framesCollected returns the N of the last "Collected N trace frames".
func framesCollected(t *testing.T, out string) int {
	t.Helper()
	// A wrapped circular buffer is reported as
	// "Buffer contains N trace frames (of M created total)".
	all := regexpAll(out, `(?:Collected|Buffer contains) (\d+) trace frames`)
	if len(all) == 0 {
		t.Fatalf("no \"Collected N trace frames\" in the output")
	}
	n, _ := strconv.Atoi(all[len(all)-1][1])
	return n
}

// frameLoop is a gdb loop over every trace frame running body in each.
func frameLoop(body string) string {
	return "tfind start\nwhile ($trace_frame != -1)\n" + body + "\ntfind\nend\ntfind none"
}

// tracedFunctionValue is trace.c's rec->value after traced_function(n).
func tracedFunctionValue(n int) int { return n*n + 2*n }

func TestTraceConditionAndCollect(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "trace")
	const wantN = 3
	out, _ := traceSession(t, prog, []string{strconv.Itoa(traceIterations)}, fmt.Sprintf(`
trace traced_function if n == %d
actions
collect n, *rec, $locals
collect/s msg
end`, wantN), "trace_done", `
tstatus
tfind start
print n
print rec->id
print rec->value
print rec->name
print msg
print g_counter
tfind
`)
	if n := framesCollected(t, out); n != 1 {
		t.Errorf("collected %d frames, want 1 (only n == %d passes the condition)", n, wantN)
	}
	mustContain(t, out,
		"Found trace frame 0, tracepoint 2",
		fmt.Sprintf("$1 = %d", wantN),
		"$2 = 7",
		// rec->value still holds what the previous call stored.
		fmt.Sprintf("$3 = %d", tracedFunctionValue(wantN-1)),
		`$4 = "seven`,
		`"trace me"`,
		"$6 = <unavailable>",
		"No trace frame found",
	)
}

func TestTraceRegsLocalsArgs(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "trace")
	out, _ := traceSession(t, prog, []string{strconv.Itoa(traceIterations)}, `
trace traced_function
actions
collect $regs, $locals, $args
end`, "trace_done", `
tfind start
tdump
`+frameLoop(`printf "frame %d n=%d rip_in_function=%d\n", $trace_frame, n, $pc > (long)&traced_function && $pc < (long)&trace_done`))
	if n := framesCollected(t, out); n != traceIterations {
		t.Errorf("collected %d frames, want %d", n, traceIterations)
	}
	// tdump of frame 0: the arguments, the locals and every register.
	mustMatch(t, out, `(?m)^n = 0$`)
	mustMatch(t, out, `(?m)^rec = 0x[0-9a-f]+ <g_record>$`)
	// $args collects the pointer, not the string it points to.
	mustMatch(t, out, `(?m)^msg = 0x[0-9a-f]+ <g_string> <error: `)
	mustMatch(t, out, `(?m)^square = `)
	mustMatch(t, out, `(?m)^doubled = `)
	for _, r := range []string{"rax", "rsp", "rip", "eflags", "r15"} {
		mustMatch(t, out, `(?m)^`+reg(r)+`\s+0x[0-9a-f]+`)
	}
	for i := range traceIterations {
		mustContain(t, out, fmt.Sprintf("frame %d n=%d rip_in_function=1\n", i, i))
	}
}

func TestTraceGlobalsArrayStructString(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "trace")
	returnLine := lineOf(t, "trace.c", "return square + doubled + msg[0];")
	out, _ := traceSession(t, prog, []string{strconv.Itoa(traceIterations)}, fmt.Sprintf(`
trace trace.c:%d
actions
collect g_array, g_record, g_counter, n
collect/s msg
end`, returnLine), "trace_done", frameLoop(`print n
print g_counter
print g_array
print g_record
print msg`))
	if n := framesCollected(t, out); n != traceIterations {
		t.Errorf("collected %d frames, want %d", n, traceIterations)
	}
	for k := range traceIterations {
		var arr []string
		for i := range 10 {
			v := 0
			if i <= k {
				v = i * i
			}
			arr = append(arr, strconv.Itoa(v))
		}
		base := 5 * k // five prints per frame
		want := []string{
			fmt.Sprintf("$%d = %d\n", base+1, k),
			fmt.Sprintf("$%d = %d\n", base+2, k+1),
			fmt.Sprintf("$%d = {%s}\n", base+3, strings.Join(arr, ", ")),
			fmt.Sprintf("$%d = {id = 7, value = %d, name = \"seven", base+4, tracedFunctionValue(k)),
			fmt.Sprintf("$%d = 0x", base+5),
		}
		mustContain(t, out, want...)
	}
	if n := strings.Count(out, `<g_string> "trace me"`); n != traceIterations {
		t.Errorf("collected string printed %d times, want %d", n, traceIterations)
	}
}

func TestTraceStateVariableCounter(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "trace")
	out, _ := traceSession(t, prog, []string{strconv.Itoa(traceIterations)}, `
tvariable $hits = 0
trace *at_call
actions
teval $hits = $hits + 1
collect $hits
end`, "trace_done", `
print $hits
info tvariables
`+frameLoop(`printf "frame %d hits %d\n", $trace_frame, $hits`))
	mustContain(t, out, fmt.Sprintf("$1 = %d", traceIterations))
	mustMatch(t, out, fmt.Sprintf(`(?m)^\$hits\s+0\s+%d\s*$`, traceIterations))
	for i := range traceIterations {
		mustContain(t, out, fmt.Sprintf("frame %d hits %d\n", i, i+1))
	}
}

func TestTracePasscount(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "trace")
	const pass = 3
	stub := startStub(t, []string{"--once"}, prog, strconv.Itoa(traceIterations))
	out := runGDB(t, gdbSession{program: prog, commands: []string{fmt.Sprintf(`target remote %s
break main
continue
trace traced_function
passcount %d
actions
collect n
end
break trace_done
tstart
continue
tstatus
%s`, stub.target(), pass, frameLoop(`printf "frame %d n=%d\n", $trace_frame, n`))}})
	if n := framesCollected(t, out); n != pass {
		t.Errorf("collected %d frames, want passcount %d", n, pass)
	}
	mustContain(t, out, "Trace stopped by tracepoint 2.")
	for i := range pass {
		mustContain(t, out, fmt.Sprintf("frame %d n=%d\n", i, i))
	}
	// The program itself is unaffected by the trace stopping.
	stub.kill()
	mustContain(t, stub.output.String(), "g_counter 10")
}

func TestTraceWhileStepping(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "trace")
	const iterations, steps = 3, 4
	out, stub := traceSession(t, prog, []string{strconv.Itoa(iterations)}, fmt.Sprintf(`
trace traced_function
actions
collect n
while-stepping %d
collect $`+reg("rip")+`
end
end`, steps), "trace_done", frameLoop(`printf "frame %d tp %d pc %#lx\n", $trace_frame, $tracepoint, $pc`)+`
print/x (long)&traced_function`)
	if n := framesCollected(t, out); n != iterations*(1+steps) {
		t.Errorf("collected %d frames, want %d hits × (1 + %d steps)", n, iterations, steps)
	}
	frames := regexpAll(out, `frame (\d+) tp 2 pc (0x[0-9a-f]+)\n`)
	if len(frames) != iterations*(1+steps) {
		t.Fatalf("found %d frames of tracepoint 2, want %d", len(frames), iterations*(1+steps))
	}
	for hit := range iterations {
		group := frames[hit*(1+steps) : (hit+1)*(1+steps)]
		first := group[0][2]
		for _, f := range group[1:] {
			a, _ := strconv.ParseUint(f[2][2:], 16, 64)
			prev, _ := strconv.ParseUint(first[2:], 16, 64)
			if a <= prev {
				t.Errorf("hit %d: stepping frame at %s does not follow %s", hit, f[2], first)
			}
			first = f[2]
		}
		if group[0][2] != frames[0][2] {
			t.Errorf("hit %d starts at %s, want the tracepoint address %s", hit, group[0][2], frames[0][2])
		}
	}
	stub.kill()
	mustContain(t, stub.output.String(), "asm_worker results OK")
}

func TestTraceCircularBuffer(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "trace")
	const iterations = 200
	out, _ := traceSession(t, prog, []string{strconv.Itoa(iterations)}, `
set circular-trace-buffer on
set trace-buffer-size 4096
trace traced_function
actions
collect $regs, n
end`, "trace_done", `
tstatus
tfind start
set $first_n = n
tfind none
`+frameLoop(`set $last_n = n`)+`
printf "first n %d last n %d\n", $first_n, $last_n`)
	mustContain(t, out, "Trace buffer is circular.")
	mustMatch(t, out, fmt.Sprintf(`Buffer contains \d+ trace frames \(of %d created total\)`, iterations))
	frames := framesCollected(t, out)
	m := mustMatch(t, out, `first n (\d+) last n (\d+)`)
	if m == nil {
		return
	}
	first, _ := strconv.Atoi(m[1])
	last, _ := strconv.Atoi(m[2])
	if frames <= 0 || frames >= iterations {
		t.Errorf("buffer holds %d frames, want some but fewer than %d (it wraps)", frames, iterations)
	}
	if last != iterations-1 {
		t.Errorf("newest frame has n=%d, want %d", last, iterations-1)
	}
	if first != iterations-frames {
		t.Errorf("oldest frame has n=%d, want %d (the last %d hits survive)", first, iterations-frames, frames)
	}
}

// dumpedFrame is one trace frame's tdump output.
type dumpedFrame struct {
	tracepoint int    // the tracepoint number gdb showed
	body       string // the lines after "Data collected at ..."
}

// splitFrames maps each "Found trace frame N, tracepoint M" of out to
// that frame's tdump output.
func splitFrames(out string) map[int]dumpedFrame {
	frames := map[int]dumpedFrame{}
	re := regexp.MustCompile(`Found trace frame (\d+), tracepoint (\d+)\n(?:Data collected at tracepoint \d+, trace frame \d+:\n)?`)
	locs := re.FindAllStringSubmatchIndex(out, -1)
	for i, loc := range locs {
		end := len(out)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		body := out[loc[1]:end]
		if j := strings.Index(body, "No trace frame found"); j >= 0 {
			body = body[:j]
		}
		n, _ := strconv.Atoi(out[loc[2]:loc[3]])
		tp, _ := strconv.Atoi(out[loc[4]:loc[5]])
		frames[n] = dumpedFrame{tracepoint: tp, body: body}
	}
	return frames
}

// uploadedTracepoints maps the numbers gdb gives tracepoints found in a
// trace file to the numbers they had on the target.
func uploadedTracepoints(out string) map[int]int {
	m := map[int]int{}
	for _, s := range regexpAll(out, `Created tracepoint (\d+) for target's tracepoint (\d+) at`) {
		local, _ := strconv.Atoi(s[1])
		target, _ := strconv.Atoi(s[2])
		m[local] = target
	}
	return m
}

func TestTraceSaveTfileRoundTrip(t *testing.T) {
	stubPath(t)
	dir := t.TempDir()
	// Not PIE: a trace file has no process, so gdb would not relocate a
	// PIE program's symbols to the addresses in the frames.
	prog := buildC(t, filepath.Join(dir, "trace"), []string{"trace.c"}, "-no-pie")
	hostFile := filepath.Join(dir, "host.tf")
	targetFile := filepath.Join(dir, "target.tf")
	dump := frameLoop("tdump")
	live, _ := traceSession(t, prog, []string{"4"}, `
tvariable $count = 10
trace traced_function
actions
collect $regs, $args, $locals, g_record, g_string
teval $count = $count + 1
collect $count
end
trace *at_riprel
actions
collect $`+reg("rax")+`, g_array, g_counter
end`, "trace_done", dump+`
tsave `+hostFile+`
tsave -r `+targetFile+`
echo end of session\n`)
	// With gdbserver tsave -r is an error that ends the script (no QTSave).
	if !isGdbserver(stubPath(t)) {
		mustContain(t, live, "end of session")
	}
	liveFrames := splitFrames(live)
	if len(liveFrames) != 8 {
		t.Fatalf("live session dumped %d frames, want 8", len(liveFrames))
	}
	for _, file := range []string{hostFile, targetFile} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			if file == targetFile && isGdbserver(stubPath(t)) {
				// gdbserver 13.1 has no QTSave handler (grep gdbserver/ for
				// QTSave: none), so gdb says "Target does not support this
				// command." for tsave -r.
				t.Skip("gdbserver does not implement QTSave (tsave -r)")
			}
			if _, err := os.Stat(file); err != nil {
				t.Fatalf("trace file not written: %v", err)
			}
			out := runGDB(t, gdbSession{program: prog, commands: []string{"target tfile " + file + "\n" + dump}})
			saved := splitFrames(out)
			if len(saved) != len(liveFrames) {
				t.Errorf("%s has %d frames, live had %d", file, len(saved), len(liveFrames))
			}
			numbers := uploadedTracepoints(out)
			for n, want := range liveFrames {
				got := saved[n]
				if numbers[got.tracepoint] != want.tracepoint {
					t.Errorf("frame %d: from file tracepoint %d (target's %d), live from %d",
						n, got.tracepoint, numbers[got.tracepoint], want.tracepoint)
				}
				if got.body != want.body {
					t.Errorf("frame %d differs\nlive:\n%s\nfile:\n%s", n, want.body, got.body)
				}
			}
		})
	}
}

func TestTraceThreadsFrameCount(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "threads")
	const nthreads, hitsPerThread = 4, 25
	out, stub := traceSession(t, prog, []string{strconv.Itoa(nthreads), strconv.Itoa(hitsPerThread)}, `
trace hit
actions
collect id
end`, "threads_done", `
tstatus
`+frameLoop(`printf "hit by %d\n", id`))
	if !waitFor(5*time.Second, func() bool { return strings.Contains(stub.output.String(), "total hits") }) {
		t.Fatalf("program did not print its hit count; stub output:\n%s", stub.output.String())
	}
	m := regexp.MustCompile(`total hits (\d+)`).FindStringSubmatch(stub.output.String())
	programHits, _ := strconv.Atoi(m[1])
	if programHits != nthreads*hitsPerThread {
		t.Errorf("program counted %d hits, want %d", programHits, nthreads*hitsPerThread)
	}
	if frames := framesCollected(t, out); frames != programHits {
		t.Errorf("collected %d frames, program counted %d hits", frames, programHits)
	}
	for id := 1; id <= nthreads; id++ {
		if n := strings.Count(out, fmt.Sprintf("hit by %d\n", id)); n != hitsPerThread {
			t.Errorf("thread %d: %d frames, want %d", id, n, hitsPerThread)
		}
	}
}

func TestTraceCallJccRipRelative(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "trace")
	out, stub := traceSession(t, prog, []string{strconv.Itoa(traceIterations)}, `
trace *at_call
actions
collect $regs
end
trace *at_jcc
actions
collect $regs
end
trace *at_riprel
actions
collect $regs
end`, "trace_done", frameLoop(fmt.Sprintf(`printf "frame %%d tp %%d rbx %%ld rax %%ld rdi %%ld\n", $trace_frame, $tracepoint, $%s, $%s, $%s`, reg("rbx"), reg("rax"), reg("rdi"))))
	if n := framesCollected(t, out); n != 3*traceIterations {
		t.Errorf("collected %d frames, want %d", n, 3*traceIterations)
	}
	frames := regexpAll(out, `frame (\d+) tp (\d+) rbx (-?\d+) rax (-?\d+) rdi (-?\d+)\n`)
	if len(frames) != 3*traceIterations {
		t.Fatalf("found %d frames, want %d", len(frames), 3*traceIterations)
	}
	for i, f := range frames {
		x := i / 3
		tp, _ := strconv.Atoi(f[2])
		rbx, _ := strconv.Atoi(f[3])
		rax, _ := strconv.Atoi(f[4])
		rdi, _ := strconv.Atoi(f[5])
		if tp != 2+i%3 {
			t.Errorf("frame %d from tracepoint %d, want %d", i, tp, 2+i%3)
		}
		if rbx != x {
			t.Errorf("frame %d: rbx %d, want argument %d", i, rbx, x)
		}
		switch tp {
		case 2: // before call add_one
			if rdi != x {
				t.Errorf("frame %d at at_call: rdi %d, want %d", i, rdi, x)
			}
		case 3: // before jl, after add_one returned
			if rax != x+1 {
				t.Errorf("frame %d at at_jcc: rax %d, want %d", i, rax, x+1)
			}
		case 4: // before the rip-relative load
			want := x + 1
			if x >= 5 {
				want += 100
			}
			if rax != want {
				t.Errorf("frame %d at at_riprel: rax %d, want %d", i, rax, want)
			}
		}
	}
	// The traced instructions still compute the right results.
	wantSum := 0
	for x := range traceIterations {
		wantSum += x + 1 + 7
		if x >= 5 {
			wantSum += 100
		}
	}
	stub.kill()
	mustContain(t, stub.output.String(), "asm_worker results OK", fmt.Sprintf("asm_sum %d\n", wantSum))
}

func TestTraceStatusFields(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "trace")
	stub := startStub(t, []string{"--once"}, prog, strconv.Itoa(traceIterations))
	out := runGDB(t, gdbSession{program: prog, commands: []string{fmt.Sprintf(`target remote %s
tstatus
break main
continue
set trace-user alice
set trace-notes first run
trace traced_function
actions
collect n
end
break trace_done
tstart
tstatus
continue
tstop all done
tstatus`, stub.target())}})
	parts := strings.SplitN(out, "Trace is running on the target.", 2)
	if len(parts) != 2 {
		t.Fatalf("no \"Trace is running on the target.\" after tstart")
	}
	before, rest := parts[0], parts[1]
	mustContain(t, before, "No trace has been run on the target.", "Collected 0 trace frames.")
	running, stopped, ok := strings.Cut(rest, "Breakpoint 3, trace_done")
	if !ok {
		t.Fatalf("trace_done not reached")
	}
	mustContain(t, running, "Collected 0 trace frames.", "Trace user is alice.", "Trace notes: first run.",
		"Not looking at any trace frame.")
	mustMatch(t, running, `Trace buffer has (\d+) bytes of (\d+) bytes free \(0% full\)\.`)
	mustMatch(t, running, `Trace started at \d+\.\d+ secs\.`)
	mustContain(t, stopped, "Trace stopped by a tstop command (all done).",
		fmt.Sprintf("Collected %d trace frames.", traceIterations), "Trace user is alice.", "Trace notes: first run.")
	m := mustMatch(t, stopped, `Trace buffer has (\d+) bytes of (\d+) bytes free`)
	if m != nil {
		free, _ := strconv.Atoi(m[1])
		size, _ := strconv.Atoi(m[2])
		if free >= size || free <= 0 {
			t.Errorf("after %d frames the buffer has %d of %d bytes free", traceIterations, free, size)
		}
	}
	mustMatch(t, stopped, `Trace started at \d+\.\d+ secs, stopped \d+\.\d+ secs later\.`)
}

// Frames of the collected size (issue 10): `collect $rdi` (x0) stores it and
// the PC, stack and frame pointers (and link register), not the whole
// register block, for trap and fast tracepoints;
// the other registers are unavailable; tsave and target tfile still
// show the same frames (the saved register block holds zeros elsewhere).
func TestCollectOneRegisterFrames(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver stores the whole register block")
	}
	for _, kind := range []string{"trace", "ftrace"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			prog := buildC(t, filepath.Join(dir, "trace"), []string{"trace.c"}, "-no-pie")
			file := filepath.Join(dir, "rdi.tf")
			arg, other := reg("rdi"), reg("rbx")
			out, _ := traceSession(t, prog, []string{"5"}, kind+` *traced_function
actions
collect $`+arg+`
end`, "trace_done", `
tstatus
`+frameLoop(`printf "rdi=%d pc-ok=%d\n", $`+arg+`, $pc == traced_function`)+`
tfind 2
print $`+other+`
tdump
tfind none
tsave `+file)
			if n := framesCollected(t, out); n != 5 {
				t.Fatalf("%d frames, want 5", n)
			}
			m := regexp.MustCompile(`Trace buffer has (\d+) bytes of (\d+) bytes free`).FindStringSubmatch(out)
			if m == nil {
				t.Fatal("no buffer use in tstatus")
			}
			free, _ := strconv.Atoi(m[1])
			size, _ := strconv.Atoi(m[2])
			// The whole block made ~560-830 bytes a frame.
			if per := (size - free) / 5; per > oneRegisterFrameBytes {
				t.Errorf("%d bytes a frame, want at most %d", per, oneRegisterFrameBytes)
			}
			for n := range 5 {
				mustContain(t, out, fmt.Sprintf("rdi=%d pc-ok=1", n))
			}
			mustContain(t, out, "$1 = <unavailable>")
			mustContain(t, out, "$"+arg+" = 2")
			// Separate command files: gdb 13 refuses to recreate the
			// fast tracepoint from the file (the 1-byte push at its
			// address: "May not have a fast tracepoint"), which ends
			// the file it happens in, but it reads the frames.
			saved := runGDB(t, gdbSession{program: prog, commands: []string{"target tfile " + file,
				frameLoop(`printf "saved rdi=%d pc-ok=%d\n", $` + arg + `, $pc == traced_function`)}})
			for n := range 5 {
				mustContain(t, saved, fmt.Sprintf("saved rdi=%d pc-ok=1", n))
			}
		})
	}
}
