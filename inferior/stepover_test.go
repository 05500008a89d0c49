package inferior

import "testing"

// TestGDBStyleStepOverKeepsOtherThreadsHits does what gdb does at every
// breakpoint stop in all-stop mode (remove the breakpoint, step the
// reporting thread alone, reinsert, continue): the hits other threads made
// meanwhile must still all be reported.
func TestGDBStyleStepOverKeepsOtherThreadsHits(t *testing.T) {
	p := launch(t, "threads")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	hits := map[int]int{}
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind == Exited {
			break
		}
		if ev.Reason != "swbreak" {
			t.Fatalf("event %+v", ev)
		}
		hits[ev.Tid]++
		// gdb: remove all, step the thread alone, reinsert.
		if err := p.RemoveBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
			t.Fatal(err)
		}
		if err := p.Resume([]Action{{Tid: ev.Tid, Step: true}}); err != nil {
			t.Fatal(err)
		}
		ev2 := wait(t, p)
		t.Logf("hit by %d; step → %+v", ev.Tid, ev2)
		if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for _, n := range hits {
		total += n
	}
	if total != 20 {
		t.Errorf("hits %v total %d, want 20", hits, total)
	}
}
