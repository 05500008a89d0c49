package a64

import (
	"errors"
	"strings"
	"testing"
)

// TestPlanSiteTable checks the patch and tail of every kind of site, and
// every refusal, as arm64asm disassembles them with absolute targets. The
// site is S; the pad P is 1 MB above it and its tail T 4 KB after P,
// unless said otherwise.
func TestPlanSiteTable(t *testing.T) {
	const S, P, T = 0x10000000, 0x10100000, 0x10101000
	tests := []struct {
		name       string
		word       uint32
		site, pad  uint64 // 0: S, P
		tail       uint64 // 0: T
		guarded    bool
		patch      string // the disassembled patch, or "error: ..." for the plan
		tailWant   string
		notResumes bool
	}{
		{name: "add", word: 0x8b030041, patch: "b 0x10100000", tailWant: "add x1, x2, x3; b 0x10000004"},
		{name: "adrp", word: 0xb0ffffe5, patch: "b 0x10100000", tailWant: "adrp x5, 0xfffd000; b 0x10000004"},
		{name: "ldr literal (far form: T is 1 MB away)", word: 0x58000041, patch: "b 0x10100000", tailWant: "adrp x1, 0x10000000; ldr x1, [x1,#8]; b 0x10000004"},
		{name: "b.cond", word: 0x5400008b, patch: "b 0x10100000", tailWant: "b.ge 0x10101008; b 0x10000010; b 0x10000004"},
		{name: "ldr literal, tail near", word: 0x58000041, tail: S + 0x1000, patch: "b 0x10100000", tailWant: "ldr x1, 0x10000008; b 0x10000004"},
		{name: "b.cond, tail near", word: 0x5400008b, tail: S + 0x1000, patch: "b 0x10100000", tailWant: "b.lt 0x10000010; b 0x10000004"},
		{name: "cbz", word: 0xb4000061, patch: "b 0x10100000", tailWant: "cbnz x1, 0x10101008; b 0x1000000c; b 0x10000004"},
		{name: "tbz far", word: 0x36080062, patch: "b 0x10100000", tailWant: "tbnz w2, #1, 0x10101008; b 0x1000000c; b 0x10000004"},
		{name: "b", word: 0x14000010, patch: "b 0x10100000", tailWant: "b 0x10000040", notResumes: true},
		{name: "bl", word: 0x97ffffff, patch: "b 0x10100000", tailWant: "adrp x30, 0x10000000; add x30, x30, #0x4; b 0xffffffc", notResumes: true},
		{name: "blr", word: 0xd63f0060, patch: "b 0x10100000", tailWant: "adrp x30, 0x10000000; add x30, x30, #0x4; ret x3", notResumes: true},
		{name: "b.al", word: 0x5400008e, patch: "b 0x10100000", tailWant: "b 0x10000010", notResumes: true},
		{name: "ret", word: 0xd65f03c0, patch: "b 0x10100000", tailWant: "ret", notResumes: true},
		{name: "br", word: 0xd61f00a0, patch: "b 0x10100000", tailWant: "br x5", notResumes: true},
		{name: "bti unguarded", word: 0xd503245f, patch: "b 0x10100000", tailWant: "hint #0x22; b 0x10000004"},
		{name: "pad below", word: 0x8b030041, pad: S - 0x8000000, tail: S - 0x7fff000, patch: "b 0x8000000", tailWant: "add x1, x2, x3; b 0x10000004"},
		{name: "pad at the top of the window", word: 0x8b030041, pad: S + 0x7fffffc, tail: S + 0x1000, patch: "b 0x17fffffc", tailWant: "add x1, x2, x3; b 0x10000004"},
		{name: "tail just before the site", word: 0x8b030041, tail: S - 8, patch: "b 0x10100000", tailWant: "add x1, x2, x3; b 0x10000004"},
		{name: "ldxr", word: 0xc85f7c20, patch: "error: exclusive"},
		{name: "stxr", word: 0xc8027c20, patch: "error: exclusive"},
		{name: "ldaxp", word: 0xc87f8820, patch: "error: exclusive"},
		{name: "brk", word: 0xd4200000, patch: "error: brk"},
		{name: "udf", word: 0x00000000, patch: "error: udf"},
		{name: "svc", word: 0xd4000001, patch: "error: svc"},
		{name: "blr x30", word: 0xd63f03c0, patch: "error: blr x30"},
		{name: "bti guarded", word: 0xd503245f, guarded: true, patch: "error: landing pad"},
		{name: "paciasp guarded", word: 0xd503233f, guarded: true, patch: "error: landing pad"},
		{name: "pad beyond 128MB", word: 0x8b030041, pad: S + 0x8000000, patch: "error: beyond the ±128 MB"},
		{name: "pad below 128MB", word: 0x8b030041, pad: S - 0x8000004, patch: "error: beyond the ±128 MB"},
		{name: "pad at the site", word: 0x8b030041, pad: S, patch: "error: pad at the site"},
		{name: "misaligned pad", word: 0x8b030041, pad: P + 2, patch: "error: not 4-byte aligned"},
		{name: "misaligned site", word: 0x8b030041, site: S + 1, patch: "error: not 4-byte aligned"},
		{name: "misaligned tail", word: 0x8b030041, tail: T + 2, patch: "error: not 4-byte aligned"},
		{name: "not a user address", word: 0x8b030041, site: 1 << 60, pad: 1<<60 + 8, patch: "error: not below"},
		{name: "tail over the site", word: 0x8b030041, tail: S - 4, patch: "error: overwrites the site"},
		{name: "branch back out of reach", word: 0x8b030041, pad: S + 0x7000000, tail: S + 0xa000000, patch: "error: out of range"},
		{name: "b.cond target out of reach", word: 0x5400800b, pad: S - 0x7000000, tail: S - 0x7fffff0, patch: "error: out of range"},
		{name: "b target out of reach", word: 0x15000000, pad: S - 0x7000000, tail: S - 0x7ffff00, patch: "error: out of range"},
	}
	for _, tc := range tests {
		site, pad, tail := or(tc.site, S), or(tc.pad, P), or(tc.tail, T)
		p, err := PlanSiteWith(site, tc.word, pad, tail, SiteOptions{Guarded: tc.guarded})
		if want, ok := strings.CutPrefix(tc.patch, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error saying %q", tc.name, err, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := dis1(p.Patch, site); got != tc.patch {
			t.Errorf("%s: patch %s, want %s", tc.name, got, tc.patch)
		}
		if got := disasm(p.Tail, tail); got != tc.tailWant {
			t.Errorf("%s: tail %s, want %s", tc.name, got, tc.tailWant)
		}
		if p.Resumes == tc.notResumes || p.Site != site || p.Pad != pad || p.TailAddr != tail || p.Insn.Word != tc.word {
			t.Errorf("%s: plan %+v", tc.name, p)
		}
	}
}

func or(v, def uint64) uint64 {
	if v == 0 {
		return def
	}
	return v
}

// TestPlanSiteErrors checks which sentinel each class of error wraps.
func TestPlanSiteErrors(t *testing.T) {
	const S = 0x10000000
	for _, tc := range []struct {
		word           uint32
		site, pad, tai uint64
		want           error
	}{
		{0xc85f7c20, S, S + 64, S + 128, ErrRefused},
		{0x8b030041, S, S + 1<<27, S + 128, ErrSite},
		{0x8b030041, S, S + 64, S + 3<<27, ErrOutOfRange},
	} {
		if _, err := PlanSite(tc.site, tc.word, tc.pad, tc.tai); !errors.Is(err, tc.want) {
			t.Errorf("%#08x: %v, want %v", tc.word, err, tc.want)
		}
	}
}

// TestPadWindow checks the window's bounds: the first and last pad
// addresses a b at the site reaches, and the clipping.
func TestPadWindow(t *testing.T) {
	for _, tc := range []struct{ site, lo, hi uint64 }{
		{0x10000000, 0x08000000, 0x18000000},
		{0x1000, 0, 0x8001000},
		{MaxUserAddr - 0x1000, MaxUserAddr - 0x1000 - 1<<27, MaxUserAddr},
	} {
		lo, hi := PadWindow(tc.site)
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("PadWindow(%#x) = %#x, %#x; want %#x, %#x", tc.site, lo, hi, tc.lo, tc.hi)
		}
		for _, pad := range []uint64{lo, hi - 4} {
			if pad == tc.site || pad&3 != 0 {
				continue
			}
			if _, err := PlanSite(tc.site, 0x8b030041, pad, tc.site+64); err != nil && !errors.Is(err, ErrOutOfRange) {
				t.Errorf("site %#x pad %#x: %v", tc.site, pad, err)
			}
		}
		if lo >= 4 {
			if _, err := PlanSite(tc.site, 0x8b030041, lo-4, tc.site+4096); !errors.Is(err, ErrSite) {
				t.Errorf("site %#x pad %#x below the window: %v", tc.site, lo-4, err)
			}
		}
	}
}

// FuzzPlanSite checks that no word or address panics the planner, and
// that an accepted plan's patch decodes to a b landing at the pad, its
// tail decodes word by word and ends with a branch, a branch back to the
// site + 4 exactly when it resumes.
func FuzzPlanSite(f *testing.F) {
	for _, w := range []uint32{0x8b030041, 0xb0ffffe5, 0x58000041, 0x5400008b, 0xb4000061, 0x97ffffff, 0xd65f03c0, 0xc85f7c20, 0} {
		f.Add(w, uint64(0x10000000), int64(0x100000), int64(0x101000))
	}
	f.Fuzz(func(t *testing.T, w uint32, site uint64, padOff, tailOff int64) {
		site &= 1<<53 - 1 // beyond MaxUserAddr too, but not only
		pad, tail := site+uint64(padOff), site+uint64(tailOff)
		p, err := PlanSite(site, w, pad, tail)
		if err != nil {
			if !errors.Is(err, ErrSite) && !errors.Is(err, ErrRefused) && !errors.Is(err, ErrOutOfRange) {
				t.Fatal(err)
			}
			return
		}
		b, err := Decode(p.Patch, site)
		if err != nil || b.Kind != KindB || b.Target != pad {
			t.Fatalf("patch %s at %#x, want b %#x (%v)", dis1(p.Patch, site), site, pad, err)
		}
		checkTail(t, p)
	})
}

// checkTail checks that a plan's tail decodes and ends as it should.
func checkTail(t *testing.T, p SitePlan) {
	t.Helper()
	if len(p.Tail) == 0 || len(p.Tail) > MaxWords {
		t.Fatalf("%d tail words", len(p.Tail))
	}
	var last Insn
	for i, c := range p.Tail {
		in, err := Decode(c, p.TailAddr+4*uint64(i))
		if err != nil {
			t.Fatalf("tail word %d: %v", i, err)
		}
		last = in
	}
	back := last.Kind == KindB && last.Target == p.Site+4
	if p.Resumes && !back {
		t.Fatalf("tail %s does not end with b %#x", disasm(p.Tail, p.TailAddr), p.Site+4)
	}
	if !p.Resumes && !neverFallsThrough(last) {
		t.Fatalf("tail %s falls through", disasm(p.Tail, p.TailAddr))
	}
}
