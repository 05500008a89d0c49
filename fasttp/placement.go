package fasttp

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"gotpstub/jit"
	"gotpstub/tracing"
)

// Placements describes how the Installer placed each tracepoint it holds,
// a line each, by tracepoint number: a jump (the bytes and instructions it
// covers, its pad, the int3s at covered instruction heads) or a trap (and
// why, for a fast tracepoint). `monitor ftrace` shows it.
func (in *Installer) Placements() string {
	in.mu.Lock()
	tps := make([]*tracing.Tracepoint, 0, len(in.sites)+len(in.viaTrap))
	for tp := range in.sites {
		tps = append(tps, tp)
	}
	for tp := range in.viaTrap {
		tps = append(tps, tp)
	}
	in.mu.Unlock()
	if len(tps) == 0 {
		return "no tracepoint is installed (they are, from tstart to tstop)\n" + in.laneUse()
	}
	slices.SortFunc(tps, func(a, b *tracing.Tracepoint) int {
		return cmp.Or(cmp.Compare(a.Num, b.Num), cmp.Compare(a.Addr, b.Addr))
	})
	var b strings.Builder
	for _, tp := range tps {
		b.WriteString(in.placement(tp))
		b.WriteByte('\n')
	}
	b.WriteString(in.laneUse())
	return b.String()
}

// laneUse says how pads find a thread's lane and how many threads own
// one (in the run going on or the last one), a line; "" before the
// first fast tracepoint.
func (in *Installer) laneUse() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	l := in.lanes
	if l == nil {
		return ""
	}
	how := "no thread pointer (rdfsbase not allowed, %fs:0 not a thread pointer): every thread shares one lane"
	switch {
	case in.fsBase:
		how = tpRegister
	case in.tpLoad:
		how = "thread pointer at %fs:0 (no rdfsbase here)"
	}
	owned := 0
	for i := range ownedLanes {
		if load64(l.ctl(), uint64(jit.CtlOwners+8*i)) != 0 {
			owned++
		}
	}
	return fmt.Sprintf("lanes: %s; %d of %d lanes owned by a thread, 1 shared\n", how, owned, ownedLanes)
}

// shapeNames names each shape in `monitor ftrace` and the --debug log.
var shapeNames = map[Shape]string{
	ShapePlain: "plain jump",
	ShapeKept:  "successor-preserving jump",
	ShapeShort: "short jump",
	ShapeEvict: "evicting jump",
	ShapeInt3:  "punned jump",
}

// placementLine is tp's placement line, made only when a log prints it.
type placementLine struct {
	in *Installer
	tp *tracing.Tracepoint
}

func (l placementLine) String() string { return l.in.placement(l.tp) }

// placement describes tp's placement in one line.
func (in *Installer) placement(tp *tracing.Tracepoint) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	head := fmt.Sprintf("tracepoint %d at %#x: ", tp.Num, tp.Addr)
	if s := in.sites[tp]; s != nil {
		shape := shapeNames[s.site.Shape()]
		heads := "no int3"
		if len(s.puns) > 0 {
			var as []string
			for _, a := range s.puns {
				as = append(as, fmt.Sprintf("%#x", a))
			}
			heads = "int3 at covered heads " + strings.Join(as, " ")
		}
		if s.site.Prefix > 0 {
			heads += fmt.Sprintf(", %d prefix bytes", s.site.Prefix)
		}
		if s.site.Keep > 0 {
			heads += fmt.Sprintf(", keeps %d bytes of the next instructions", s.site.Keep)
		}
		switch {
		case s.site.Host != nil:
			heads += fmt.Sprintf(", to a jump at %#x inside the instruction at %#x, which jumps to a trampoline at %#x", s.site.Slot, s.site.Host.Addr, s.site.Tramp)
		case s.site.Slot != 0:
			heads += fmt.Sprintf(", to a jump in the padding at %#x", s.site.Slot)
		}
		if e := s.site.Evicted; e != nil {
			heads += fmt.Sprintf(", the next instruction at %#x jumps to a trampoline at %#x", e.Addr, s.site.Tramp)
		}
		if s.site.Lead > 0 {
			heads += fmt.Sprintf(", at %#x after the push left in place (registers recorded as before it)", s.site.Addr)
		}
		if s.entry != s.padAddr {
			heads += fmt.Sprintf(", reached through a jump at %#x", s.entry)
		}
		if s.site.Dead > 0 {
			heads += fmt.Sprintf(", %d bytes of padding", s.site.Dead)
		}
		if s.compact {
			heads += ", 8-byte records"
		}
		return head + fmt.Sprintf("%s over %d bytes (%d instructions), pad at %#x (%d bytes), %s",
			shape, s.site.Covered, s.site.insnCount(), s.padAddr, s.padLen, heads)
	}
	why, ok := in.viaTrap[tp]
	switch {
	case !ok:
		return head + "not installed"
	case why == "" && !tp.Fast:
		return head + "trap (int3): gdb's trace"
	case why == "":
		return head + "trap (int3)"
	}
	return head + "trap (int3) instead of a jump: " + why
}
