package main

import (
	"bufio"
	"fmt"
	"io"
	"testing"
	"time"
)

// TestProgressSpoolNeverBlocks: with nobody reading the stub's standard
// error, progress lines still return at once (a blocked write would hold
// up the packet loop); once reading resumes, the queued lines come in
// order, followed by the count of those dropped beyond the queue's bound.
func TestProgressSpoolNeverBlocks(t *testing.T) {
	r, w := io.Pipe()
	s := newProgressSpool(w)
	n := maxQueued + 50
	start := time.Now()
	for i := range n {
		fmt.Fprintf(s, "Detaching from process %d\n", i)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("%d progress lines to an unread pipe took %v", n, d)
	}
	fmt.Fprintf(s, "last\n")
	sc := bufio.NewScanner(r)
	// The lines come in order up to the queue's bound (one more is in
	// the writer's hands when the pipe blocks, if it was scheduled in
	// time), then the count of those dropped, "last" among them.
	got := 0
	for sc.Scan() {
		var dropped int
		if _, err := fmt.Sscanf(sc.Text(), "gotpstub: %d progress lines dropped", &dropped); err == nil {
			if got+dropped != n+1 || got < maxQueued {
				t.Errorf("%d lines written and %d dropped, want %d in all, at least %d written", got, dropped, n+1, maxQueued)
			}
			break
		}
		if want := fmt.Sprintf("Detaching from process %d", got); sc.Text() != want {
			t.Fatalf("line %d: %q, want %q", got, sc.Text(), want)
		}
		got++
	}
	// Once the writer has caught up, lines go through again and the
	// spool is idle after them (on a busy machine a write may still
	// outlast the 20 ms a Write waits: only the recovery is checked).
	lines := make(chan string, 16)
	go func() {
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	fmt.Fprintf(s, "again\n")
	select {
	case l := <-lines:
		if l != "again" {
			t.Fatalf("after catching up: %q, want \"again\"", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("after catching up: the next line was not written")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		queued, stalled := len(s.queue), s.stalled
		s.mu.Unlock()
		if queued == 0 && !stalled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after catching up: %d lines queued, stalled %v", queued, stalled)
		}
	}
}
