package inferior

import (
	"runtime"
	"testing"
)

func TestCurG(t *testing.T) {
	mine := curG()
	if mine == 0 {
		t.Fatal("curG is 0")
	}
	// Stable across calls, stack growth and a move to another thread.
	var grow func(n int) uintptr
	grow = func(n int) uintptr {
		var pad [256]byte
		if n == 0 {
			return curG() + uintptr(pad[0])
		}
		return grow(n - 1)
	}
	if g := grow(200); g != mine {
		t.Errorf("curG after the stack grew: %#x, was %#x", g, mine)
	}
	runtime.LockOSThread()
	runtime.Gosched()
	if g := curG(); g != mine {
		t.Errorf("curG changed: %#x, was %#x", g, mine)
	}
	runtime.UnlockOSThread()
	// Other live goroutines have their own.
	const n = 8
	gs := make(chan uintptr, n)
	release := make(chan struct{})
	for range n {
		go func() {
			gs <- curG()
			<-release
		}()
	}
	seen := map[uintptr]bool{mine: true}
	for range n {
		g := <-gs
		if seen[g] {
			t.Errorf("two live goroutines share g %#x", g)
		}
		seen[g] = true
	}
	close(release)
}
