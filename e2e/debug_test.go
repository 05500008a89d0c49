package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotpstub/inferior"
)

// lineOf returns the 1-based number of the first line of testdata/file
// that contains text.
func lineOf(t *testing.T, file, text string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata", file))
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, text) {
			return i + 1
		}
	}
	t.Fatalf("%s has no line containing %q", file, text)
	return 0
}

// demoGreeting is demo.c's greeting string.
const demoGreeting = "hello, tracepoints"

// demoCompute is demo.c's compute(n, &pt, greeting) with pt.x = n, pt.y = 2n.
func demoCompute(n int) int {
	return n*n + n + 2*n + len(demoGreeting)
}

// solibPrograms builds libdemo.so, a program linked against it and one
// that dlopen()s it; it returns their paths.
func solibPrograms(t *testing.T) (lib, linked, dlopener string) {
	t.Helper()
	dir := t.TempDir()
	lib = buildC(t, filepath.Join(dir, "libdemo.so"), []string{"solib/libdemo.c"}, "-shared", "-fPIC")
	linked = buildC(t, filepath.Join(dir, "main_linked"), []string{"solib/main_linked.c"},
		"-L"+dir, "-ldemo", "-Wl,-rpath,"+dir)
	dlopener = buildC(t, filepath.Join(dir, "main_dlopen"), []string{"solib/main_dlopen.c"}, "-ldl")
	return lib, linked, dlopener
}

func TestBreakpoints(t *testing.T) {
	stubPath(t)
	lib, linked, dlopener := solibPrograms(t)
	demo := buildProgram(t, "demo")
	tests := []struct {
		name     string
		prog     string
		args     []string
		commands []string
		want     []string
		// programOutput must appear in the stub's output (the inferior's stdout).
		programOutput string
	}{
		{
			name:     "main",
			prog:     demo,
			commands: []string{"break main", "continue", "info frame"},
			want:     []string{"Breakpoint 1, main () at ", "demo.c:", reg("rip") + " = 0x"},
		},
		{
			name: "shared library function",
			prog: linked,
			commands: []string{"set breakpoint pending on", "break lib_add", "continue",
				"finish", "continue"},
			want: []string{"Breakpoint 1, lib_add (a=2, b=3) at ", "libdemo.c:",
				"Value returned is $1 = 5", "exited normally"},
			programOutput: "lib_add(2, 3) = 5",
		},
		{
			name: "dlopened library function",
			prog: dlopener,
			args: []string{lib},
			commands: []string{"set breakpoint pending on", "break lib_add", "continue",
				"info sharedlibrary", "finish", "continue"},
			want: []string{"Breakpoint 1, lib_add (a=40, b=2) at ", lib,
				"Value returned is $1 = 42", "exited normally"},
			programOutput: "lib_add(40, 2) = 42",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stub := debugSession(t, tc.prog, tc.args, tc.commands...)
			mustContain(t, out, tc.want...)
			if tc.programOutput != "" {
				stub.waitExit(10 * time.Second)
				mustContain(t, stub.output.String(), tc.programOutput)
			}
		})
	}
}

func TestStepNextFinishUntil(t *testing.T) {
	stubPath(t)
	demo := buildProgram(t, "demo")
	callLine := lineOf(t, "demo.c", "total += compute(")
	sumLine := lineOf(t, "demo.c", "int sum = p->x + p->y;")
	countLine := lineOf(t, "demo.c", "call_count++;")
	printfLine := lineOf(t, "demo.c", `printf("compute called`)
	out, _ := debugSession(t, demo, nil,
		fmt.Sprintf("break demo.c:%d", callLine),
		"continue",
		"step",
		"next",
		"next",
		"finish",
		"delete",
		fmt.Sprintf("until %d", printfLine),
		"print call_count",
		"print total",
	)
	total := 0
	for n := range 10 {
		total += demoCompute(n)
	}
	mustContain(t, out,
		"Breakpoint 1, main () at ",
		"compute (n=0, p=0x",
		fmt.Sprintf("\n%d\t\tint sum = p->x + p->y;", sumLine),
		fmt.Sprintf("\n%d\t\tcall_count++;", countLine),
		fmt.Sprintf("Value returned is $1 = %d", demoCompute(0)),
		fmt.Sprintf("\n%d\t\tprintf(", printfLine),
		"$2 = 10",
		fmt.Sprintf("$3 = %d", total),
	)
	// finish returns into the middle of the call line.
	mustMatch(t, out, fmt.Sprintf(`0x[0-9a-f]+ in main \(\) at \S*demo\.c:%d\n`, callLine))
	mustMatch(t, out, `name=0x[0-9a-f]+ "`+demoGreeting+`"`)
}

// vectorsProgram builds testdata/vectors and returns it with the
// arguments that make it load ymm0 when the CPU has AVX.
func vectorsProgram(t *testing.T) (prog string, args []string, avx bool) {
	t.Helper()
	prog = buildProgram(t, "vectors")
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	avx = strings.Contains(string(cpuinfo), " avx ")
	if avx {
		args = []string{"avx"}
	}
	return prog, args, avx
}

func TestRegisters(t *testing.T) {
	stubPath(t)
	vectors, args, avx := vectorsProgram(t)
	out, _ := debugSession(t, vectors, args,
		"break *vectors_loaded",
		"continue",
		"print (long)$pc == (long)&vectors_loaded",
		"print $fs_base != 0",
		"info registers rip",
		"info registers eflags",
		"info registers r12",
		"print $xmm0.v4_int32",
		"print $xmm1.v2_double",
		"print $ymm0.v8_int32",
		"info registers",
	)
	mustContain(t, out,
		"$1 = 1", // at vectors_loaded
		"$2 = 1", // fs_base points at the thread's TLS block
		"{1, 2, 3, 4}",
		"{1.5, -2.25}",
	)
	mustMatch(t, out, `(?m)^rip\s+0x[0-9a-f]+`)
	mustMatch(t, out, `(?m)^eflags\s+0x[0-9a-f]+\s+\[ .*IF.* \]`)
	mustMatch(t, out, `(?m)^r12\s+0x1122334455667788\s+1234605616436508552`)
	for _, reg := range []string{"rax", "rbx", "rsp", "rbp", "rip", "eflags", "cs", "ss"} {
		mustMatch(t, out, `(?m)^`+reg+`\s+0x[0-9a-f]+`)
	}
	if avx {
		mustContain(t, out, "{1, 2, 3, 4, 5, 6, 7, 8}")
	}
}

func TestMemoryReadWrite(t *testing.T) {
	stubPath(t)
	demo := buildProgram(t, "demo")
	out, stub := debugSession(t, demo, nil,
		"break compute",
		"continue",
		"x/s greeting",
		"x/8dw &history",
		"set var call_count = 100",
		"set var history[3] = 77",
		"set {int}&history[4] = 0x55",
		"x/8dw &history",
		"print call_count",
		"print/x *(unsigned char *)greeting",
		"delete",
		"continue",
	)
	mustContain(t, out, `"`+demoGreeting+`"`,
		"$1 = 100",
		fmt.Sprintf("$2 = 0x%x", demoGreeting[0]),
		"exited normally")
	mustMatch(t, out, `<history>:\s+0\s+0\s+0\s+0`)
	mustMatch(t, out, `<history>:\s+0\s+0\s+0\s+77\s*\n.*<history\+16>:\s+85\s+0\s+0\s+0`)
	stub.waitExit(10 * time.Second)
	// compute ran 10 times starting from the value written by gdb.
	mustContain(t, stub.output.String(), "compute called 110 times")
}

func TestWatchpoint(t *testing.T) {
	stubPath(t)
	if err := inferior.ProbeDebugRegisters("/bin/true"); err != nil {
		t.Skipf("skipped: %v", err)
	}
	watch := buildProgram(t, "watch")
	out, _ := debugSession(t, watch, nil,
		"break main", "continue", "watch watched", "continue", "continue", "continue")
	mustContain(t, out, "Hardware watchpoint 2: watched")
	for i := 1; i <= 3; i++ {
		mustMatch(t, out, fmt.Sprintf(`Old value = %d\s*\nNew value = %d`, (i-1)*10, i*10))
	}
}

func TestThreads(t *testing.T) {
	stubPath(t)
	const nthreads, hitsPerThread = 4, 5
	threads := buildProgram(t, "threads")
	cmds := []string{"break all_started", "continue", "info threads", "thread 2", "break hit"}
	const continues = 8
	for range continues {
		cmds = append(cmds, "continue")
	}
	cmds = append(cmds, "delete", "continue")
	out, stub := debugSession(t, threads,
		[]string{strconv.Itoa(nthreads), strconv.Itoa(hitsPerThread)}, cmds...)
	if n := countMatches(out, `(?m)^[* ] +\d+ +Thread `); n != nthreads+1 {
		t.Errorf("info threads lists %d threads, want %d", n, nthreads+1)
	}
	mustMatch(t, out, `\[Switching to thread 2 \(Thread `)
	hits := countMatches(out, `hit Breakpoint 2, hit \(id=\d\)`)
	if hits != continues {
		t.Errorf("breakpoint at hit reported %d times, want %d", hits, continues)
	}
	ids := map[string]bool{}
	for _, m := range regexpAll(out, `hit Breakpoint 2, hit \(id=(\d)\)`) {
		ids[m[1]] = true
	}
	if len(ids) < 2 {
		t.Errorf("breakpoint hit by %d distinct threads, want several", len(ids))
	}
	mustContain(t, out, "exited normally")
	stub.waitExit(10 * time.Second)
	mustContain(t, stub.output.String(), fmt.Sprintf("total hits %d", nthreads*hitsPerThread))
}

func TestSignals(t *testing.T) {
	stubPath(t)
	signals := buildProgram(t, "signals")
	out, stub := debugSession(t, signals, nil,
		"handle SIGUSR1 stop print",
		"handle SIGALRM stop print",
		"break signals_done",
		"continue", "continue", "continue", "continue", "continue",
		"print usr1_count", "print alrm_count",
		"continue")
	if n := countMatches(out, `Program received signal SIGUSR1, User defined signal 1\.`); n != 2 {
		t.Errorf("SIGUSR1 stops: %d, want 2", n)
	}
	if n := countMatches(out, `Program received signal SIGALRM, Alarm clock\.`); n != 2 {
		t.Errorf("SIGALRM stops: %d, want 2", n)
	}
	mustContain(t, out, "Breakpoint 1, signals_done ()", "$1 = 2", "$2 = 2", "exited normally")
	stub.waitExit(10 * time.Second)
	mustContain(t, stub.output.String(), "usr1 2 alrm 2")
}

// processState returns the state letter of /proc/PID/stat.
func processState(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", fmt.Errorf("read stat of %d: %w", pid, err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "", fmt.Errorf("malformed stat of %d: %q", pid, s)
	}
	return s[i+2 : i+3], nil
}

func TestAttachDetach(t *testing.T) {
	stubPath(t)
	sleeper, cmd := startSleeper(t, "60")
	pid := cmd.Process.Pid
	time.Sleep(300 * time.Millisecond) // let it tick
	s := startStub(t, []string{"--once"}, "--attach", strconv.Itoa(pid))
	out := runGDB(t, gdbSession{program: sleeper, commands: []string{
		"target remote " + s.target(),
		"info threads",
		"backtrace",
		"print ticks > 0",
		"detach",
	}})
	mustContain(t, out, "in main (", "$1 = 1", "detached]")
	if !s.waitExit(10 * time.Second) {
		t.Errorf("stub did not exit after detach with --once")
	}
	// The sleeper keeps running: not a zombie, not stopped, ticks going.
	time.Sleep(300 * time.Millisecond)
	state, err := processState(pid)
	if err != nil {
		t.Fatalf("sleeper gone after detach: %v", err)
	}
	if state != "S" && state != "R" {
		t.Errorf("sleeper state after detach %q, want S or R", state)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("sleeper not alive after detach: %v", err)
	}
}

func TestExtendedRemote(t *testing.T) {
	stubPath(t)
	demo := buildProgram(t, "demo")
	s := startStub(t, []string{"--once", "--multi"})
	out := runGDB(t, gdbSession{program: demo, commands: []string{
		"target extended-remote " + s.target(),
		"set remote exec-file " + demo,
		"break demo_done",
		"run",
		"print call_count",
		"kill",
		"run",
		"print call_count",
		"kill",
		"monitor exit",
	}})
	if n := countMatches(out, `Breakpoint 1, demo_done \(\)`); n != 2 {
		t.Errorf("demo_done reached %d times, want 2 (one per run)", n)
	}
	mustContain(t, out, "$1 = 10", "$2 = 10")
	if !s.waitExit(10 * time.Second) {
		t.Errorf("stub did not exit after monitor exit")
	}
	if n := strings.Count(s.output.String(), "compute called 10 times"); n != 2 {
		t.Errorf("program output seen %d times, want 2", n)
	}
}

func TestVFileWithoutLocalProgram(t *testing.T) {
	stubPath(t)
	demo := buildProgram(t, "demo")
	s := startStub(t, []string{"--once"}, demo)
	out := runGDB(t, gdbSession{keepSysroot: true, commands: []string{
		"target remote " + s.target(),
		"info inferiors",
		"break main",
		"continue",
		"print greeting",
	}})
	mustContain(t, out, "Reading "+demo+" from remote target",
		"Breakpoint 1, main () at ", `"`+demoGreeting+`"`)
}

func TestMonitorCommands(t *testing.T) {
	stubPath(t)
	demo := buildProgram(t, "demo")
	s := startStub(t, []string{"--once"}, demo)
	out := runGDB(t, gdbSession{program: demo, commands: []string{
		"target remote " + s.target(),
		"monitor help",
		"monitor exit",
	}})
	// GDB's testsuite recognises gdbserver-like stubs by these lines.
	mustContain(t, out, "The following monitor commands are supported:", "exit")
	if !s.waitExit(10 * time.Second) {
		t.Errorf("stub still running 10s after monitor exit")
	}
}

// TestExec: a program that execs itself; gdb follows the new image (exec
// events), the breakpoint on main is hit in both images with the right
// argc, and the exit status arrives.
func TestExec(t *testing.T) {
	stubPath(t)
	prog := buildProgram(t, "execself")
	out, _ := debugSession(t, prog, nil,
		"break main", "catch exec", "continue", "print argc", "continue", "continue", "print argc", "continue")
	mustContain(t, out, "is executing new program:", "$1 = 1", "$2 = 2", "exited with code 07")
	mustMatch(t, out, `Catchpoint 2 \(exec'd .*execself\)`)
}

// TestForkEvents: fork and vfork seen by gdb as gdbserver shows them —
// catchpoints, the default follow-fork-mode parent (the child detached and
// running free of our breakpoints), follow-fork-mode child (the stub then
// debugs the child), and detach-on-fork off (the held child's registers
// and memory readable as inferior 2, then detached).
func TestForkEvents(t *testing.T) {
	stubPath(t)
	forks := buildProgram(t, "forks")
	tests := []struct {
		name     string
		commands []string
		want     []string
		// wantRe are regular expressions gdb's output must match.
		wantRe        []string
		programOutput []string
	}{
		{
			name: "catch fork and vfork, follow parent",
			commands: []string{"catch fork", "catch vfork", "break child_work", "break parent_work",
				"continue", "continue", "continue", "continue"},
			wantRe: []string{`Catchpoint 1 \(forked process \d+\)`, `\[Detaching after fork from child process \d+\]`,
				`Catchpoint 2 \(vforked process \d+\)`, `\[Detaching after vfork from child process \d+\]`},
			want: []string{"Breakpoint 4, parent_work (n=1)", "exited normally"},
			// The child ran through child_work's breakpoint without
			// trapping: the int3 was taken out of its memory.
			programOutput: []string{"child counter 1", "parent: child status 3 counter -1", "parent: vfork child status 4"},
		},
		{
			name:     "follow child",
			commands: []string{"set follow-fork-mode child", "break child_work", "continue", "bt", "print n", "continue"},
			wantRe:   []string{`\[Attaching after .* fork to child .*\]`, `\[Detaching after fork from parent process \d+\]`},
			want: []string{"hit Breakpoint 1, child_work (n=1)", "in main () at ", "$1 = 1",
				"exited with code 03"},
			programOutput: []string{"child counter 1", "parent: child status 3 counter -1"},
		},
		{
			name: "detach-on-fork off",
			// gdb adds inferior 2 when it resumes after the catchpoint
			// (stepi); the parent cannot finish while the child it waits
			// for is held, so the child is detached before continuing.
			commands: []string{"set detach-on-fork off", "catch fork", "continue", "stepi",
				"info inferiors", "inferior 2", "print counter", "print $pc == $pc", "info threads",
				"detach inferior 2", "inferior 1", "delete", "set detach-on-fork on", "continue"},
			wantRe: []string{`Catchpoint 1 \(forked process \d+\)`, `\[New inferior 2 \(process \d+\)\]`,
				`\n\s+2\s+process \d+`, `\[Switching to inferior 2 \[process \d+\]`,
				`\* 2\.1\s+Thread \d+\.\d+ "forks"`, `\[Inferior 2 \(process \d+\) detached\]`},
			want:          []string{"$1 = 0", "$2 = 1", "exited normally"},
			programOutput: []string{"child counter 1", "parent: child status 3 counter -1"},
		},
		{
			name: "detach-on-fork off, the child run while the parent is debugged",
			// Inferior 2 runs to its own breakpoint and exits while
			// inferior 1 stays stopped after its fork; then the parent
			// finishes, having seen the child's exit status.
			commands: []string{"set detach-on-fork off", "catch fork", "break child_work", "continue", "stepi",
				"inferior 2", "continue", "print n", "print counter", "continue",
				"inferior 1", "print counter", "delete", "set detach-on-fork on", "continue"},
			wantRe: []string{`\[New inferior 2 \(process \d+\)\]`, `\[Switching to inferior 2 \[process \d+\]`,
				`Thread 2\.1 "forks" hit Breakpoint 2(\.\d)?, child_work \(n=1\)`,
				`\[Inferior 2 \(process \d+\) exited with code 03\]`,
				`\[Switching to inferior 1 \[process \d+\]`},
			want:          []string{"$1 = 1", "$2 = 0", "$3 = 0", "exited normally"},
			programOutput: []string{"child counter 1", "parent: child status 3 counter -1"},
		},
		{
			name: "detach-on-fork off, schedule-multiple on",
			// Both processes run at each continue: the child stops at
			// its breakpoint (the parent, waiting for it, is
			// interrupted), then both exit, the vfork child included.
			commands: []string{"set detach-on-fork off", "set schedule-multiple on", "break child_work",
				"continue", "print n", "info inferiors", "continue", "inferior 1", "continue", "inferior 1", "continue"},
			wantRe: []string{`\[New inferior 2 \(process \d+\)\]`,
				`Thread 2\.1 "forks" hit Breakpoint 1(\.\d)?, child_work \(n=1\)`,
				`\[Inferior 2 \(process \d+\) exited with code 03\]`,
				`\[Inferior 3 \(process \d+\) exited with code 04\]`,
				`\[Inferior 1 \(process \d+\) exited normally\]`},
			want:          []string{"$1 = 1"},
			programOutput: []string{"child counter 1", "parent: child status 3 counter -1", "parent: vfork child status 4"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stub := debugSession(t, forks, nil, tt.commands...)
			for _, re := range tt.wantRe {
				mustMatch(t, out, re)
			}
			mustContain(t, out, tt.want...)
			stub.waitExit(10 * time.Second)
			mustContain(t, stub.output.String(), tt.programOutput...)
		})
	}
}

// startSleeper runs testdata/sleeper for the attach tests and returns it
// once it has printed its pid.
func startSleeper(t *testing.T, seconds string) (string, *exec.Cmd) {
	t.Helper()
	sleeper := buildProgram(t, "sleeper")
	cmd := exec.Command(sleeper, seconds)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("stdout pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleeper: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, fmt.Sprintf("sleeper pid %d", cmd.Process.Pid)) {
		t.Fatalf("sleeper's first line %q, %v", line, err)
	}
	return sleeper, cmd
}

// TestAttachContinueInterruptDetach: after --attach the first stop is
// reported as signal 0 (T00, like gdbserver), so gdb's continue passes no
// SIGSTOP: the program runs (its ticks advance), stops on an interrupt,
// and runs on after detach, never left stopped.
func TestAttachContinueInterruptDetach(t *testing.T) {
	requireTools(t)
	sleeper, cmd := startSleeper(t, "60")
	pid := cmd.Process.Pid
	s := startStub(t, []string{"--once"}, "--attach", strconv.Itoa(pid))
	g := startMI(t, sleeper)
	g.mustDo("-target-select remote " + s.target())
	ticks := func() int {
		t.Helper()
		res, _ := g.do("-data-evaluate-expression ticks")
		m := regexp.MustCompile(`value="(\d+)"`).FindStringSubmatch(res)
		if m == nil {
			t.Fatalf("ticks: %s", res)
		}
		return atoi(t, m[1])
	}
	before := ticks()
	if res, _ := g.do("-exec-continue"); !strings.HasPrefix(res, "^running") {
		t.Fatalf("continue: %s", res)
	}
	time.Sleep(600 * time.Millisecond)
	if state, _ := processState(pid); state == "T" || state == "t" {
		t.Fatalf("the program is stopped (state %s) after continue: gdb passed it a SIGSTOP", state)
	}
	g.mustDo("-exec-interrupt")
	stop, ok := g.waitStopped(10 * time.Second)
	if !ok || !strings.Contains(stop, "SIGINT") {
		t.Fatalf("interrupt: %q", stop)
	}
	if after := ticks(); after < before+3 {
		t.Errorf("ticks %d before continue, %d after 600 ms of running", before, after)
	}
	g.mustDo("detach")
	time.Sleep(300 * time.Millisecond)
	if state, err := processState(pid); err != nil || (state != "S" && state != "R") {
		t.Errorf("sleeper state after detach %q (%v), want S or R", state, err)
	}
}

// Breakpoint conditions evaluated by the stub (ConditionalBreakpoints,
// gdb's default `breakpoint condition-evaluation auto` then uses the
// target): the program stops once, at the hit whose condition is true,
// and the stub sends one stop reply where host evaluation needs one per
// call.
func TestConditionalBreakpointOnTarget(t *testing.T) {
	prog := buildC(t, filepath.Join(t.TempDir(), "trace"), []string{"trace.c"})
	stub := startStub(t, []string{"--once"}, prog, "10")
	script := strings.Join([]string{
		"target remote " + stub.target(),
		"break main",
		"continue",
		"break traced_function if n == 7",
		"show breakpoint condition-evaluation",
		"set debug remote 1",
		"continue",
		"set debug remote 0",
		"print n",
		"info breakpoints",
		"kill",
	}, "\n")
	out := runGDB(t, gdbSession{program: prog, commands: []string{script}})
	mustMatch(t, out, `Z0,[0-9a-f]+,[0-9a-f]+;X[0-9a-f]+,`)
	// (gdb's remote debugging output may come between the words.)
	mustMatch(t, out, `Breakpoint 2, (?s:.*?)traced_function \((?s:.*?)n=7, `)
	mustContain(t, out, "$1 = 7", "breakpoint already hit 1 time")
	// (gdb first steps off main's breakpoint: that stop has no swbreak.)
	if n := regexp.MustCompile(`Packet received: T05[^\n]*swbreak`).FindAllString(out, -1); len(n) != 1 {
		t.Errorf("%d breakpoint stop replies, want 1 (the stub skipped the false hits)", len(n))
	}
}
