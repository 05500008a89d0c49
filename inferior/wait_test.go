package inferior

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestStartWaitCancel: a CancelWait made after StartWait returns ends
// that wait even before anyone waits on it (the server starts a wait,
// then hands it to a goroutine: a cancel made before the goroutine ran
// was lost, and the wait went on until some event came — none did when
// every thread was blocked). Here the program spins: no event comes.
func TestStartWaitCancel(t *testing.T) {
	p := launch(t, "spin")
	runToMain(t, p)
	if err := p.SetNonStop(true); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	wait, err := p.StartWait()
	if err != nil {
		t.Fatal(err)
	}
	p.CancelWait()
	done := make(chan error, 1)
	go func() {
		ev, err := wait()
		if err == nil {
			err = fmt.Errorf("event %+v", ev)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrWaitCancelled) {
			t.Fatalf("wait: %v, want ErrWaitCancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled wait did not end (every thread is stopped: no event comes)")
	}
	// A new wait after the cancel is not cancelled: it gets the kill.
	w, err := p.StartWait()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if ev, err := w(); err != nil || ev.Kind != Killed && ev.Kind != Exited {
		t.Fatalf("after the cancelled wait: %+v, %v; want the end of the process", ev, err)
	}
}
