package server

import (
	"testing"

	"gotpstub/agentexpr"
)

func TestParseBreakpointConds(t *testing.T) {
	for _, tc := range []struct {
		opts  string
		conds int
		bad   bool
	}{
		{"", 0, false},
		{"X3,260005", 0, true}, // reg 5 without end: invalid bytecode
		{"X4,26000527", 1, false},
		{"X4,26000527X4,26000627", 2, false},       // gdb: no ';' between
		{"X4,26000527;X4,26000627", 2, false},      // tolerated
		{"X4,26000527;cmds:0,X3,220127", 1, false}, // commands ignored
		{"cmds:1,X3,220127;X4,26000527", 1, false}, // in any order
		{"X4,260005", 0, true},                     // short
		{"Xzz,26", 0, true},                        // bad length
		{"X2,2g27", 0, true},                       // bad hex
	} {
		conds, err := parseBreakpointConds(tc.opts)
		if (err != nil) != tc.bad || len(conds) != tc.conds {
			t.Errorf("%q: %d conditions, err %v; want %d, error %v", tc.opts, len(conds), err, tc.conds, tc.bad)
		}
	}
}

func FuzzParseBreakpointConds(f *testing.F) {
	for _, s := range []string{"X4,26000527", "X4,26000527X2,2227;cmds:0,X1,27", "X", "X1,", ";;;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, opts string) {
		conds, err := parseBreakpointConds(opts)
		if err != nil {
			return
		}
		for _, c := range conds {
			// What was accepted is valid bytecode: it can be evaluated
			// without panicking (an error is fine).
			_, _ = agentexpr.Eval(c, &agentexpr.Env{StepLimit: 1000})
		}
	})
}
