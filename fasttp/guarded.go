package fasttp

import (
	"bufio"
	"bytes"
	"slices"
	"strings"
)

// guardRange is an executable mapping of the inferior and whether its
// pages are BTI-guarded (arm64 PROT_BTI: smaps' VmFlags "bt"), where an
// indirect branch must land on a landing pad.
type guardRange struct {
	Range
	bt bool
}

// parseGuarded lists the executable mappings of a /proc/PID/smaps text
// with their BTI flag, in address order. Lines it does not understand
// are skipped.
func parseGuarded(smaps []byte) []guardRange {
	var out []guardRange
	cur := -1 // index in out of the mapping whose fields follow, -1 for none
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			if cur >= 0 {
				out[cur].bt = slices.Contains(strings.Fields(flags), "bt")
			}
			continue
		}
		r, perms, ok := mappingHeader(line)
		switch {
		case !ok:
			continue
		case strings.Contains(perms, "x"):
			out = append(out, guardRange{Range: r})
			cur = len(out) - 1
		default:
			cur = -1
		}
	}
	return out
}

// mappingHeader parses the first line of a smaps entry ("start-end perms
// offset dev inode [path]"); ok is false for the field lines.
func mappingHeader(line string) (r Range, perms string, ok bool) {
	f := strings.Fields(line)
	if len(f) < 5 || len(f[1]) != 4 {
		return Range{}, "", false
	}
	r, err := parseAddrRange(f[0])
	if err != nil || r.End == r.Start {
		return Range{}, "", false
	}
	return r, f[1], true
}

// guardAt returns the mapping of rs holding addr.
func guardAt(rs []guardRange, addr uint64) (guardRange, bool) {
	for _, g := range rs {
		if addr >= g.Start && addr < g.End {
			return g, true
		}
	}
	return guardRange{}, false
}
