package server

import (
	"slices"
	"testing"
)

// TestResumedPids: which processes a vCont names, and whether one of its
// actions applies to every process.
func TestResumedPids(t *testing.T) {
	for _, tc := range []struct {
		pkt  string
		pids []int
		all  bool
	}{
		{"vCont;c", nil, true},
		{"vCont;c:p10.-1", []int{0x10}, false},
		{"vCont;s:p10.11;c:p10.-1", []int{0x10}, false},
		{"vCont;s:p10.11;c", []int{0x10}, true},
		{"vCont;c:p-1.-1", nil, true},
		{"vCont;c:p10.-1;c:p20.-1", []int{0x10, 0x20}, false},
		{"vCont;s:11", nil, false}, // no multiprocess ids: the current process
		{"vCont;c:pzz.1", nil, false},
		{"c", nil, false},
		{"vCont;;", nil, false},
	} {
		pids, all := resumedPids([]byte(tc.pkt))
		if !slices.Equal(pids, tc.pids) || all != tc.all {
			t.Errorf("%s: pids %v all %v, want %v %v", tc.pkt, pids, all, tc.pids, tc.all)
		}
	}
}

// FuzzResumedPids: any packet parses without a panic into distinct
// positive pids.
func FuzzResumedPids(f *testing.F) {
	for _, s := range []string{"vCont;c", "vCont;c:p10.-1;s:p20.21", "vCont;c:p-1.-1", "vCont;C05:pzz", "vCont;;r1,2:p3.4"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		pids, _ := resumedPids(pkt)
		seen := map[int]bool{}
		for _, pid := range pids {
			if pid <= 0 || seen[pid] {
				t.Fatalf("%q: pids %v", pkt, pids)
			}
			seen[pid] = true
		}
	})
}
