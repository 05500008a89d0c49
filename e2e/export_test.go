package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A traced session saved with tsave -r and exported: JSON Lines with a
// time for every frame (fast and trap frames alike, within the session,
// in order per tracepoint), $trace_timestamp collected in the pad (the
// fast tracepoint keeps its jump) agreeing with the frame's time, and a
// CTF trace babeltrace2 reads (issue 10, items 1 and 3).
func TestExportSavedTrace(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver has no QTSave (tsave -r)")
	}
	prog := buildProgram(t, "trace")
	dir := t.TempDir()
	tf := filepath.Join(dir, "run.tf")
	before := time.Now().UnixNano()
	out, stub := fastSession(t, prog, []string{strconv.Itoa(traceIterations)}, `
ftrace traced_function
actions
collect n, $trace_timestamp
end
trace trace_done
actions
collect $regs
end`, "trace_done", "tsave -r "+tf)
	after := time.Now().UnixNano()
	mustPlaceJump(t, stub, 2)
	frames := framesCollected(t, out)
	if frames != traceIterations+1 {
		t.Fatalf("%d frames, want %d", frames, traceIterations+1)
	}
	lines := exportJSON(t, tf)
	if len(lines) != frames {
		t.Fatalf("%d JSON lines for %d frames", len(lines), frames)
	}
	last := map[int64]int64{}
	for _, m := range lines {
		tp, _ := num(m["tracepoint"])
		ns, ok := num(m["time_ns"])
		if !ok || ns < before || ns > after {
			t.Errorf("frame %v: time %v outside the session [%d, %d]", m["frame"], m["time_ns"], before, after)
			continue
		}
		if ns < last[tp] {
			t.Errorf("frame %v of tracepoint %v: time %v before the previous frame's %v", m["frame"], tp, ns, last[tp])
		}
		last[tp] = ns
		if tp == 2 {
			tsvs, _ := m["tsvs"].(map[string]any)
			us, _ := num(tsvs["$trace_timestamp"])
			if us*1000 > ns || ns-us*1000 >= 1000 {
				t.Errorf("frame %v: $trace_timestamp %v µs, frame time %v ns", m["frame"], us, ns)
			}
		}
		if tp == 3 {
			regs, _ := m["registers"].(map[string]any)
			if regs["rip"] == nil || regs["rip"] != m["pc"] {
				t.Errorf("frame %v: pc %v, rip %v", m["frame"], m["pc"], regs["rip"])
			}
		}
	}
	pf := filepath.Join(dir, "run.pftrace")
	if b, err := exec.Command(stubPath(t), "export", "--format", "perfetto", "-o", pf, tf).CombinedOutput(); err != nil {
		t.Fatalf("gotpstub export --format perfetto: %v\n%s", err, b)
	}
	if st, err := os.Stat(pf); err != nil || st.Size() < int64(frames)*20 {
		t.Errorf("Perfetto trace: %v, %v", st, err)
	}
	ctf := filepath.Join(dir, "run.ctf")
	if b, err := exec.Command(stubPath(t), "export", "--format", "ctf", "-o", ctf, tf).CombinedOutput(); err != nil {
		t.Fatalf("gotpstub export --format ctf: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(ctf, "metadata")); err != nil {
		t.Fatal(err)
	}
	bt, err := exec.LookPath("babeltrace2")
	if err != nil {
		t.Skip("babeltrace2 is not installed: the CTF trace is not read back")
	}
	b, err := exec.Command(bt, ctf).CombinedOutput()
	if err != nil {
		t.Fatalf("babeltrace2: %v\n%s", err, b)
	}
	if n := strings.Count(string(b), "\n"); n != frames {
		t.Errorf("babeltrace2 printed %d events for %d frames:\n%s", n, frames, b)
	}
	mustContain(t, string(b), `{ tracepoint = 2,`, `frame_regs: { tracepoint = 3,`, `location = "traced_function"`)
}

// exportJSON runs gotpstub export --format json on the trace file tf and
// returns its lines, numbers kept whole (json.Number).
func exportJSON(t *testing.T, tf string) []map[string]any {
	t.Helper()
	js, err := exec.Command(stubPath(t), "export", "--format", "json", tf).Output()
	if err != nil {
		t.Fatalf("gotpstub export --format json: %v", err)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(js)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		d := json.NewDecoder(strings.NewReader(sc.Text()))
		d.UseNumber() // nanoseconds since 1970 need all 64 bits
		if err := d.Decode(&m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

// num returns the integer of a json.Number.
func num(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// A fast tracepoint that collects nothing writes compact records (one
// word: the time stamp's low 48 bits, the thread implied by the lane):
// its frames still get whole times, within the session and in hit
// order, when saved and exported.
func TestCompactRecordTimes(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver has no QTSave (tsave -r)")
	}
	prog := buildProgram(t, "trace")
	tf := filepath.Join(t.TempDir(), "run.tf")
	before := time.Now().UnixNano()
	out, stub := fastSession(t, prog, []string{strconv.Itoa(traceIterations)}, `
ftrace traced_function`, "trace_done", "tsave -r "+tf)
	after := time.Now().UnixNano()
	mustPlaceJump(t, stub, 2)
	if !regexp.MustCompile(`tracepoint 2 at 0x[0-9a-f]+: .*8-byte records`).MatchString(stub.output.String()) {
		t.Fatalf("the tracepoint does not write compact records:\n%s", stub.output.String())
	}
	if frames := framesCollected(t, out); frames != traceIterations {
		t.Fatalf("%d frames, want %d", frames, traceIterations)
	}
	lines := exportJSON(t, tf)
	if len(lines) != traceIterations {
		t.Fatalf("%d JSON lines, want %d", len(lines), traceIterations)
	}
	last := int64(0)
	for _, m := range lines {
		ns, ok := num(m["time_ns"])
		if !ok || ns < before || ns > after || ns < last {
			t.Fatalf("frame %v: time %v, want within [%d, %d] and after %d", m["frame"], m["time_ns"], before, after, last)
		}
		last = ns
	}
}
