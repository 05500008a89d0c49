package fasttp

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestEvictSiteEndToEnd patches functions of relocBlobSource whose first
// instruction is shorter than a jump and whose second takes a plain jump
// (cmp; jge rel32 and cmp; call) by successor eviction, as the installer
// does: EvictSite, FindEvictAddrs in the real free address space, the
// pad (the first instruction relocated) and the trampoline (the second)
// mapped there, Site.PatchBytes over both. The patched functions must
// give the original results, and the second instruction's bytes must
// now be a jump to the trampoline.
func TestEvictSiteEndToEnd(t *testing.T) {
	mem, base, _ := relocBlob(t)
	for _, off := range []uint64{0x240, 0x380} {
		addr := base + off
		args := [][2]uint64{{1, 2}, {2, 1}, {3, 7}, {5, 5}, {0, 1}}
		var want []uint64
		for _, a := range args {
			want = append(want, callNative(uintptr(addr), uintptr(a[0]), uintptr(a[1])))
		}
		site, err := EvictSite(mem[off:off+20], addr, nil)
		if err != nil {
			t.Fatalf("EvictSite(%#x): %v", off, err)
		}
		const padSize = 256
		pad, tramp := mapEvictPads(t, mem, base, site, padSize)
		site.Tramp = tramp
		code, _, err := RelocateRun(site.Insns, pad, site.Resume())
		if err != nil {
			t.Fatal(err)
		}
		copy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&mem[0]), int64(pad-base))), len(code)), code)
		tcode, _, err := RelocateRun(site.Evicted.Insns, tramp, site.Evicted.Resume())
		if err != nil {
			t.Fatal(err)
		}
		copy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&mem[0]), int64(tramp-base))), len(tcode)), tcode)
		patch, err := site.PatchBytes(pad)
		if err != nil {
			t.Fatalf("PatchBytes: %v", err)
		}
		copy(mem[off:], patch)
		next := site.Evicted.Addr - base
		if mem[off] != 0xe9 || mem[next] != 0xe9 {
			t.Fatalf("patch % x: no jumps at %#x and %#x", patch, addr, site.Evicted.Addr)
		}
		if to := site.Evicted.Addr + 5 + uint64(int64(int32(binary.LittleEndian.Uint32(mem[next+1:])))); to != tramp {
			t.Errorf("the evicted instruction jumps to %#x, want the trampoline %#x", to, tramp)
		}
		for i, a := range args {
			if got := callNative(uintptr(addr), uintptr(a[0]), uintptr(a[1])); got != want[i] {
				t.Errorf("%#x: patched f(%d, %d) = %#x, want %#x", off, a[0], a[1], got, want[i])
			}
		}
		t.Logf("%#x: pad at %#x, trampoline at %#x, patch % x", off, pad, tramp, patch)
	}
}

// mapEvictPads finds the pad and trampoline addresses of site in this
// process's free address space and maps a page at each (retrying when
// something took the place meanwhile); they are unmapped at cleanup.
func mapEvictPads(t *testing.T, mem []byte, base uint64, site Site, padSize uint64) (pad, tramp uint64) {
	t.Helper()
	var extra []Range
	for attempt := 0; attempt < 8; attempt++ {
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Skipf("no /proc/self/maps: %v", err)
		}
		mapped, err := ParseMaps(maps)
		if err != nil {
			t.Fatal(err)
		}
		pad, tramp, err = FindEvictAddrs(site, FreeRanges(append(mapped, extra...), 1<<20, 0x7ffffffff000), padSize)
		if err != nil {
			t.Fatalf("FindEvictAddrs: %v", err)
		}
		if mapPageAt(t, mem, base, pad) && mapPageAt(t, mem, base, tramp) {
			return pad, tramp
		}
		extra = append(extra, Range{pad &^ 4095, pad&^4095 + 4096}, Range{tramp &^ 4095, tramp&^4095 + 4096})
	}
	t.Fatal("could not map the pad and trampoline pages")
	return 0, 0
}

// mapPageAt maps two pages from the one holding at (a pad may cross
// into the next); false if something is there.
func mapPageAt(t testing.TB, mem []byte, base, at uint64) bool {
	t.Helper()
	page := at &^ 4095
	hint := unsafe.Add(unsafe.Pointer(&mem[0]), int64(page-base))
	p, err := unix.MmapPtr(-1, 0, hint, 2*4096,
		unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		if err != unix.EEXIST {
			t.Fatalf("map page %#x: %v", page, err)
		}
		return false
	}
	t.Cleanup(func() { unix.MunmapPtr(p, 2*4096) })
	return true
}
