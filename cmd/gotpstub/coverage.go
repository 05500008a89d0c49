package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

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
	status := 0
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
		add(total, r)
	}
	if !asJSON && len(files) > 1 {
		printCoverage(os.Stdout, total)
	}
	return status
}

// add pools r into total (not its list of traps).
func add(total, r *coverage.Report) {
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
	for k, v := range r.Reasons {
		total.Reasons[k] += v
	}
}

// printCoverage writes r as a short table.
func printCoverage(w io.Writer, r *coverage.Report) {
	fmt.Fprintf(w, "%s: %d instructions, %d get a jump (%.2f%%: %d plain, %d successor-preserving, %d short (%d into a neighbour), %d evicting, %d punned, %d after an entry's push; %d punned jumps put an int3 on a branch target; %d end in padding; %d have prefixes), %d of %d function entries (%.2f%%)\n",
		r.File, r.Instructions, r.Jump, coverage.Percent(r.Jump, r.Instructions), r.Plain, r.Kept, r.Short+r.Neighbour, r.Neighbour, r.Evicted, r.Punned, r.AfterPush,
		r.Int3AtBranchTarget, r.Padding, r.Prefixed, r.EntryJump, r.Entries, coverage.Percent(r.EntryJump, r.Entries))
	if r.BranchTargetOverwritten > 0 {
		fmt.Fprintf(w, "  BUG: %d jumps overwrite a known branch target\n", r.BranchTargetOverwritten)
	}
	keys := make([]string, 0, len(r.Reasons))
	for k := range r.Reasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return r.Reasons[keys[i]] > r.Reasons[keys[j]] })
	for _, k := range keys {
		fmt.Fprintf(w, "  trap %7d (%5.2f%%)  %s\n", r.Reasons[k], coverage.Percent(r.Reasons[k], r.Instructions), k)
	}
}
