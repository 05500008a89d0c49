package server

import (
	"fmt"
	"strconv"
	"strings"

	"gotpstub/inferior"
	"gotpstub/rsp"
)

// syscallCatch is what gdb's QCatchSyscalls asked for.
type syscallCatch struct {
	on  bool
	nrs []int // nil: every syscall
}

// parseCatchSyscalls parses QCatchSyscalls:0, QCatchSyscalls:1 (every
// syscall) and QCatchSyscalls:1;NR;NR... (hex syscall numbers).
func parseCatchSyscalls(pkt []byte) (syscallCatch, error) {
	body, ok := strings.CutPrefix(string(pkt), "QCatchSyscalls:")
	if !ok {
		return syscallCatch{}, fmt.Errorf("not QCatchSyscalls")
	}
	fields := strings.Split(body, ";")
	switch fields[0] {
	case "0":
		if len(fields) > 1 {
			return syscallCatch{}, fmt.Errorf("QCatchSyscalls:0 takes no syscall numbers")
		}
		return syscallCatch{}, nil
	case "1":
	default:
		return syscallCatch{}, fmt.Errorf("QCatchSyscalls: want 0 or 1, got %q", fields[0])
	}
	c := syscallCatch{on: true}
	for _, f := range fields[1:] {
		n, err := strconv.ParseUint(f, 16, 31)
		if err != nil {
			return syscallCatch{}, fmt.Errorf("QCatchSyscalls: syscall number %q: %w", f, err)
		}
		c.nrs = append(c.nrs, int(n))
	}
	return c, nil
}

// qCatchSyscalls handles QCatchSyscalls (gdb's `catch syscall`).
func (s *Server) qCatchSyscalls(pkt []byte) []byte {
	c, err := parseCatchSyscalls(pkt)
	if err != nil {
		return errReply(errBadPacket)
	}
	s.catchSyscalls = c
	if s.proc != nil {
		s.proc.SetCatchSyscalls(c.on, c.nrs)
	}
	return rsp.OK
}

// syscallStopField is the stop reply's syscall_entry/syscall_return
// field of a syscall stop, "" for other stops.
func syscallStopField(ev inferior.StopEvent) string {
	switch ev.Syscall {
	case inferior.SyscallEntry:
		return fmt.Sprintf("syscall_entry:%x;", ev.SyscallNr)
	case inferior.SyscallReturn:
		return fmt.Sprintf("syscall_return:%x;", ev.SyscallNr)
	}
	return ""
}
