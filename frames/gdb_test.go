package frames

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tracedProgram is the C program the gdb tests trace or inspect.
const tracedProgram = `#include <stdio.h>
int glob[4] = {1,2,3,4};
volatile long counter;
void traced(int i) { counter += i; glob[i & 3] += i; }
void done(void) { counter = -1; }
void stop_here(void) {}
int main(void)
{
  for (int i = 0; i < 5; i++)
    traced(i);
  done();
  stop_here();
  return 0;
}
`

// needTools skips the test unless every named program is installed.
func needTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("%s not installed", n)
		}
	}
}

// buildTraced compiles tracedProgram into dir and returns its path.
func buildTraced(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "traced.c")
	if err := os.WriteFile(src, []byte(tracedProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "traced")
	if out, err := exec.Command("gcc", "-g", "-O0", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return prog
}

// runGDB runs gdb in batch mode with the given -ex commands.
func runGDB(t *testing.T, dir string, cmds ...string) string {
	t.Helper()
	args := []string{"-batch", "-nx"}
	for _, c := range cmds {
		args = append(args, "-ex", c)
	}
	cmd := exec.Command("gdb", args...)
	cmd.Dir = dir
	timer := time.AfterFunc(60*time.Second, func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb %q: %v\n%s", cmds, err, out)
	}
	return string(out)
}

// regLayout is what gdb's "maint print remote-registers" says about the
// g packet of an executable's architecture.
type regLayout struct {
	gSize   int
	offsets map[string]int
}

func remoteRegisters(t *testing.T, out string) regLayout {
	t.Helper()
	l := regLayout{offsets: map[string]int{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// Name Nr Rel Offset Size Type RmtNr gOffset
		if len(f) != 8 {
			continue
		}
		size, err1 := strconv.Atoi(f[4])
		goff, err2 := strconv.Atoi(f[7])
		if err1 != nil || err2 != nil {
			continue
		}
		l.offsets[f[0]] = goff
		l.gSize = max(l.gSize, goff+size)
	}
	if l.gSize == 0 {
		t.Fatalf("no registers in gdb output:\n%s", out)
	}
	return l
}

var (
	addrRE  = regexp.MustCompile(`\) (0x[0-9a-f]+) <(\w+)>`)
	breakRE = regexp.MustCompile(`Breakpoint \d+ at 0x([0-9a-f]+): file `)
)

func symbolAddrs(t *testing.T, out string) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	for _, sm := range addrRE.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseUint(sm[1][2:], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		m[sm[2]] = v
	}
	return m
}

// TestGDBReadsOurTFile writes a tfile for a gcc-built program and has the
// real gdb open it with "target tfile": status, frame selection, registers,
// collected memory and variables must come back as written.
func TestGDBReadsOurTFile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gdb")
	}
	needTools(t, "gdb", "gcc")
	dir := t.TempDir()
	prog := buildTraced(t, dir)
	out := runGDB(t, dir, "file "+prog, "maint print remote-registers",
		"print &glob", "break traced", "break done")
	layout := remoteRegisters(t, out)
	syms := symbolAddrs(t, out)
	// Tracepoints go where gdb puts them: after the prologue.
	bps := breakRE.FindAllStringSubmatch(out, -1)
	if len(bps) != 2 {
		t.Fatalf("want 2 breakpoint addresses in gdb output:\n%s", out)
	}
	for i, name := range []string{"traced", "done"} {
		v, err := strconv.ParseUint(bps[i][1], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		syms[name] = v
	}
	ripOff, ok := layout.offsets["rip"]
	raxOff, ok2 := layout.offsets["rax"]
	if !ok || !ok2 || syms["glob"] == 0 {
		t.Fatalf("could not learn layout/symbols from gdb:\n%s", out)
	}

	b := NewBuffer(DefaultSize)
	for i := 0; i < 3; i++ {
		f := b.NewFrame(1)
		r := make([]byte, layout.gSize)
		putU64(r[ripOff:], syms["traced"])
		putU64(r[raxOff:], uint64(100+i))
		f.AddRegisters(r)
		var g []byte
		for k := 0; k < 4; k++ {
			g = appendU32(g, uint32(10*i+k))
		}
		f.AddMemory(syms["glob"], g)
		f.AddTSV(1, int64(1000+i))
		f.SetFallbackPC(syms["traced"])
		if err := b.Commit(f); err != nil {
			t.Fatal(err)
		}
	}
	f := b.NewFrame(2)
	f.AddMemory(syms["glob"], []byte{7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 6, 0, 0, 0})
	if err := b.Commit(f); err != nil {
		t.Fatal(err)
	}
	hexs := func(s string) string { return hex.EncodeToString([]byte(s)) }
	tp := func(num int, addr uint64, at string, cmds ...string) []string {
		out := []string{
			fmt.Sprintf("T%x:%x:E:0:0", num, addr),
			fmt.Sprintf("Z%x:%x:at:0:%x:%s", num, addr, len(at), hexs(at)),
		}
		for _, c := range cmds {
			out = append(out, fmt.Sprintf("Z%x:%x:cmd:0:%x:%s", num, addr, len(c), hexs(c)))
		}
		return out
	}
	h := TFileHeader{
		RegBlockSize: layout.gSize,
		Status: fmt.Sprintf("0;tstop::0;tframes:%x;tcreated:%x;tfree:%x;tsize:%x;circular:0;disconn:0",
			b.Count(), b.Created(), b.Free(), b.Size()),
		TSVs:        []string{"1:0:0:" + hexs("hits")},
		Tracepoints: append(tp(1, syms["traced"], "traced", "collect $regs, glob, $hits"), tp(2, syms["done"], "done", "collect glob")...),
		TracepointStatus: func(num int, addr uint64) string {
			return map[int]string{1: "V3:0", 2: "V1:0"}[num]
		},
	}
	file := filepath.Join(dir, "ours.tf")
	var buf bytes.Buffer
	if err := WriteTFile(&buf, h, b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out = runGDB(t, dir, "file "+prog, "target tfile "+file, "tstatus",
		"tfind 0", "info registers rip", "print $rax", "print glob", "print $hits", "tdump",
		"tfind 2", "print glob", "print $hits",
		"tfind tracepoint 2", "print glob",
		// Not "tfind pc": gdb 13's tfile target loses its file position
		// there ("Premature end of file") even on files gdb wrote itself.
		"info tracepoints")
	t.Logf("gdb output:\n%s", out)
	for _, want := range []string{
		"Collected 4 trace frames.",
		fmt.Sprintf("rip            %#x", syms["traced"]),
		"$1 = 100",
		"$2 = {0, 1, 2, 3}",
		"$3 = 1000",
		"Data collected at tracepoint 1, trace frame 0:",
		"glob = {0, 1, 2, 3}",
		"$hits = 1000",
		"$4 = {20, 21, 22, 23}",
		"$5 = 1002",
		"Found trace frame 3, tracepoint 2",
		"$6 = {7, 8, 9, 6}",
		"Found trace frame 0, tracepoint 1",
		"collect $regs, glob, $hits",
		"tracepoint already hit 3 times",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("gdb output lacks %q", want)
		}
	}
}

func putU64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

func appendU32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

// TestTSaveMatchesLiveGDBServer runs a real tracing session against
// gdbserver, lets gdb's tsave write a tfile while logging the packets, and
// checks WriteTFile writes the same bytes from the same replies and frames.
func TestTSaveMatchesLiveGDBServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gdb and gdbserver")
	}
	needTools(t, "gdb", "gdbserver", "gcc")
	dir := t.TempDir()
	prog := buildTraced(t, dir)
	saved := filepath.Join(dir, "gdb.tf")
	script := strings.Join([]string{
		"set pagination off",
		"target remote | gdbserver - " + prog,
		"break main",
		"continue",
		"delete",
		"tvariable $hits = 7",
		"trace traced",
		"actions",
		"collect $regs, glob, counter, $hits",
		"teval $hits = $hits + 1",
		"end",
		"trace done",
		"actions",
		"collect glob",
		"end",
		"break stop_here",
		"tstart",
		"continue",
		"tstop",
		"set debug remote 1",
		"tsave " + saved,
		"set debug remote 0",
		"kill",
	}, "\n") + "\n"
	scriptPath := filepath.Join(dir, "session.gdb")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runGDB(t, dir, "source "+scriptPath)
	want, err := os.ReadFile(saved)
	if err != nil {
		t.Fatalf("gdb did not save a trace file: %v\n%s", err, out)
	}
	tf, err := ReadTFile(bytes.NewReader(want))
	if err != nil {
		t.Fatalf("ReadTFile(gdb's file): %v", err)
	}
	if len(tf.Frames) != 6 {
		t.Fatalf("gdb's file has %d frames, want 6 (5 hits of traced, 1 of done)", len(tf.Frames))
	}
	replies := filepath.Join(dir, "replies")
	if err := os.WriteFile(replies, []byte(repliesFromRemoteLog(t, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	h := repliesHeader(t, replies, tf.RegBlockSize)
	h.TDesc = tf.TDesc // what gdb fetched, with includes expanded
	b := rebuild(t, tf.Frames, DefaultSize)
	var got bytes.Buffer
	if err := WriteTFile(&got, h, b); err != nil {
		t.Fatalf("WriteTFile: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		i := 0
		g := got.Bytes()
		for i < len(g) && i < len(want) && g[i] == want[i] {
			i++
		}
		t.Fatalf("WriteTFile differs from gdb's tsave at byte %d:\n got %q\nwant %q",
			i, g[max(0, i-60):min(len(g), i+60)], want[max(0, i-60):min(len(want), i+60)])
	}
}

var (
	sentRE     = regexp.MustCompile(`^\[remote\] Sending packet: \$(.*)#[0-9a-f]{2}$`)
	receivedRE = regexp.MustCompile(`^\[remote\] Packet received: (.*)$`)
)

// repliesFromRemoteLog extracts the replies tsave used from gdb's
// "set debug remote 1" log, in the format repliesHeader reads.
func repliesFromRemoteLog(t *testing.T, log string) string {
	t.Helper()
	var sb strings.Builder
	lastSent := ""
	for _, line := range strings.Split(log, "\n") {
		if m := sentRE.FindStringSubmatch(line); m != nil {
			lastSent = m[1]
			continue
		}
		m := receivedRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		reply := m[1]
		switch {
		case lastSent == "qTStatus":
			fmt.Fprintf(&sb, "status %s\n", strings.TrimPrefix(reply, "T"))
		case (lastSent == "qTfV" || lastSent == "qTsV") && reply != "l":
			fmt.Fprintf(&sb, "tsv %s\n", reply)
		case (lastSent == "qTfP" || lastSent == "qTsP") && reply != "l":
			fmt.Fprintf(&sb, "tp %s\n", reply)
		case strings.HasPrefix(lastSent, "qTP:"):
			fmt.Fprintf(&sb, "qtp %s %s\n", strings.TrimPrefix(lastSent, "qTP:"), reply)
		}
		lastSent = ""
	}
	if !strings.Contains(sb.String(), "status ") {
		t.Fatalf("no qTStatus reply in gdb's remote log:\n%s", log)
	}
	return sb.String()
}
