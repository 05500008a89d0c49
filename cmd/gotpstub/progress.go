package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progressSpool writes the stub's progress lines (gdbserver's "Detaching
// from process N" and the like) to w without ever holding up the stub:
// whoever reads the stub's standard error may stop reading (GDB's
// testsuite does, while a program forks thousands of times), and a write
// to a full pipe would block the stub's packet loop with it. Each line is
// handed to a writer goroutine; Write waits up to stallAfter for it to be
// written, so that lines keep their order with the stub's other output
// while the reader keeps up, and then stops waiting until the writer has
// caught up. At most maxQueued lines wait; later ones are dropped and
// counted, and the count is written once the writer gets through.
type progressSpool struct {
	w io.Writer

	mu      sync.Mutex
	queue   []spooled
	dropped int
	stalled bool // a write took longer than stallAfter and has not finished
	wake    chan struct{}
}

// spooled is one queued write and the channel closed once it is written.
type spooled struct {
	b    []byte
	done chan struct{}
}

const (
	maxQueued  = 4096
	stallAfter = 20 * time.Millisecond
)

func newProgressSpool(w io.Writer) *progressSpool {
	s := &progressSpool{w: w, wake: make(chan struct{}, 1)}
	go s.run()
	return s
}

// Write queues p and waits a little for it to be written.
func (s *progressSpool) Write(p []byte) (int, error) {
	s.mu.Lock()
	if len(s.queue) >= maxQueued {
		s.dropped++
		s.mu.Unlock()
		return len(p), nil
	}
	line := spooled{b: append([]byte(nil), p...), done: make(chan struct{})}
	s.queue = append(s.queue, line)
	stalled := s.stalled
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	if stalled {
		return len(p), nil
	}
	select {
	case <-line.done:
	case <-time.After(stallAfter):
		s.mu.Lock()
		s.stalled = true
		s.mu.Unlock()
	}
	return len(p), nil
}

// run is the writer goroutine.
func (s *progressSpool) run() {
	for range s.wake {
		for {
			s.mu.Lock()
			if len(s.queue) == 0 {
				s.stalled = false
				s.mu.Unlock()
				break
			}
			line := s.queue[0]
			s.queue = s.queue[1:]
			dropped := 0
			if len(s.queue) == 0 {
				// The lines dropped came after every queued one.
				dropped, s.dropped = s.dropped, 0
			}
			s.mu.Unlock()
			_, _ = s.w.Write(line.b)
			if dropped > 0 {
				fmt.Fprintf(s.w, "gotpstub: %d progress lines dropped (standard error was not read)\n", dropped)
			}
			close(line.done)
		}
	}
}
