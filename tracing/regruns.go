package tracing

import (
	"slices"

	"gotpstub/frames"
)

// registerRuns returns the byte ranges of the register block holding the
// registers an R action's mask names (gdb's hex mask, its last digit
// registers 0-3) and the PC, adjacent ones merged; nil when it names
// every register of the layout or cannot be read: the whole block is
// stored then. The PC is always kept: gdb's tfile reader takes a frame's
// PC from its register block when it has one (the expanded 'R' block of
// a saved frame), and the stub answers tfind and `g` from it.
// e.mu must be held.
func (e *Engine) registerRuns(mask string) [][2]int {
	if runs, ok := e.runsByMask[mask]; ok {
		return runs
	}
	runs := e.computeRegisterRuns(mask)
	if e.runsByMask == nil {
		e.runsByMask = map[string][][2]int{}
	}
	e.runsByMask[mask] = runs
	return runs
}

func (e *Engine) computeRegisterRuns(mask string) [][2]int {
	if e.layout == nil || mask == "" {
		return nil
	}
	named := func(num int) bool {
		i := len(mask) - 1 - num/4
		if i < 0 {
			return false
		}
		d, ok := hexDigit(mask[i])
		return ok && d&(1<<(num%4)) != 0
	}
	for i := range mask {
		if _, ok := hexDigit(mask[i]); !ok {
			return nil
		}
	}
	var ranges [][2]int
	for _, r := range e.layout.Regs {
		if r.Offset < 0 || r.Size <= 0 {
			continue
		}
		if !named(r.Num) && r.Num != e.pcReg {
			continue
		}
		ranges = append(ranges, [2]int{r.Offset, r.Offset + r.Size})
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

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// tpRegisterRuns is registerRuns for tp's first R action (nil when it has
// none). e.mu must be held.
func (e *Engine) tpRegisterRuns(tp *Tracepoint) [][2]int {
	for _, a := range tp.Actions {
		if a.Kind == ActionRegisters {
			return e.registerRuns(a.RegMask)
		}
	}
	return nil
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
	return frames.RegisterBlockBytes(e.regBlockSize(), e.tpRegisterRuns(tp))
}
