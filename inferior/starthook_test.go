package inferior

import (
	"sync"
	"testing"
)

// startRecorder is a thread start hook that records each call.
type startRecorder struct {
	mu     sync.Mutex
	tids   []int
	fs     []uint64
	rax    []uint64
	errors []error
}

func (r *startRecorder) hook(s *Stopped) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tids = append(r.tids, s.Tid())
	regs, err := s.Registers()
	r.errors = append(r.errors, err)
	if err != nil {
		r.fs, r.rax = append(r.fs, 0), append(r.rax, 0)
		return
	}
	r.fs = append(r.fs, regs.Uint64(regThreadOwn))
	r.rax = append(r.rax, regs.Uint64(regRet))
}

// TestThreadStartHook: the hook runs once for each of the four threads
// the program creates, on the new thread, before it ran any code of its
// own (rax still holds clone's 0 for the child), with its own thread
// pointer; the program's result is unchanged.
func TestThreadStartHook(t *testing.T) {
	p := launch(t, "threads")
	runToMain(t, p)
	rec := &startRecorder{}
	p.SetThreadStartHook(rec.hook)
	ev := runToExit(t, p)
	if ev.Kind != Exited || ev.ExitCode != 50 {
		t.Fatalf("end %+v, want exit code 50 (threads 1-4 add their id 5 times)", ev)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.tids) != 4 {
		t.Fatalf("hook calls for threads %v, want 4 (one per pthread_create)", rec.tids)
	}
	seen := map[uint64]bool{}
	for i, tid := range rec.tids {
		switch {
		case rec.errors[i] != nil:
			t.Errorf("thread %d: registers: %v", tid, rec.errors[i])
		case tid == p.Pid():
			t.Errorf("the hook ran for the leader %d", tid)
		case rec.rax[i] != 0:
			t.Errorf("thread %d: rax %#x at its start hook, want clone's 0", tid, rec.rax[i])
		case rec.fs[i] == 0 || seen[rec.fs[i]]:
			t.Errorf("thread %d: thread pointer %#x (zero or another thread's)", tid, rec.fs[i])
		}
		seen[rec.fs[i]] = true
	}
}
