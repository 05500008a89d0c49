package server

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"gotpstub/agentexpr"
	"gotpstub/jit"
	"gotpstub/tracing"
)

// logJIT reports, in the --debug log, what the JIT makes of the agent
// expressions of the tracepoint location a QTDP packet just defined: the
// size of the native code, or why the expression needs the interpreter.
// Trap tracepoints always evaluate with the interpreter inside the stub;
// the JIT's code is for in-inferior (fast) tracepoints, so this tells the
// user which conditions and actions would run natively.
func (s *Server) logJIT(pkt []byte) {
	if s.cfg.Log == nil {
		return
	}
	fields := strings.SplitN(strings.TrimPrefix(string(pkt), "QTDP:"), ":", 3)
	if len(fields) < 2 {
		return
	}
	num, err1 := strconv.ParseUint(strings.TrimPrefix(fields[0], "-"), 16, 31)
	addr, err2 := strconv.ParseUint(fields[1], 16, 64)
	if err1 != nil || err2 != nil {
		return
	}
	for _, tp := range s.trace.Tracepoints() {
		if tp.Num != int(num) || tp.Addr != addr {
			continue
		}
		if tp.Cond != nil && !strings.HasPrefix(fields[0], "-") {
			s.logf("jit: tracepoint %d at %#x condition: %s", tp.Num, tp.Addr, jitVerdict(tp.Cond))
		}
		for i, a := range append(append([]tracing.Action(nil), tp.Actions...), tp.StepActions...) {
			if a.Kind == tracing.ActionExpr && a.Expr != nil {
				s.logf("jit: tracepoint %d at %#x action %d: %s", tp.Num, tp.Addr, i, jitVerdict(a.Expr))
			}
		}
	}
}

// jitVerdict compiles e (optimised) for this machine's ISA, the
// inferior's, and says how it went.
func jitVerdict(e *agentexpr.Expr) string {
	opt, err := agentexpr.Optimize(e)
	if err != nil {
		opt = e
	}
	code, err := jit.Compile(opt, runtime.GOARCH, jit.Options{})
	switch {
	case err != nil:
		return fmt.Sprintf("not compiled (%v); the interpreter runs it", err)
	case code.Fallback != "":
		return fmt.Sprintf("falls back to the interpreter: %s", code.Fallback)
	}
	return fmt.Sprintf("compiled to %d bytes of native code (reads registers %v)", len(code.Text), code.RegsRead)
}
