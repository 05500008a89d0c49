package inferior

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseSchedstat(t *testing.T) {
	cases := []struct {
		in        string
		run, wait time.Duration
		ok        bool
	}{
		{"123 456 7\n", 123, 456, true},
		{"0 0 0\n", 0, 0, true},
		{"123\n", 0, 0, false},
		{"", 0, 0, false},
		{"x 1 2\n", 0, 0, false},
		{"-1 1 2\n", 0, 0, false},
	}
	for _, c := range cases {
		run, wait, ok := parseSchedstat(c.in)
		if run != c.run || wait != c.wait || ok != c.ok {
			t.Errorf("%q: %v %v %v, want %v %v %v", c.in, run, wait, ok, c.run, c.wait, c.ok)
		}
	}
}

func FuzzParseSchedstat(f *testing.F) {
	f.Add("123 456 7\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		run, wait, ok := parseSchedstat(s)
		if !ok && (run != 0 || wait != 0) || run < 0 || wait < 0 {
			t.Fatalf("%q: %v %v %v", s, run, wait, ok)
		}
	})
}

// TestSchedstatOfStoppedThread: a stopped thread's clocks stand still
// (what int3Hold relies on), and the files of threads gone are closed.
func TestSchedstatOfStoppedThread(t *testing.T) {
	p := launch(t, "threads")
	runToMain(t, p)
	tid := p.Pid()
	var first, second time.Duration
	if err := p.do(func() error {
		first = p.schedClock(tid)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_ = p.do(func() error {
		second = p.schedClock(tid)
		return nil
	})
	if first <= 0 || second != first {
		t.Errorf("stopped thread's clock %v then %v", first, second)
	}
	// The self-test: a running thread's clock moves.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := unix.Gettid()
	q := &Process{pid: os.Getpid()}
	a := q.schedClock(self)
	for end := time.Now().Add(5 * time.Millisecond); time.Now().Before(end); {
	}
	if b := q.schedClock(self); a < 0 || b <= a {
		t.Errorf("running thread's clock %v then %v", a, b)
	}
	q.schedFds.keepOnly(nil)
	if len(q.schedFds) != 0 {
		t.Errorf("files left open: %v", q.schedFds)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited {
		t.Errorf("end %+v", ev)
	}
}
