package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"gotpstub/coverage"
)

// coverageCmd is `gotpstub coverage [--json] FILE...`.
func coverageCmd(args []string) int {
	asJSON := false
	var files []string
	for _, a := range args {
		switch {
		case a == "--json":
			asJSON = true
		case len(a) > 1 && a[0] == '-':
			fmt.Fprintf(os.Stderr, "gotpstub coverage: unknown option %q\n", a)
			return 2
		default:
			files = append(files, a)
		}
	}
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "usage: gotpstub coverage [--json] FILE...")
		return 2
	}
	total := &coverage.Report{File: "total", Reasons: map[string]int{}}
	status, n := 0, 0
	for _, f := range files {
		r, err := coverage.File(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gotpstub coverage: %v\n", err)
			status = 1
			continue
		}
		if asJSON {
			if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
				fmt.Fprintf(os.Stderr, "gotpstub coverage: %v\n", err)
				return 1
			}
		} else {
			printCoverage(os.Stdout, r)
		}
		add(total, r, n)
		n++
	}
	if !asJSON && len(files) > 1 {
		printCoverage(os.Stdout, total)
	}
	return status
}

// add pools r, the report of the n-th file (from 0), into total (not
// its list of traps). The total's ISA is its files' when they all have
// the same, else "".
func add(total, r *coverage.Report, n int) {
	if n == 0 {
		total.ISA = r.ISA
	} else if total.ISA != r.ISA {
		total.ISA = ""
	}
	total.Instructions += r.Instructions
	total.Jump += r.Jump
	total.Plain += r.Plain
	total.Punned += r.Punned
	total.Int3AtBranchTarget += r.Int3AtBranchTarget
	total.Padding += r.Padding
	total.Prefixed += r.Prefixed
	total.Kept += r.Kept
	total.Evicted += r.Evicted
	total.Short += r.Short
	total.Neighbour += r.Neighbour
	total.AfterPush += r.AfterPush
	total.BranchTargetOverwritten += r.BranchTargetOverwritten
	total.Entries += r.Entries
	total.EntryJump += r.EntryJump
	total.Data += r.Data
	for k, v := range r.Reasons {
		total.Reasons[k] += v
	}
}

// printCoverage writes r as a short table: the counts of r's ISA (the
// x86-64 shapes, or arm64's), then the traps by reason.
func printCoverage(w io.Writer, r *coverage.Report) {
	jumps := fmt.Sprintf("%s: %d instructions, %d get a jump (%.2f%%", r.File, r.Instructions, r.Jump, coverage.Percent(r.Jump, r.Instructions))
	entries := fmt.Sprintf("%d of %d function entries (%.2f%%)", r.EntryJump, r.Entries, coverage.Percent(r.EntryJump, r.Entries))
	switch r.ISA {
	case coverage.ISAx86:
		fmt.Fprintf(w, "%s: %d plain, %d successor-preserving, %d short (%d into a neighbour), %d evicting, %d punned, %d after an entry's push; %d punned jumps put an int3 on a branch target; %d end in padding; %d have prefixes), %s\n",
			jumps, r.Plain, r.Kept, r.Short+r.Neighbour, r.Neighbour, r.Evicted, r.Punned, r.AfterPush,
			r.Int3AtBranchTarget, r.Padding, r.Prefixed, entries)
	case coverage.ISAA64:
		var notes []string
		if r.Functions != "" {
			notes = append(notes, "functions from "+r.Functions)
		}
		if r.Data > 0 {
			notes = append(notes, fmt.Sprintf("%d data words ($d) skipped", r.Data))
		}
		if r.Guarded {
			notes = append(notes, "BTI-guarded")
		}
		tail := ""
		if len(notes) > 0 {
			tail = "; " + strings.Join(notes, "; ")
		}
		fmt.Fprintf(w, "%s, arm64: a b over the one instruction), %s%s\n", jumps, entries, tail)
	default: // a total of files of both ISAs
		fmt.Fprintf(w, "%s), %s\n", jumps, entries)
	}
	if r.BranchTargetOverwritten > 0 {
		fmt.Fprintf(w, "  BUG: %d jumps overwrite a known branch target\n", r.BranchTargetOverwritten)
	}
	keys := make([]string, 0, len(r.Reasons))
	for k := range r.Reasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if r.Reasons[keys[i]] != r.Reasons[keys[j]] {
			return r.Reasons[keys[i]] > r.Reasons[keys[j]]
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		fmt.Fprintf(w, "  trap %7d (%5.2f%%)  %s\n", r.Reasons[k], coverage.Percent(r.Reasons[k], r.Instructions), k)
	}
}
