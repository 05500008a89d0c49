package agentexpr

import "fmt"

// optLimits are the limits Optimize validates its input and output with.
var optLimits = Limits{MaxStack: 0xffff}

// maxOptimizePasses bounds the rewrite loop; each pass shrinks the program
// or stops it, so this is a safety net, not a tuning knob.
const maxOptimizePasses = 64

// optInsn is an instruction while Optimize works on it: jumps refer to
// instruction indexes, not byte offsets.
type optInsn struct {
	Insn
	target int // index of the jump target in the program (jumps only)
}

// Optimize returns a new, validated expression that computes the same
// result with the same side effects as e: the same memory and register
// reads that can fail, the same collections, TSV reads and writes and
// printf calls, in the same order. e must be valid; it is not modified.
//
// The rewrites, applied until nothing changes:
//   - constant folding of pure operations on constants (never a division or
//     remainder by zero, which must still fail at run time), with each
//     constant re-encoded in its shortest form (constN, or constN + ext N for
//     small negative values);
//   - removal of ext/zero_ext that cannot change the value (width >= 64,
//     after a narrower ref, after an equal or narrower extension);
//   - removal of pushes that are immediately popped (const, dup, pick), of
//     swap swap, swap before a commutative operation and swap after dup;
//     pick 0 becomes dup; identities such as x+0, x*1, x|0, x<<0;
//   - if_goto on a constant becomes goto or disappears; log_not log_not
//     if_goto becomes if_goto; if_goto to the next instruction becomes pop;
//   - jump threading (a jump to a goto goes to its target, a goto to end
//     becomes end, a goto to the next instruction disappears) and removal
//     of unreachable code.
//
// Rewrites never look across a jump target, and every jump is re-encoded
// to its instruction's new offset.
func Optimize(e *Expr) (*Expr, error) {
	if e == nil {
		return nil, fmt.Errorf("optimize: %w", ErrEmpty)
	}
	c, err := Parse(e.Code)
	if err != nil {
		return nil, fmt.Errorf("optimize: %w", err)
	}
	if err := Validate(c, optLimits); err != nil {
		return nil, fmt.Errorf("optimize: %w", err)
	}
	prog := make([]optInsn, len(c.Insns))
	for i, in := range c.Insns {
		prog[i] = optInsn{Insn: in, target: c.jumpIndex[i]}
	}
	for pass := 0; pass < maxOptimizePasses; pass++ {
		changed := false
		var ch bool
		prog, ch = removeUnreachable(prog)
		changed = changed || ch
		ch = threadJumps(prog)
		changed = changed || ch
		prog, ch = rewrite(prog, peephole)
		changed = changed || ch
		if !changed {
			break
		}
	}
	code, err := encodeProgram(prog)
	if err != nil {
		return nil, fmt.Errorf("optimize: %w", err)
	}
	out, err := Parse(code)
	if err != nil {
		return nil, fmt.Errorf("optimize: re-parse: %w", err)
	}
	if err := Validate(out, optLimits); err != nil {
		return nil, fmt.Errorf("optimize produced invalid code: %w", err)
	}
	return out, nil
}

// encodeProgram lays the program out and patches jump offsets.
func encodeProgram(prog []optInsn) ([]byte, error) {
	offsets := make([]int, len(prog)+1)
	off := 0
	for i, in := range prog {
		offsets[i] = off
		off += encodedLen(in.Insn)
	}
	offsets[len(prog)] = off
	if off > 0xffff {
		return nil, fmt.Errorf("%w: program of %d bytes is too long for 16-bit jump offsets", ErrBadJump, off)
	}
	insns := make([]Insn, len(prog))
	for i, in := range prog {
		insns[i] = in.Insn
		if in.IsJump() {
			insns[i].Imm = uint64(offsets[in.target])
		}
	}
	return Encode(make([]byte, 0, off), insns)
}

// encodedLen is the byte length of in once encoded.
func encodedLen(in Insn) int {
	if in.Op == OpPrintf {
		return 4 + len(in.Str)
	}
	return 1 + opInfos[in.Op].ImmBytes
}

// removeUnreachable drops instructions no path from the entry reaches.
func removeUnreachable(prog []optInsn) ([]optInsn, bool) {
	reached := make([]bool, len(prog))
	work := []int{0}
	reached[0] = true
	visit := func(i int) {
		if i < len(prog) && !reached[i] {
			reached[i] = true
			work = append(work, i)
		}
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		switch in := prog[i]; in.Op {
		case OpEnd:
		case OpGoto:
			visit(in.target)
		case OpIfGoto:
			visit(in.target)
			visit(i + 1)
		default:
			visit(i + 1)
		}
	}
	all := true
	for _, r := range reached {
		all = all && r
	}
	if all {
		return prog, false
	}
	return rewrite(prog, func(prog []optInsn, i int, _ []bool) (int, []optInsn, bool) {
		if !reached[i] {
			return 1, nil, true
		}
		return 0, nil, false
	})
}

// threadJumps retargets jumps through chains of gotos, turns a goto to end
// into end, and reports whether anything changed.
func threadJumps(prog []optInsn) bool {
	changed := false
	for i := range prog {
		in := &prog[i]
		if !in.IsJump() {
			continue
		}
		target := in.target
		for hops := 0; hops < 16 && prog[target].Op == OpGoto && prog[target].target != target; hops++ {
			target = prog[target].target
		}
		if target != in.target {
			in.target = target
			changed = true
		}
		if in.Op == OpGoto && prog[in.target].Op == OpEnd {
			*in = optInsn{Insn: Insn{Op: OpEnd}}
			changed = true
		}
	}
	return changed
}

// rule looks at prog[i:] and either declines or replaces the k
// instructions starting at i with repl. rewrite guarantees that none of
// prog[i+1:i+k] is a jump target. Jumps in repl carry old indexes.
type rule func(prog []optInsn, i int, isTarget []bool) (k int, repl []optInsn, ok bool)

// rewrite applies r once at every position, left to right, and remaps jump
// targets to the new indexes.
func rewrite(prog []optInsn, r rule) ([]optInsn, bool) {
	isTarget := make([]bool, len(prog)+1)
	for _, in := range prog {
		if in.IsJump() {
			isTarget[in.target] = true
		}
	}
	out := make([]optInsn, 0, len(prog))
	newIndex := make([]int, len(prog)+1)
	changed := false
	for i := 0; i < len(prog); {
		k, repl, ok := r(prog, i, isTarget)
		if ok {
			for j := i + 1; j < i+k; j++ {
				if isTarget[j] {
					ok = false
				}
			}
		}
		if !ok || k <= 0 || i+k > len(prog) {
			newIndex[i] = len(out)
			out = append(out, prog[i])
			i++
			continue
		}
		changed = true
		for j := i; j < i+k; j++ {
			newIndex[j] = len(out)
		}
		out = append(out, repl...)
		i += k
	}
	newIndex[len(prog)] = len(out)
	if !changed {
		return prog, false
	}
	for i := range out {
		if out[i].IsJump() {
			out[i].target = newIndex[out[i].target]
		}
	}
	return out, true
}

// constAt recognises a constant at prog[i]: a const instruction followed
// by any pure unary operations, with no jump target inside. It returns the
// value and the number of instructions.
func constAt(prog []optInsn, i int, isTarget []bool) (uint64, int, bool) {
	if i >= len(prog) || !IsConst(prog[i].Op) {
		return 0, 0, false
	}
	v := prog[i].Imm
	n := 1
	for j := i + 1; j < len(prog) && !isTarget[j]; j++ {
		w, ok := foldUnary(prog[j].Insn, v)
		if !ok {
			break
		}
		v = w
		n++
	}
	return v, n, true
}

// foldUnary evaluates a pure one-operand instruction on v.
func foldUnary(in Insn, v uint64) (uint64, bool) {
	switch in.Op {
	case OpLogNot:
		return boolValue(v == 0), true
	case OpBitNot:
		return ^v, true
	case OpExt:
		if in.Imm == 0 {
			return 0, false
		}
		return SignExtend(v, in.Imm), true
	case OpZeroExt:
		return ZeroExtend(v, in.Imm), true
	}
	return 0, false
}

// foldBinary evaluates a pure two-operand instruction; division and
// remainder by zero are not folded.
func foldBinary(op Op, a, b uint64) (uint64, bool) {
	switch op {
	case OpAdd:
		return a + b, true
	case OpSub:
		return a - b, true
	case OpMul:
		return a * b, true
	case OpDivSigned, OpDivUnsigned, OpRemSigned, OpRemUnsigned:
		if b == 0 {
			return 0, false
		}
		return divide(op, a, b), true
	case OpLsh:
		return shiftLeft(a, b), true
	case OpRshSigned:
		return shiftRightSigned(a, b), true
	case OpRshUnsigned:
		return shiftRightUnsigned(a, b), true
	case OpBitAnd:
		return a & b, true
	case OpBitOr:
		return a | b, true
	case OpBitXor:
		return a ^ b, true
	case OpEqual:
		return boolValue(a == b), true
	case OpLessSigned:
		return boolValue(int64(a) < int64(b)), true
	case OpLessUnsigned:
		return boolValue(a < b), true
	}
	return 0, false
}

// materialize returns the shortest instruction sequence pushing v.
func materialize(v uint64) []optInsn {
	best := []optInsn{{Insn: Insn{Op: ConstOp(v), Imm: v}}}
	bestLen := seqLen(best)
	for _, bits := range []uint64{8, 16, 32} {
		low := ZeroExtend(v, bits)
		if SignExtend(low, bits) != v {
			continue
		}
		seq := []optInsn{{Insn: Insn{Op: ConstOp(low), Imm: low}}, {Insn: Insn{Op: OpExt, Imm: bits}}}
		if l := seqLen(seq); l < bestLen {
			best, bestLen = seq, l
		}
	}
	return best
}

func seqLen(seq []optInsn) int {
	n := 0
	for _, in := range seq {
		n += encodedLen(in.Insn)
	}
	return n
}

// better reports whether repl is an improvement over the k instructions at
// prog[i:]: fewer bytes, or as many bytes in fewer instructions.
func better(prog []optInsn, i, k int, repl []optInsn) bool {
	old := seqLen(prog[i : i+k])
	n := seqLen(repl)
	return n < old || n == old && len(repl) < k
}

// identityAfterConst reports whether "const v; op" leaves the value below
// unchanged.
func identityAfterConst(op Op, v uint64) bool {
	switch op {
	case OpAdd, OpSub, OpBitOr, OpBitXor, OpLsh, OpRshSigned, OpRshUnsigned:
		return v == 0
	case OpMul, OpDivSigned, OpDivUnsigned:
		return v == 1
	case OpBitAnd:
		return v == ^uint64(0)
	}
	return false
}

// refWidth returns the bit width a ref opcode loads, or 0.
func refWidth(op Op) uint64 {
	switch op {
	case OpRef8:
		return 8
	case OpRef16:
		return 16
	case OpRef32:
		return 32
	case OpRef64:
		return 64
	}
	return 0
}

// peephole is the local rewrite rule set.
func peephole(prog []optInsn, i int, isTarget []bool) (int, []optInsn, bool) {
	in := prog[i]
	next := func(j int) (optInsn, bool) {
		if j < len(prog) && !isTarget[j] {
			return prog[j], true
		}
		return optInsn{}, false
	}
	if v, n, ok := constAt(prog, i, isTarget); ok {
		if nx, ok := next(i + n); ok {
			switch {
			case nx.Op == OpPop:
				return n + 1, nil, true
			case nx.Op == OpIfGoto:
				if v != 0 {
					return n + 1, []optInsn{{Insn: Insn{Op: OpGoto}, target: nx.target}}, true
				}
				return n + 1, nil, true
			case identityAfterConst(nx.Op, v):
				return n + 1, nil, true
			}
			if w, m, ok := constAt(prog, i+n, isTarget); ok {
				if op, ok := next(i + n + m); ok {
					if r, ok := foldBinary(op.Op, v, w); ok {
						repl := materialize(r)
						if better(prog, i, n+m+1, repl) {
							return n + m + 1, repl, true
						}
					}
				}
			}
		}
		if repl := materialize(v); better(prog, i, n, repl) {
			return n, repl, true
		}
	}
	nx, hasNext := next(i + 1)
	switch in.Op {
	case OpExt, OpZeroExt:
		if in.Imm >= 64 {
			return 1, nil, true
		}
	case OpPick:
		if in.Imm == 0 {
			return 1, []optInsn{{Insn: Insn{Op: OpDup}}}, true
		}
	case OpGoto:
		if in.target == i+1 {
			return 1, nil, true
		}
	case OpIfGoto:
		if in.target == i+1 {
			return 1, []optInsn{{Insn: Insn{Op: OpPop}}}, true
		}
	}
	if !hasNext {
		return 0, nil, false
	}
	switch {
	case (in.Op == OpDup || in.Op == OpPick) && nx.Op == OpPop:
		return 2, nil, true
	case in.Op == OpSwap && nx.Op == OpSwap:
		return 2, nil, true
	case in.Op == OpSwap && isCommutative(nx.Op):
		return 2, []optInsn{nx}, true
	case in.Op == OpDup && nx.Op == OpSwap:
		return 2, []optInsn{in}, true
	case refWidth(in.Op) > 0 && nx.Op == OpZeroExt && nx.Imm >= refWidth(in.Op):
		return 2, []optInsn{in}, true
	case refWidth(in.Op) > 0 && nx.Op == OpExt && nx.Imm > refWidth(in.Op):
		return 2, []optInsn{in}, true
	case in.Op == OpExt && nx.Op == OpExt && nx.Imm >= in.Imm:
		return 2, []optInsn{in}, true
	case in.Op == OpZeroExt && nx.Op == OpZeroExt:
		if nx.Imm < in.Imm {
			return 2, []optInsn{nx}, true
		}
		return 2, []optInsn{in}, true
	case in.Op == OpZeroExt && nx.Op == OpExt && nx.Imm > in.Imm:
		return 2, []optInsn{in}, true
	case in.Op == OpExt && nx.Op == OpZeroExt && nx.Imm <= in.Imm:
		return 2, []optInsn{nx}, true
	case in.Op == OpLogNot && nx.Op == OpLogNot:
		if nx2, ok := next(i + 2); ok && nx2.Op == OpIfGoto {
			return 3, []optInsn{nx2}, true
		}
	case isBoolean(in.Op) && (nx.Op == OpZeroExt && nx.Imm >= 1 || nx.Op == OpExt && nx.Imm >= 2):
		return 2, []optInsn{in}, true
	}
	return 0, nil, false
}

// isCommutative reports whether op gives the same result with its two
// operands exchanged.
func isCommutative(op Op) bool {
	switch op {
	case OpAdd, OpMul, OpBitAnd, OpBitOr, OpBitXor, OpEqual:
		return true
	}
	return false
}

// isBoolean reports whether op always pushes 0 or 1.
func isBoolean(op Op) bool {
	switch op {
	case OpLogNot, OpEqual, OpLessSigned, OpLessUnsigned:
		return true
	}
	return false
}
