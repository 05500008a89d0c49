package main

import (
	"bytes"
	"strings"
	"testing"

	"gotpstub/coverage"
)

// TestPrintCoverage: each ISA's report prints its own counts; a total of
// files of both ISAs prints what they share.
func TestPrintCoverage(t *testing.T) {
	x86 := &coverage.Report{File: "x", ISA: coverage.ISAx86, Instructions: 10, Jump: 9, Plain: 5, Punned: 4, Entries: 2, EntryJump: 2,
		Reasons: map[string]int{"no pad address": 1}}
	a64 := &coverage.Report{File: "a", ISA: coverage.ISAA64, Instructions: 100, Jump: 97, Plain: 97, Entries: 3, EntryJump: 3,
		Functions: "eh_frame", Data: 2, Reasons: map[string]int{"svc": 2, "brk": 1}}
	for _, c := range []struct {
		r       *coverage.Report
		want    []string
		notWant []string
	}{
		{x86, []string{"x: 10 instructions, 9 get a jump (90.00%: 5 plain,", "4 punned", "2 of 2 function entries", "trap       1"}, []string{"arm64"}},
		{a64, []string{"a: 100 instructions, 97 get a jump (97.00%, arm64: a b over the one instruction), 3 of 3 function entries (100.00%); functions from eh_frame; 2 data words ($d) skipped\n",
			"  trap       2 ( 2.00%)  svc\n  trap       1 ( 1.00%)  brk\n"}, []string{"punned", "successor"}},
	} {
		var b bytes.Buffer
		printCoverage(&b, c.r)
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: output %q lacks %q", c.r.File, b.String(), w)
			}
		}
		for _, w := range c.notWant {
			if strings.Contains(b.String(), w) {
				t.Errorf("%s: output %q has %q", c.r.File, b.String(), w)
			}
		}
	}

	for _, c := range []struct {
		files []*coverage.Report
		isa   string
	}{
		{[]*coverage.Report{a64, a64}, coverage.ISAA64},
		{[]*coverage.Report{x86}, coverage.ISAx86},
		{[]*coverage.Report{a64, x86, a64}, ""},
	} {
		total := &coverage.Report{File: "total", Reasons: map[string]int{}}
		for i, r := range c.files {
			add(total, r, i)
		}
		if total.ISA != c.isa {
			t.Errorf("total of %d files: ISA %q, want %q", len(c.files), total.ISA, c.isa)
		}
		if c.isa == "" {
			var b bytes.Buffer
			printCoverage(&b, total)
			if want := "total: 210 instructions, 203 get a jump (96.67%), 8 of 8 function entries (100.00%)\n"; !strings.HasPrefix(b.String(), want) {
				t.Errorf("output %q, want %q first", b.String(), want)
			}
		}
	}
}
