package fasttp

import (
	"bufio"
	"bytes"
	"strconv"
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
				out[cur].bt = hasFlag(flags, "bt")
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
	if len(f) < 5 {
		return Range{}, "", false
	}
	lo, hi, found := strings.Cut(f[0], "-")
	if !found {
		return Range{}, "", false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start || len(f[1]) != 4 {
		return Range{}, "", false
	}
	return Range{start, end}, f[1], true
}

// hasFlag reports whether the space-separated flags hold flag.
func hasFlag(flags, flag string) bool {
	for _, f := range strings.Fields(flags) {
		if f == flag {
			return true
		}
	}
	return false
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
