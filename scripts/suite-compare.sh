#!/usr/bin/env bash
# suite-compare.sh: a markdown table comparing two gdb.sum files of GDB's
# testsuite per .exp file (PASS and FAIL+UNRESOLVED counts, and the PASSes
# of the first that the second lacks).
#
# Usage: scripts/suite-compare.sh NAME_A A.sum NAME_B B.sum
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 NAME_A A.sum NAME_B B.sum" >&2; exit 2; }
awk -v na="$1" -v nb="$3" '
function file(line,   f) { f = line; sub(/^[A-Z]+: /, "", f); sub(/: .*/, "", f); return f }
FNR == 1 { which++ }
/^(PASS|FAIL|UNRESOLVED): / {
	f = file($0); files[f] = 1
	if ($1 == "PASS:") { pass[which, f]++; if (which == 1) want[$0] = f; else have[$0] = 1 }
	else fail[which, f]++
}
END {
	for (t in want) if (!(t in have)) lost[want[t]]++
	# Sort keys: 0 header, 1 rows (by file name), 2 totals.
	printf "0\t| file | %s PASS | %s FAIL | %s PASS | %s FAIL | %s PASSes missing in %s |\n", na, na, nb, nb, na, nb
	printf "0\t|---|---:|---:|---:|---:|---:|\n"
	for (f in files) {
		printf "1\t| %s | %d | %d | %d | %d | %d |\n", f, pass[1, f], fail[1, f], pass[2, f], fail[2, f], lost[f]
		tp1 += pass[1, f]; tf1 += fail[1, f]; tp2 += pass[2, f]; tf2 += fail[2, f]; tl += lost[f]
	}
	printf "2\t| **total** | **%d** | **%d** | **%d** | **%d** | **%d** |\n", tp1, tf1, tp2, tf2, tl
}' "$2" "$4" | LC_ALL=C sort -s -t "$(printf '\t')" -k1,1n -k2,2 | cut -f2-
