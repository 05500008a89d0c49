package jit

import (
	"math"

	"gotpstub/agentexpr"
)

// tsvAdd matches gdb's bytecode for `teval $n = $n + K` at instruction
// i of e: `getv N; const K; add; [ext 64;] setv N`, with K a constant
// up to MaxInt32 and no jump landing inside. It returns N, K and the
// index of the setv; the backends emit it as one atomic add on the
// variable (amd64 LOCK XADD, arm64 an exclusive load/store loop), so
// that threads adding to it at once in jump pads lose no update.
func tsvAdd(e *agentexpr.Expr, f *flow, i int) (n, k uint64, last int, ok bool) {
	insns := e.Insns
	last = i + 3
	if last < len(insns) && insns[last].Op == agentexpr.OpExt && insns[last].Imm == 64 {
		last++
	}
	if last >= len(insns) {
		return 0, 0, 0, false
	}
	get, c, add, set := insns[i], insns[i+1], insns[i+2], insns[last]
	if get.Op != agentexpr.OpGetv || add.Op != agentexpr.OpAdd || set.Op != agentexpr.OpSetv || get.Imm != set.Imm {
		return 0, 0, 0, false
	}
	switch c.Op {
	case agentexpr.OpConst8, agentexpr.OpConst16, agentexpr.OpConst32:
	default:
		return 0, 0, 0, false
	}
	if c.Imm > math.MaxInt32 {
		return 0, 0, 0, false
	}
	for j := i + 1; j <= last; j++ {
		if f.isTarget[j] {
			return 0, 0, 0, false
		}
	}
	return get.Imm, c.Imm, last, true
}
