package fasttp

import (
	"os"
	"testing"
	"unsafe"
)

// shapeFn is a function of a few instructions followed by padding and a
// a ret (GNU as, intel syntax), at a 16-byte aligned address; the
// successor-preserving jump keeps b8 80 ff, a pad 8 MB below:
//
//	xor eax, eax        // 31 c0          +0  (2 bytes: short, kept, evict)
//	mov eax, 0xff80     // b8 80 ff 00 00 +2  (5 bytes: plain)
//	add eax, edi        // 01 f8          +7
//	ret                 // c3             +9
//	nop x6              // 90 ...         +10 (padding to +16)
var shapeFn = []byte{0x31, 0xc0, 0xb8, 0x80, 0xff, 0, 0, 0x01, 0xf8, 0xc3, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xc3}

// BenchmarkShapes measures what each jump shape adds to a call of
// shapeFn: its pad here is only the relocated instructions and the jump
// back (no tracing), so the difference to "unpatched" is the shape's
// own jumps (jit's BenchmarkPadHit measures what a pad does on a hit).
func BenchmarkShapes(b *testing.B) {
	for _, tc := range []struct {
		name string
		off  uint64
		plan func(code []byte, addr uint64) (Site, error)
	}{
		{"unpatched", 0, nil},
		{"plain jump at the mov", 2, PlanSite},
		{"successor-preserving at the xor", 0, func(c []byte, a uint64) (Site, error) { return KeepSite(c, a) }},
		{"short jump at the xor", 0, func(c []byte, a uint64) (Site, error) { return ShortSite(c, a, nil) }},
		{"evicting jump at the xor", 0, func(c []byte, a uint64) (Site, error) { return EvictSite(c, a, nil) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			mem := mapRWX(b, 4096)
			base := uint64(uintptr(unsafe.Pointer(&mem[0])))
			copy(mem, shapeFn)
			if tc.plan != nil {
				patchShape(b, mem, base, tc.off, tc.plan)
			}
			if got := callNative(uintptr(base), 41, 0); got != 0xff80+41 {
				b.Fatalf("f(41) = %d", got)
			}
			for b.Loop() {
				callNative(uintptr(base), 41, 0)
			}
		})
	}
}

// patchShape plans the shape at base+off, maps its pad (and trampoline)
// where they must go, writes the relocated code there and the patch.
func patchShape(b testing.TB, mem []byte, base, off uint64, plan func([]byte, uint64) (Site, error)) {
	addr := base + off
	site, err := plan(mem[off:off+32], addr)
	if err != nil {
		b.Skipf("no such shape here: %v", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		b.Skip(err)
	}
	mapped, _ := ParseMaps(maps)
	// Keep a page clear around mem: the pad pages must not touch it.
	mapped = append(mapped, Range{base - 4096, base + 8192})
	pad, tramp, err := FindPadAddrs(site, FreeRanges(mapped, 1<<20, 0x7ffffffff000), 256)
	if err != nil {
		b.Skipf("no pad address: %v", err)
	}
	for _, at := range []uint64{pad, tramp} {
		if at != 0 && !mapPageAt(b, mem, base, at) {
			b.Skipf("the page at %#x was taken meanwhile", at)
		}
	}
	write := func(at uint64, code []byte) {
		copy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&mem[0]), int64(at-base))), len(code)), code)
	}
	code, _, err := RelocateRun(site.Insns, pad, site.Resume())
	if err != nil {
		b.Fatal(err)
	}
	write(pad, code)
	if e := site.Evicted; e != nil {
		site.Tramp = tramp
		tc, _, err := RelocateRun(e.Insns, tramp, e.Resume())
		if err != nil {
			b.Fatal(err)
		}
		write(tramp, tc)
	}
	if site.Slot != 0 {
		slot, err := site.SlotBytes(pad)
		if err != nil {
			b.Fatal(err)
		}
		write(site.Slot, slot)
	}
	patch, err := site.PatchBytes(pad)
	if err != nil {
		b.Fatal(err)
	}
	write(addr, patch)
}

// TestPaddedKeepSiteRuns patches shapeFn's 2-byte xor with a
// prefix-padded successor-preserving jump (3e e9, then the mov's first
// four bytes as the displacement: the pad exactly 0xff80b8 bytes after
// the jump) and calls it: the result must be the unpatched one, the mov
// untouched (a thread arriving there runs it as it was).
func TestPaddedKeepSiteRuns(t *testing.T) {
	mem := mapRWX(t, 4096)
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	copy(mem, shapeFn)
	padded := func(c []byte, a uint64) (Site, error) {
		k, err := KeepSite(c, a)
		if err != nil {
			return Site{}, err
		}
		v := PaddedKeepSites(c, k)
		if len(v) != 1 {
			t.Fatalf("%d padded variants of a 2-byte first instruction, want 1", len(v))
		}
		return v[0], nil
	}
	patchShape(t, mem, base, 0, padded)
	if want := []byte{PadPrefix, 0xe9, 0xb8, 0x80, 0xff, 0x00, 0x00}; string(mem[:7]) != string(want) {
		t.Fatalf("patched bytes % x, want % x", mem[:7], want)
	}
	for _, x := range []uintptr{0, 41, 1 << 20} {
		if got, want := callNative(uintptr(base), x, 0), uint64(0xff80+x); got != want {
			t.Errorf("patched f(%d) = %#x, want %#x", x, got, want)
		}
		// Entering at the kept mov skips the xor and the jump.
		if got, want := callNative(uintptr(base+2), x, 0), uint64(0xff80+x); got != want {
			t.Errorf("f at the mov (%d) = %#x, want %#x", x, got, want)
		}
	}
}

// keptShortFn starts with a 1-byte instruction whose short jump keeps
// the next byte (0x31, the xor's opcode) as its displacement: the slot
// must be 0x33 bytes after the jump, at +51, where padding after a
// second ret is.
//
//	cwde                // 98             +0  (1 byte: the site)
//	xor eax, eax        // 31 c0          +1  (kept: rel8 0x31)
//	mov eax, 0xff80     // b8 80 ff 00 00 +3
//	add eax, edi        // 01 f8          +8
//	ret                 // c3             +10
//	nop x5              // 90 ...         +11 (padding to +16)
//	mov eax, 1 x6       // b8 01 00 00 00 +16
//	xor eax, eax x2     // 31 c0          +46
//	ret                 // c3             +50
//	nop x13             // 90 ...         +51 (padding to +64: the slot)
//	ret                 // c3             +64
var keptShortFn = func() []byte {
	b := []byte{0x98, 0x31, 0xc0, 0xb8, 0x80, 0xff, 0, 0, 0x01, 0xf8, 0xc3, 0x90, 0x90, 0x90, 0x90, 0x90}
	for range 6 {
		b = append(b, 0xb8, 1, 0, 0, 0)
	}
	b = append(b, 0x31, 0xc0, 0x31, 0xc0, 0xc3)
	for range 13 {
		b = append(b, 0x90)
	}
	return append(b, 0xc3)
}()

// TestKeptShortSiteRuns patches keptShortFn's 1-byte cwde with a short
// jump whose displacement is the xor's own first byte, to a slot in the
// padding at +51 holding the jump to the pad, and calls it: the result
// must be the unpatched one, and the xor untouched (a thread arriving
// there runs it as it was).
func TestKeptShortSiteRuns(t *testing.T) {
	mem := mapRWX(t, 4096)
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	copy(mem, keptShortFn)
	yes := func(uint64) bool { return true }
	var planned Site
	patchShape(t, mem, base, 0, func(_ []byte, a uint64) (Site, error) {
		sites, err := ShortSites(nil, mem[:len(keptShortFn)], a, yes)
		if err != nil {
			t.Fatalf("ShortSites: %v", err)
		}
		if len(sites) != 1 || sites[0].Slot != base+51 || sites[0].Covered != 1 || sites[0].Keep != 1 || sites[0].Footprint() != 2 {
			t.Fatalf("sites %+v, want one slot at +51 covering 1 byte and keeping 1", sites)
		}
		planned = sites[0]
		return planned, nil
	})
	if planned.Shape() != ShapeShort {
		t.Errorf("shape %v, want short", planned.Shape())
	}
	if want := []byte{0xeb, 0x31, 0xc0}; string(mem[:3]) != string(want) {
		t.Fatalf("patched bytes % x, want % x", mem[:3], want)
	}
	if mem[51] != 0xe9 {
		t.Fatalf("slot bytes % x, want a jmp rel32", mem[51:56])
	}
	for _, x := range []uintptr{0, 41, 1 << 20} {
		if got, want := callNative(uintptr(base), x, 0), uint64(0xff80+x); got != want {
			t.Errorf("patched f(%d) = %#x, want %#x", x, got, want)
		}
		if got, want := callNative(uintptr(base+1), x, 0), uint64(0xff80+x); got != want {
			t.Errorf("f at the kept xor (%d) = %#x, want %#x", x, got, want)
		}
	}
}
