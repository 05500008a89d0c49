package server

import (
	"errors"
	"strconv"
	"strings"

	"gotpstub/rsp"
	"gotpstub/threaddb"
)

// tlsResolver caches the threaddb.Resolver of one libc mapping of one
// process; a different pid, path or base builds a new one.
type tlsResolver struct {
	pid      int
	path     string
	base     uint64
	resolver *threaddb.Resolver
}

// errTLS is gdbserver's answer to every failed qGetTLSAddr (E01); gdb
// reports "Remote target failed to process qGetTLSAddr request".
const errTLS = 0x01

// qGetTLSAddr answers qGetTLSAddr:<thread-id>,<offset>,<lm> with the
// address of the thread-local object, in hex, as libthread_db's
// td_thr_tls_get_addr would compute it (package threaddb).
func (s *Server) qGetTLSAddr(pkt []byte) []byte {
	fields := strings.Split(strings.TrimPrefix(string(pkt), "qGetTLSAddr:"), ",")
	if len(fields) != 3 {
		return errReply(errTLS)
	}
	_, tid, err := rsp.ParseThreadID(fields[0])
	if err != nil {
		return errReply(errTLS)
	}
	offset, err1 := strconv.ParseUint(fields[1], 16, 64)
	lm, err2 := strconv.ParseUint(fields[2], 16, 64)
	if err1 != nil || err2 != nil {
		return errReply(errTLS)
	}
	if !s.needProcess() {
		return errReply(errNoProcess)
	}
	if tid <= 0 {
		tid = int64(s.currentThread())
	}
	if !s.alive(int(tid)) {
		return errReply(errTLS)
	}
	tp, err := s.proc.ThreadPointer(int(tid))
	if err != nil {
		s.logf("qGetTLSAddr: %v", err)
		return errReply(errTLS)
	}
	resolver, err := s.tlsResolverFor(s.proc.Pid())
	if err != nil {
		s.logf("qGetTLSAddr: %v", err)
		return errReply(errTLS)
	}
	addr, err := resolver.TLSAddress(tp, lm, offset)
	if err != nil {
		if !errors.Is(err, threaddb.ErrTLSNotAllocated) {
			s.logf("qGetTLSAddr: %v", err)
		}
		return errReply(errTLS)
	}
	return []byte(strconv.FormatUint(addr, 16))
}

// tlsResolverFor returns the resolver for process pid's current libc
// mapping, building it when the mapping changed.
func (s *Server) tlsResolverFor(pid int) (*threaddb.Resolver, error) {
	path, base, err := threaddb.FindLibc(pid)
	if err != nil {
		return nil, err
	}
	if c := s.tls; c != nil && c.pid == pid && c.path == path && c.base == base {
		return c.resolver, nil
	}
	r, err := threaddb.NewResolver(s.proc, path, base)
	if err != nil {
		return nil, err
	}
	s.tls = &tlsResolver{pid: pid, path: path, base: base, resolver: r}
	return r, nil
}
