package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tracefsRoot is where the kernel's trace file system is mounted.
const tracefsRoot = "/sys/kernel/tracing"

// schedTrace records the kernel's scheduler events for the threads of
// a program (by name) in a tracefs instance of its own: when a thread
// stops under ptrace (sched_switch, prev_state t) and when it is woken
// again (sched_waking, the tracer's resume). That is an exact measure,
// made by the kernel and not by the stub, of how long each ptrace stop
// lasted (time spent runnable afterwards, waiting for a CPU, is the
// scheduler's and not counted). The test's markers (mark) delimit what
// it measures.
type schedTrace struct {
	dir string
}

// startSchedTrace starts recording the scheduler events of the threads
// named comm. It fails where tracefs cannot be used (not root, not
// mounted and not mountable).
func startSchedTrace(comm string) (*schedTrace, error) {
	if _, err := os.Stat(filepath.Join(tracefsRoot, "instances")); err != nil {
		return nil, fmt.Errorf("no tracefs at %s: %w", tracefsRoot, err)
	}
	dir := filepath.Join(tracefsRoot, "instances", fmt.Sprintf("gotpstub-e2e-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("making a tracefs instance: %w", err)
	}
	s := &schedTrace{dir: dir}
	for _, w := range []struct{ file, value string }{
		{"trace_clock", "mono"},     // one clock for every CPU
		{"buffer_size_kb", "65536"}, // per CPU: 200 cycles of nine threads at a trap
		{"events/sched/sched_switch/filter", fmt.Sprintf("prev_comm == %q", comm)},
		{"events/sched/sched_waking/filter", fmt.Sprintf("comm == %q", comm)},
		{"events/sched/sched_switch/enable", "1"},
		{"events/sched/sched_waking/enable", "1"},
	} {
		if err := os.WriteFile(filepath.Join(dir, w.file), []byte(w.value), 0); err != nil {
			s.close()
			return nil, fmt.Errorf("tracefs %s: %w", w.file, err)
		}
	}
	return s, nil
}

// mark writes text into the trace, between the events around it.
func (s *schedTrace) mark(text string) {
	_ = os.WriteFile(filepath.Join(s.dir, "trace_marker"), []byte(text), 0)
}

// stop ends the recording and reads it.
func (s *schedTrace) stop() ([]schedEvent, error) {
	if err := os.WriteFile(filepath.Join(s.dir, "tracing_on"), []byte("0"), 0); err != nil {
		return nil, fmt.Errorf("tracefs tracing_on: %w", err)
	}
	f, err := os.Open(filepath.Join(s.dir, "trace"))
	if err != nil {
		return nil, fmt.Errorf("tracefs trace: %w", err)
	}
	defer f.Close()
	if dump := os.Getenv("GOTPSTUB_DUMP_SCHED"); dump != "" {
		if b, err := os.ReadFile(f.Name()); err == nil {
			_ = os.WriteFile(dump, b, 0o644)
		}
	}
	return parseSchedTrace(bufio.NewScanner(f))
}

// close removes the tracefs instance.
func (s *schedTrace) close() {
	_ = os.WriteFile(filepath.Join(s.dir, "tracing_on"), []byte("0"), 0)
	for i := 0; i < 50 && os.Remove(s.dir) != nil; i++ {
		time.Sleep(10 * time.Millisecond) // a reader may still hold it
	}
}

// schedEvent is one line of the trace.
type schedEvent struct {
	at     time.Duration // CLOCK_MONOTONIC
	kind   string        // sched_switch, sched_waking, tracing_mark_write
	tid    int           // the thread that switched out or was woken
	traced bool          // a switch out into a ptrace stop
	text   string        // a marker's text
}

var (
	schedLine   = regexp.MustCompile(`\s(\d+)\.(\d{6}): (sched_switch|sched_waking|tracing_mark_write): (.*)$`)
	switchOut   = regexp.MustCompile(`prev_pid=(\d+) .*prev_state=(\S+)`)
	wakeupOfTid = regexp.MustCompile(`\spid=(\d+)`)
)

// parseSchedTrace reads tracefs's text output.
func parseSchedTrace(sc *bufio.Scanner) ([]schedEvent, error) {
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []schedEvent
	for sc.Scan() {
		m := schedLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue // a comment, a lost-events note
		}
		sec, _ := strconv.ParseInt(m[1], 10, 64)
		usec, _ := strconv.ParseInt(m[2], 10, 64)
		e := schedEvent{at: time.Duration(sec)*time.Second + time.Duration(usec)*time.Microsecond, kind: m[3]}
		switch e.kind {
		case "sched_switch":
			sw := switchOut.FindStringSubmatch(m[4])
			if sw == nil {
				continue
			}
			e.tid, _ = strconv.Atoi(sw[1])
			e.traced = strings.HasPrefix(sw[2], "t")
		case "sched_waking":
			w := wakeupOfTid.FindStringSubmatch(" " + m[4])
			if w == nil {
				continue
			}
			e.tid, _ = strconv.Atoi(w[1])
		default:
			e.text = m[4]
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// ptraceStop is one thread's stop under ptrace, from its switch out to
// its wakeup, and the marked span it began in ("" for none).
type ptraceStop struct {
	tid   int
	took  time.Duration
	span  string
	after time.Duration // from the span's beginning to the stop's
}

// ptraceStops pairs each switch out into a ptrace stop with the
// thread's next wakeup. Markers "begin NAME" and "end NAME" delimit
// spans; a stop is in the span it began in. Stops not over when the
// trace ends are left out, and those of the threads in held (which gdb
// keeps stopped: the stub resumes them only to make system calls).
func ptraceStops(events []schedEvent, held []int) []ptraceStop {
	var out []ptraceStop
	since := map[int]ptraceStop{} // took: when it began
	span, begun := "", time.Duration(0)
	for _, e := range events {
		switch {
		case e.kind == "tracing_mark_write":
			if name, ok := strings.CutPrefix(e.text, "begin "); ok {
				span, begun = name, e.at
			} else if strings.HasPrefix(e.text, "end ") {
				span = ""
			}
		case e.kind == "sched_switch" && e.traced && !slices.Contains(held, e.tid):
			s := ptraceStop{tid: e.tid, took: e.at, span: span}
			if span != "" {
				s.after = e.at - begun
			}
			since[e.tid] = s
		case e.kind == "sched_waking":
			if s, ok := since[e.tid]; ok {
				s.took = e.at - s.took
				out = append(out, s)
				delete(since, e.tid)
			}
		}
	}
	return out
}

// spanStops sums up, per span name (the name up to its first space),
// the longest ptrace stop of any thread in each span, with every span
// begun counted (one without a stop counts as 0).
func spanStops(events []schedEvent, held []int) map[string][]time.Duration {
	longest := map[string]time.Duration{} // by full span name
	for _, e := range events {
		if name, ok := strings.CutPrefix(e.text, "begin "); ok && e.kind == "tracing_mark_write" {
			longest[name] = 0
		}
	}
	for _, s := range ptraceStops(events, held) {
		if s.span != "" {
			longest[s.span] = max(longest[s.span], s.took)
		}
	}
	out := map[string][]time.Duration{}
	for name, d := range longest {
		kind, _, _ := strings.Cut(name, " ")
		out[kind] = append(out[kind], d)
	}
	return out
}

// summarizeSpanStops prints spanStops: per kind, the median, 90th
// percentile and maximum of the longest stop per span, and how many
// spans had a stop over 1 ms; then the stops outside any span. The
// threads in held are left out (ptraceStops).
func summarizeSpanStops(events []schedEvent, held []int) string {
	var out []string
	for kind, ds := range spanStops(events, held) {
		slices.Sort(ds)
		over := len(ds) - sortedCountAtMost(ds, time.Millisecond)
		out = append(out, fmt.Sprintf("%s: longest ptrace stop of a thread median %d µs, 90th percentile %d µs, max %d µs, %d of %d over 1 ms",
			kind, ds[len(ds)/2].Microseconds(), ds[len(ds)*9/10].Microseconds(), ds[len(ds)-1].Microseconds(), over, len(ds)))
	}
	slices.Sort(out)
	var outside []time.Duration
	var long []string
	for _, s := range ptraceStops(events, held) {
		if s.span == "" {
			outside = append(outside, s.took)
		}
		if s.took > time.Millisecond {
			long = append(long, fmt.Sprintf("thread %d %d µs in %q %d µs after its beginning", s.tid, s.took.Microseconds(), s.span, s.after.Microseconds()))
		}
	}
	if len(outside) > 0 {
		slices.Sort(outside)
		out = append(out, fmt.Sprintf("outside them: %d stops, median %d µs, max %d µs",
			len(outside), outside[len(outside)/2].Microseconds(), outside[len(outside)-1].Microseconds()))
	}
	if len(long) > 0 {
		out = append(out, "over 1 ms: "+strings.Join(long, ", "))
	}
	return strings.Join(out, "; ")
}

// sortedCountAtMost counts the durations in sorted ds that are ≤ d.
func sortedCountAtMost(ds []time.Duration, d time.Duration) int {
	n, _ := slices.BinarySearch(ds, d+1)
	return n
}

// TestSchedTraceStops: tracefs lines become ptrace stops, each from its
// thread's switch out in state t to its next waking, in the span it
// began in; other switches, held threads and stops never ended are left
// out.
func TestSchedTraceStops(t *testing.T) {
	const trace = `# tracer: nop
        e2e.test-10    [000] ...1. 100.000100: tracing_mark_write: begin tstart 0
         stress8-21    [001] d..2. 100.000200: sched_switch: prev_comm=stress8 prev_pid=21 prev_prio=120 prev_state=t ==> next_comm=swapper/1 next_pid=0 next_prio=120
         stress8-22    [001] d..2. 100.000210: sched_switch: prev_comm=stress8 prev_pid=22 prev_prio=120 prev_state=R ==> next_comm=stress8 next_pid=23 next_prio=120
         stress8-20    [000] d..2. 100.000220: sched_switch: prev_comm=stress8 prev_pid=20 prev_prio=120 prev_state=t ==> next_comm=swapper/0 next_pid=0 next_prio=120
        gotpstub-30    [000] d..4. 100.001700: sched_waking: comm=stress8 pid=21 prio=120 target_cpu=001
        gotpstub-30    [000] d..4. 100.001800: sched_waking: comm=stress8 pid=22 prio=120 target_cpu=001
        e2e.test-10    [000] ...1. 100.002000: tracing_mark_write: end tstart 0
         stress8-23    [001] d..2. 100.003000: sched_switch: prev_comm=stress8 prev_pid=23 prev_prio=120 prev_state=t ==> next_comm=swapper/1 next_pid=0 next_prio=120
        gotpstub-30    [000] d..4. 100.003050: sched_waking: comm=stress8 pid=23 prio=120 target_cpu=001
        gotpstub-30    [000] d..4. 100.003060: sched_waking: comm=stress8 pid=20 prio=120 target_cpu=001
        e2e.test-10    [000] ...1. 100.004000: tracing_mark_write: begin tstop 0
         stress8-24    [001] d..2. 100.004100: sched_switch: prev_comm=stress8 prev_pid=24 prev_prio=120 prev_state=t ==> next_comm=swapper/1 next_pid=0 next_prio=120
        e2e.test-10    [000] ...1. 100.005000: tracing_mark_write: end tstop 0
`
	events, err := parseSchedTrace(bufio.NewScanner(strings.NewReader(trace)))
	if err != nil {
		t.Fatal(err)
	}
	got := ptraceStops(events, []int{20})
	want := []ptraceStop{
		{tid: 21, took: 1500 * time.Microsecond, span: "tstart 0", after: 100 * time.Microsecond},
		{tid: 23, took: 50 * time.Microsecond},
	}
	if !slices.Equal(got, want) {
		t.Errorf("stops %+v, want %+v", got, want)
	}
	spans := spanStops(events, []int{20})
	if fmt.Sprint(spans["tstart"]) != "[1.5ms]" || fmt.Sprint(spans["tstop"]) != "[0s]" {
		t.Errorf("longest stop per span %v, want tstart [1.5ms] and tstop [0s]", spans)
	}
}

// FuzzParseSchedTrace: any text parses without a panic, and the stops
// found from it have no negative length unless the clock went back.
func FuzzParseSchedTrace(f *testing.F) {
	f.Add("  x-1 [000] d..2. 1.000001: sched_switch: prev_comm=x prev_pid=1 prev_prio=1 prev_state=t ==> next_comm=y next_pid=0\n  y-2 [000] d..2. 1.000002: sched_waking: comm=x pid=1 prio=1\n")
	f.Add("  e-1 [000] ...1. 1.000000: tracing_mark_write: begin a 1\n")
	f.Fuzz(func(t *testing.T, text string) {
		events, err := parseSchedTrace(bufio.NewScanner(strings.NewReader(text)))
		if err != nil {
			return // a line over the scanner's limit
		}
		monotonic := slices.IsSortedFunc(events, func(a, b schedEvent) int { return int(a.at - b.at) })
		for _, s := range ptraceStops(events, nil) {
			if monotonic && s.took < 0 {
				t.Fatalf("stop %+v of negative length from ordered events", s)
			}
		}
		_ = summarizeSpanStops(events, nil)
	})
}
