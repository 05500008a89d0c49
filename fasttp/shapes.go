package fasttp

import (
	"fmt"
	"sort"
	"strings"
)

// Shape names a kind of jump placement, as --ftrace-shapes lists them.
type Shape string

// The shapes, in the order SiteCandidates tries them.
const (
	ShapePlain Shape = "plain" // a jump over whole instructions (PlanSite)
	ShapeKept  Shape = "kept"  // successor-preserving pun (KeepSite)
	ShapeShort Shape = "short" // jmp rel8 to a slot in padding or a neighbour (ShortSites)
	ShapeEvict Shape = "evict" // the next instruction evicted to a trampoline (EvictSite)
	ShapeInt3  Shape = "int3"  // int3s at covered heads, with or without prefixes
	// ShapeAfterPush is not a shape of its own but allows any of the
	// others after a function entry's push (LeadSites, Site.Lead).
	ShapeAfterPush Shape = "push"
)

// Shape returns the kind of s.
func (s Site) Shape() Shape {
	switch {
	case s.Slot != 0: // a short jump, even one that keeps a byte
		return ShapeShort
	case s.Keep > 0:
		return ShapeKept
	case s.Evicted != nil:
		return ShapeEvict
	case len(s.Puns) > 0:
		return ShapeInt3
	}
	return ShapePlain
}

// ParseShapes parses a comma-separated list of shape names ("all": every
// one).
func ParseShapes(list string) (map[Shape]bool, error) {
	all := []Shape{ShapePlain, ShapeKept, ShapeShort, ShapeEvict, ShapeInt3, ShapeAfterPush}
	out := map[Shape]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			for _, s := range all {
				out[s] = true
			}
			continue
		}
		known := false
		for _, s := range all {
			if Shape(name) == s {
				out[s], known = true, true
			}
		}
		if !known {
			names := make([]string, len(all))
			for i, s := range all {
				names[i] = string(s)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("unknown jump shape %q (known: all, %s)", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// SetShapes restricts the jump shapes the installer may use (nil: all);
// a fast tracepoint that fits none of them is a trap.
func (in *Installer) SetShapes(shapes map[Shape]bool) {
	in.mu.Lock()
	in.shapes = shapes
	in.mu.Unlock()
}

// allowedShapes returns the candidates whose shape is allowed, in order.
func (in *Installer) allowedShapes(cands []Site) ([]Site, error) {
	in.mu.Lock()
	shapes := in.shapes
	in.mu.Unlock()
	if shapes == nil {
		return cands, nil
	}
	var out []Site
	for _, c := range cands {
		if shapes[c.Shape()] && (c.Lead == 0 || shapes[ShapeAfterPush]) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no allowed jump shape fits (--ftrace-shapes; this site takes %s)", cands[0].Shape())
	}
	return out, nil
}
