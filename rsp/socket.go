package rsp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// BlockingSocket is a stream socket read and written with plain blocking
// system calls, outside Go's network poller. The reading goroutine then
// waits for gdb's next packet inside read(2), woken directly by the
// kernel, instead of going read → EAGAIN → park → epoll_pwait → netpoller
// → scheduler → read again; on a virtual machine, where every system call
// and wake-up is dear, that path made a simple packet's round trip longer
// than gdbserver's (scripts/bench-insert.sh). A goroutine keeps its OS
// thread while blocked in read: a stub has one such reader.
type BlockingSocket struct {
	fd       int
	shutOnce sync.Once
	mu       sync.RWMutex // Read and Write hold it shared, Close exclusively
	closed   bool
}

// NewBlockingSocket takes over c's socket: the BlockingSocket owns a
// duplicate of its descriptor, in blocking mode, and c is closed. It fails
// for connections without a descriptor (net.Pipe's).
func NewBlockingSocket(c net.Conn) (*BlockingSocket, error) {
	sc, ok := c.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return nil, fmt.Errorf("rsp: %T has no socket descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("rsp: socket descriptor: %w", err)
	}
	fd, dupErr := -1, error(nil)
	if err := rc.Control(func(s uintptr) {
		fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, fmt.Errorf("rsp: socket descriptor: %w", err)
	}
	if dupErr != nil {
		return nil, fmt.Errorf("rsp: duplicate the socket: %w", dupErr)
	}
	// The duplicate shares the open file, and so O_NONBLOCK, with c's
	// descriptor, which is closed (taken out of the poller) at once.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rsp: blocking mode: %w", err)
	}
	c.Close()
	return &BlockingSocket{fd: fd}, nil
}

// Read reads from the socket, blocking until data, end of stream or Close.
func (s *BlockingSocket) Read(p []byte) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, net.ErrClosed
	}
	for {
		n, err := unix.Read(s.fd, p)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, fmt.Errorf("read: %w", err)
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes all of p.
func (s *BlockingSocket) Write(p []byte) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, net.ErrClosed
	}
	done := 0
	for done < len(p) {
		n, err := unix.Write(s.fd, p[done:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, fmt.Errorf("write: %w", err)
		}
		done += n
	}
	return done, nil
}

// Close shuts the socket down, which ends a Read blocked in another
// goroutine, then closes the descriptor once no Read or Write uses it.
func (s *BlockingSocket) Close() error {
	s.shutOnce.Do(func() { _ = unix.Shutdown(s.fd, unix.SHUT_RDWR) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := unix.Close(s.fd); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}
