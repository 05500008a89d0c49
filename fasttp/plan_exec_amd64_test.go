package fasttp

import (
	"os"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestJumpSiteEndToEnd patches functions of relocBlobSource in this
// process the way a fast tracepoint is installed: PlanSite, FindPadAddr in
// the real free address space, a pad mapped there holding RelocateRun's
// code, Site.PatchBytes written over the function. Calling the patched
// function must give the original results, and punned heads must be int3.
func TestJumpSiteEndToEnd(t *testing.T) {
	mem, base, resetData := relocBlob(t)
	const page = 4096
	tests := []struct {
		name    string
		off     uint64
		puns    []int
		refused bool
	}{
		{"rip-relative first instruction, no puns", 0x000, nil, false},
		{"push; mov; call: puns at 1 and 4", 0x100, []int{1, 4}, false},
		{"lea [rip]: no puns", 0x180, nil, false},
		{"cmp; jl: pun at 3", 0x200, []int{3}, false},
		{"mov; xor: pun at 3", 0x280, []int{3}, false},
		{"mov; jrcxz: pun at 3", 0x2c0, []int{3}, false},
		{"cmp; call: pun at 3", 0x380, []int{3}, false},
		{"mov eax, 39: exactly 5 bytes", 0x400, nil, false},
		{"jmp rel8 then ud2: refused", 0x340, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := [][2]uint64{{1, 2}, {2, 1}, {3, 7}, {5, 5}}
			if tt.off != 0x280 { // f_loop with rdi = 0 would loop 2^64 times
				args = append(args, [2]uint64{0, 1})
			}
			addr := base + tt.off
			var want []uint64
			for _, a := range args {
				resetData()
				want = append(want, callNative(uintptr(addr), uintptr(a[0]), uintptr(a[1])))
			}
			site, err := PlanSite(mem[tt.off:tt.off+20], addr)
			if tt.refused {
				if err == nil {
					t.Fatalf("PlanSite accepted %+v", site)
				}
				return
			}
			if err != nil {
				t.Fatalf("PlanSite: %v", err)
			}
			if !slices.Equal(site.Puns, tt.puns) {
				t.Fatalf("puns %v, want %v", site.Puns, tt.puns)
			}
			maps, err := os.ReadFile("/proc/self/maps")
			if err != nil {
				t.Skipf("no /proc/self/maps: %v", err)
			}
			mapped, err := ParseMaps(maps)
			if err != nil {
				t.Fatal(err)
			}
			const padSize = 256
			var pad, pageStart, length uint64
			var p unsafe.Pointer
			for attempt := 0; ; attempt++ {
				pad, err = FindPadAddr(site, FreeRanges(mapped, 1<<20, 0x7ffffffff000), padSize)
				if err != nil {
					t.Fatalf("FindPadAddr: %v", err)
				}
				pageStart = pad &^ (page - 1)
				length = (pad + padSize - pageStart + page - 1) &^ (page - 1)
				// The hint address as a pointer derived from mem (not from a
				// bare uintptr); MAP_FIXED_NOREPLACE makes the kernel use it.
				hint := unsafe.Add(unsafe.Pointer(&mem[0]), int64(pageStart-base))
				p, err = unix.MmapPtr(-1, 0, hint, uintptr(length),
					unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_FIXED_NOREPLACE)
				if err == nil {
					break
				}
				if err != unix.EEXIST || attempt == 8 {
					t.Fatalf("map pad page %#x: %v", pageStart, err)
				}
				// Something (the Go runtime, another test) mapped there
				// since /proc/self/maps was read: read it again, leave
				// that page out too, and look again (as the installer
				// does in the inferior).
				if maps, err = os.ReadFile("/proc/self/maps"); err != nil {
					t.Fatal(err)
				}
				again, err := ParseMaps(maps)
				if err != nil {
					t.Fatal(err)
				}
				mapped = append(append(mapped, again...), Range{pageStart, pageStart + length})
			}
			if uint64(uintptr(p)) != pageStart {
				t.Fatalf("pad mapped at %p, want %#x", p, pageStart)
			}
			padMem := unsafe.Slice((*byte)(p), length)
			t.Cleanup(func() { unix.MunmapPtr(p, uintptr(length)) })
			code, heads, err := RelocateRun(site.Insns, pad, site.Resume())
			if err != nil {
				t.Fatalf("RelocateRun: %v", err)
			}
			if len(code) > padSize {
				t.Fatalf("relocated code is %d bytes", len(code))
			}
			copy(padMem[pad-pageStart:], code)
			patch, err := site.PatchBytes(pad)
			if err != nil {
				t.Fatalf("PatchBytes: %v", err)
			}
			copy(mem[tt.off:], patch)
			for _, pun := range site.Puns {
				if mem[tt.off+uint64(pun)] != Int3 {
					t.Errorf("byte at pun %d is %#x", pun, mem[tt.off+uint64(pun)])
				}
				if _, ok := heads[addr+uint64(pun)]; !ok {
					t.Errorf("no relocated head for the pun at %d", pun)
				}
			}
			for i, a := range args {
				resetData()
				if got := callNative(uintptr(addr), uintptr(a[0]), uintptr(a[1])); got != want[i] {
					t.Errorf("patched f(%d, %d) = %#x, want %#x", a[0], a[1], got, want[i])
				}
			}
			t.Logf("pad at %#x (rel32 %#x), %d bytes of relocated code", pad, int64(pad-(addr+JumpLen)), len(code))
		})
	}
}
