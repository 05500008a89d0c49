package server

import (
	"fmt"
	"strings"
	"sync"

	"gotpstub/rsp"
	"gotpstub/sdt"
	"gotpstub/tdesc"
	"gotpstub/tracing"
)

// Static tracepoint markers: the SDT (USDT) probes of the program and of
// its loaded libraries (package sdt), served as gdb's static tracepoint
// markers (qTfSTM, qTsSTM, qTSTMat; `info static-tracepoint-markers`,
// `strace -m PROVIDER:NAME`), and the data of a hit at one ($_sdata:
// "provider:name(arg, ...)", the arguments decoded from the probe's
// argument spec).

// markerSource finds the markers of one process; it is the engine's
// tracing.StaticDataSource.
type markerSource struct {
	pid    int
	mu     sync.Mutex
	byAddr map[uint64]sdt.Located
}

// list returns the process's markers, read afresh (libraries come and go).
func (m *markerSource) list() ([]sdt.Located, error) {
	ms, err := sdt.InProcess(m.pid)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.byAddr = make(map[uint64]sdt.Located, len(ms))
	for _, l := range ms {
		m.byAddr[l.Addr] = l
	}
	m.mu.Unlock()
	return ms, nil
}

// at returns the marker at addr.
func (m *markerSource) at(addr uint64) (sdt.Located, bool) {
	m.mu.Lock()
	l, ok := m.byAddr[addr]
	m.mu.Unlock()
	if ok {
		return l, true
	}
	if _, err := m.list(); err != nil {
		return sdt.Located{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok = m.byAddr[addr]
	return l, ok
}

// StaticData implements tracing.StaticDataSource.
func (m *markerSource) StaticData(addr uint64, reg func(num int) (uint64, bool), mem func(addr uint64, buf []byte) bool) []byte {
	l, ok := m.at(addr)
	if !ok {
		return nil
	}
	args, err := sdt.ParseArgs(l.Args)
	if err != nil {
		return []byte(unparsedData(l))
	}
	byName := func(name string) (uint64, bool) {
		num, ok := regNum(name)
		if !ok {
			return 0, false
		}
		return reg(num)
	}
	return []byte(sdt.Format(l.Marker, args, byName, mem))
}

// StaticReads implements tracing.StaticDataSource: the memory operands
// of the marker's arguments.
func (m *markerSource) StaticReads(addr uint64) (tracing.StaticReads, bool) {
	l, ok := m.at(addr)
	if !ok {
		return tracing.StaticReads{}, false
	}
	args, err := sdt.ParseArgs(l.Args)
	if err != nil {
		return tracing.StaticReads{MinText: len(unparsedData(l)), Semaphore: l.Semaphore}, true
	}
	// "provider:name(" ")", a digit or '?' per argument, ", " between.
	r := tracing.StaticReads{MinText: len(l.ID()) + 2 + len(args) + 2*max(len(args)-1, 0), Semaphore: l.Semaphore}
	for _, a := range args {
		if !a.Mem {
			continue
		}
		num, ok := regNum(a.Reg)
		if !ok {
			return tracing.StaticReads{}, false
		}
		r.Memory = append(r.Memory, tracing.Action{Kind: tracing.ActionMemory, BaseReg: num,
			Offset: uint64(a.Disp), Len: uint64(a.Size)})
	}
	return r, true
}

// unparsedData is the static data of a marker whose argument spec sdt
// does not understand: its id and the spec.
func unparsedData(l sdt.Located) string { return fmt.Sprintf("%s(%s)", l.ID(), l.Args) }

// regNum is the GDB number of a register named as in an SDT argument spec
// (64-bit names: rax, x0, sp), on this machine's ISA.
func regNum(name string) (int, bool) {
	r, ok := tdesc.Host().Find(name)
	return r.Num, ok
}

// markerDef is a marker as qTfSTM lists it: addr:hex(id):hex(extra).
func markerDef(l sdt.Located) string {
	extra := "args " + l.Args
	if l.Semaphore != 0 {
		extra += fmt.Sprintf(", semaphore %#x", l.Semaphore)
	}
	return fmt.Sprintf("%x:%x:%x", l.Addr, l.ID(), extra)
}

// markerReplyBytes bounds one qTfSTM/qTsSTM reply.
const markerReplyBytes = 2048

// markersFirst answers qTfSTM: the first markers.
func (s *Server) markersFirst([]byte) []byte {
	if !s.needProcess() || s.markers == nil {
		return errReply(errNoProcess)
	}
	ms, err := s.markers.list()
	if err != nil {
		return rsp.ErrorMessage(fmt.Sprintf("listing the SDT markers: %v", err))
	}
	s.markerList = ms
	return s.markersNext(nil)
}

// markersNext answers qTsSTM: the next markers, "l" after the last.
func (s *Server) markersNext([]byte) []byte {
	if len(s.markerList) == 0 {
		return []byte("l")
	}
	var b strings.Builder
	b.WriteByte('m')
	for i, l := range s.markerList {
		def := markerDef(l)
		if i > 0 && b.Len()+1+len(def) > markerReplyBytes {
			s.markerList = s.markerList[i:]
			return []byte(b.String())
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(def)
	}
	s.markerList = nil
	return []byte(b.String())
}

// markersAt answers qTSTMat:ADDR: the marker at ADDR.
func (s *Server) markersAt(pkt []byte) []byte {
	if !s.needProcess() || s.markers == nil {
		return errReply(errNoProcess)
	}
	var addr uint64
	if _, err := fmt.Sscanf(strings.TrimPrefix(string(pkt), "qTSTMat:"), "%x", &addr); err != nil {
		return errReply(errBadPacket)
	}
	l, ok := s.markers.at(addr)
	if !ok {
		return []byte("l")
	}
	return []byte("m" + markerDef(l))
}
