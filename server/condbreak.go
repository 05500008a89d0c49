package server

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gotpstub/agentexpr"
	"gotpstub/inferior"
	"gotpstub/tdesc"
)

// Target-side breakpoint conditions (ConditionalBreakpoints: gdb's
// `set breakpoint condition-evaluation target`, the default when the
// stub offers it). gdb sends a breakpoint's conditions as agent
// expressions with its Z0/Z1 packet ("Z0,ADDR,KIND;X LEN,BYTES X
// LEN,BYTES..."); a thread that hits the breakpoint while gdb lets it
// run is resumed at once, unreported, when every condition is false,
// like gdbserver. A condition that cannot be evaluated counts as true
// (gdb then evaluates and reports it). A step of gdb's that ends at the
// breakpoint is reported whatever the conditions.

// parseBreakpointConds parses what follows "Z0,ADDR,KIND" (";X..."):
// the conditions; other options (cmds:) are ignored.
func parseBreakpointConds(opts string) ([]*agentexpr.Expr, error) {
	var conds []*agentexpr.Expr
	for opts != "" {
		switch {
		case opts[0] == ';':
			opts = opts[1:]
		case opts[0] == 'X':
			n, rest, ok := strings.Cut(opts[1:], ",")
			size, err := strconv.ParseUint(n, 16, 16)
			if !ok || err != nil || uint64(len(rest)) < 2*size {
				return nil, fmt.Errorf("breakpoint condition %q: bad length", opts)
			}
			code, err := hex.DecodeString(rest[:2*size])
			if err != nil {
				return nil, fmt.Errorf("breakpoint condition: %w", err)
			}
			e, err := agentexpr.Parse(code)
			if err == nil {
				err = agentexpr.Validate(e, agentexpr.Limits{})
			}
			if err != nil {
				return nil, fmt.Errorf("breakpoint condition: %w", err)
			}
			conds = append(conds, e)
			opts = rest[2*size:]
		default: // cmds: or anything else: up to the next ';'
			_, opts, _ = strings.Cut(opts, ";")
		}
	}
	return conds, nil
}

// setBreakpointConds records the conditions of the breakpoint at addr
// (none: it always reports).
func (s *Server) setBreakpointConds(addr uint64, conds []*agentexpr.Expr) {
	if len(conds) == 0 {
		delete(s.bpConds, addr)
		return
	}
	if s.bpConds == nil {
		s.bpConds = map[uint64][]*agentexpr.Expr{}
	}
	s.bpConds[addr] = conds
}

// conditionsFalse reports whether ev is a breakpoint stop of a thread
// gdb let run (acts) at a breakpoint whose conditions are all false: it
// is then resumed unreported.
func (s *Server) conditionsFalse(ev inferior.StopEvent, acts []inferior.Action) bool {
	if len(s.bpConds) == 0 || ev.Kind != inferior.SignalStop || ev.Signal != 5 ||
		(ev.Reason != "swbreak" && ev.Reason != "hwbreak") || stepping(acts, ev.Tid) {
		return false
	}
	regs, err := s.proc.Registers(ev.Tid)
	if err != nil {
		return false
	}
	conds := s.bpConds[regs.Uint64(regs.Layout.PC)]
	if len(conds) == 0 {
		return false
	}
	env := &agentexpr.Env{Regs: condRegs{regs}, Mem: condMem{s.proc}}
	for _, c := range conds {
		v, err := agentexpr.Eval(c, env)
		if err != nil || v != 0 {
			return false
		}
	}
	return true
}

// condRegs gives a condition the stopped thread's registers.
type condRegs struct{ r *tdesc.Regs }

func (c condRegs) Register(num int) (uint64, error) {
	if num < 0 || num >= len(c.r.Layout.Regs) {
		return 0, fmt.Errorf("register %d: %w", num, agentexpr.ErrBadRegister)
	}
	return c.r.Uint64(num), nil
}

// condMem gives a condition the process's memory.
type condMem struct{ p *inferior.Process }

func (c condMem) ReadMemory(addr uint64, buf []byte) error {
	n, err := c.p.ReadMemory(addr, buf)
	if n == len(buf) {
		return nil
	}
	if err == nil {
		err = errors.New("short read")
	}
	return fmt.Errorf("reading %d bytes at %#x: %w", len(buf), addr, err)
}
