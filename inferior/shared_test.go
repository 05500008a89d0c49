package inferior

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestTiedWordMarksThreadDeath: a word tied to a thread holds its id
// while it lives, and the kernel marks it when the thread ends (here a
// goroutine locked to its thread returns, so Go ends the thread; a killed
// stub ends all its threads the same way).
func TestTiedWordMarksThreadDeath(t *testing.T) {
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	word := (*uint32)(unsafe.Pointer(&page[64]))
	tid := make(chan int)
	keep := make(chan *robustList, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		for unix.Gettid() == unix.Getpid() {
			// The main thread never ends (Go wedges it instead): take
			// another one.
			done := make(chan struct{})
			go func() {
				runtime.LockOSThread()
				if unix.Gettid() != unix.Getpid() {
					rl, err := tieWordToThread(word)
					if err != nil {
						t.Error(err)
					}
					keep <- rl
					tid <- unix.Gettid()
				}
				close(done)
			}()
			<-done
			return
		}
		rl, err := tieWordToThread(word)
		if err != nil {
			t.Error(err)
		}
		keep <- rl
		tid <- unix.Gettid()
	}()
	id := <-tid
	<-keep
	// The thread ends shortly after the goroutine returns.
	for i := 0; i < 1000; i++ {
		v := atomic.LoadUint32(word)
		if v&FutexTIDMask == 0 {
			if v != FutexOwnerDied {
				t.Fatalf("word %#x after the thread ended, want %#x", v, FutexOwnerDied)
			}
			return
		}
		if int(v&FutexTIDMask) != id {
			t.Fatalf("word holds %d, want the thread id %d", v&FutexTIDMask, id)
		}
		runtime.Gosched()
		unix.Nanosleep(&unix.Timespec{Nsec: 1e6}, nil)
	}
	_, statErr := os.Stat(fmt.Sprintf("/proc/self/task/%d", id))
	t.Fatalf("word %#x still names thread %d 1 s after it ended (task dir: %v)", atomic.LoadUint32(word), id, statErr)
}
