package tracing

import (
	"math/big"
	"slices"

	"gotpstub/agentexpr"
	"gotpstub/frames"
)

// registerRuns returns the byte ranges of the register block a frame of
// one action list (actions, with cond: the tracepoint's condition) keeps
// for its R action of mask (gdb's hex mask, its last digit registers
// 0-3), adjacent ones merged: the registers the mask names, those the
// condition and the actions' expressions read and memory actions are
// based on, and the PC, stack and frame pointers (and link register), so that a frame
// still shows where it was taken and gdb can unwind from it (gdb's tfile
// reader takes a frame's PC from its register block, here the expanded
// 'R' block of a saved frame). nil when that is every register of the
// layout or the mask cannot be read: the whole block is stored then.
// e.mu must be held.
func (e *Engine) registerRuns(mask string, cond *agentexpr.Expr, actions []Action) [][2]int {
	bits, ok := new(big.Int).SetString(mask, 16)
	if e.layout == nil || !ok || bits.Sign() < 0 {
		return nil
	}
	want := map[int]bool{e.pcReg: true, e.layout.SP: true, e.layout.FP: true, e.layout.LR: true}
	for num := range bits.BitLen() {
		if bits.Bit(num) != 0 {
			want[num] = true
		}
	}
	exprs := []*agentexpr.Expr{cond}
	for _, a := range actions {
		exprs = append(exprs, a.Expr)
		if a.Kind == ActionMemory && a.BaseReg >= 0 {
			want[a.BaseReg] = true
		}
	}
	for _, x := range exprs {
		if x != nil {
			for _, num := range x.RegsUsed {
				want[num] = true
			}
		}
	}
	var ranges [][2]int
	for _, r := range e.layout.Regs {
		if r.Offset >= 0 && r.Size > 0 && want[r.Num] {
			ranges = append(ranges, [2]int{r.Offset, r.Offset + r.Size})
		}
	}
	if len(ranges) == len(e.layout.Regs) {
		return nil
	}
	slices.SortFunc(ranges, func(a, b [2]int) int { return a[0] - b[0] })
	var runs [][2]int
	for _, r := range ranges {
		if k := len(runs) - 1; k >= 0 && runs[k][1] >= r[0] {
			runs[k][1] = max(runs[k][1], r[1])
			continue
		}
		runs = append(runs, r)
	}
	return runs
}

// regRuns caches registerRuns for one action list of a tracepoint.
type regRuns struct {
	done bool
	runs [][2]int
}

// actionRegisterRuns returns registerRuns for tp's actions (step: its
// while-stepping actions), computed once (QTDP, which changes them,
// resets the cache); nil when they collect no register block. e.mu must
// be held.
func (e *Engine) actionRegisterRuns(tp *Tracepoint, step bool) [][2]int {
	c, actions := &tp.regRuns, tp.Actions
	if step {
		c, actions = &tp.stepRegRuns, tp.StepActions
	}
	if !c.done {
		c.done, c.runs = true, nil
		for _, a := range actions {
			if a.Kind == ActionRegisters {
				c.runs = e.registerRuns(a.RegMask, tp.Cond, actions)
				break
			}
		}
	}
	return c.runs
}

// RegisterBlockBytes returns the bytes of a frame of tp that its
// registers take: an 'R' or an 'r' block (frames.RegisterBlockBytes), 0
// when tp collects no register.
func (e *Engine) RegisterBlockBytes(tp *Tracepoint) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !tp.collectsRegisters() {
		return 0
	}
	return frames.RegisterBlockBytes(e.regBlockSize(), e.actionRegisterRuns(tp, false))
}
