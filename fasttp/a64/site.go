package a64

import (
	"errors"
	"fmt"
)

// ErrSite is wrapped by PlanSite's errors about the addresses it is given
// (alignment, reach, overlap), as opposed to the instruction (ErrRefused)
// or a relocated branch's reach (ErrOutOfRange).
var ErrSite = errors.New("a64: bad fast tracepoint site")

// MaxUserAddr bounds the addresses PlanSite accepts: arm64 Linux user
// space ends below 2^52 (52-bit virtual addresses with 64 KB pages or
// LPA2; 2^48 otherwise), so no plan's arithmetic wraps around.
const MaxUserAddr = 1 << 52

// SiteOptions adjusts PlanSiteWith.
type SiteOptions struct {
	// Relocation options (Veneer) for the displaced instruction.
	Options
	// Guarded: the site's page is BTI-guarded (PROT_BTI). A landing pad
	// (bti, paciasp, pacibsp) is then refused: the `b pad` replacing it
	// is no landing pad, so an indirect branch to the site would fault.
	Guarded bool
}

// SitePlan is what an arm64 fast tracepoint writes into the inferior:
// Patch at Site, once the pad (at Pad) and the Tail words (at TailAddr,
// the pad's PadSpec.TailAddr) are in place and visible to instruction
// fetch.
type SitePlan struct {
	Site     uint64 // the tracepoint's address
	Insn     Insn   // the displaced instruction, decoded at Site
	Pad      uint64 // the pad's address (PadSpec.Addr)
	Patch    uint32 // `b Pad`, the word that replaces Insn.Word at Site
	TailAddr uint64 // where Tail goes (PadSpec.TailAddr)
	// Tail is the displaced instruction relocated to TailAddr, followed,
	// when it may fall through, by `b Site+4` (Resumes).
	Tail []uint32
	// Resumes: the tail may branch back to Site+4. False for the
	// instructions that never fall through: b, bl, blr (they branch to
	// their target; bl and blr return to Site+4 through x30), br, ret,
	// braa/brab/braaz/brabz, retaa/retab and b.al/b.nv.
	Resumes bool
}

// PlanSite plans an arm64 fast tracepoint at site, whose instruction
// word is word, with its pad at pad and the pad's tail at tail: see
// PlanSiteWith.
func PlanSite(site uint64, word uint32, pad, tail uint64) (SitePlan, error) {
	return PlanSiteWith(site, word, pad, tail, SiteOptions{})
}

// PlanSiteWith returns the patch word and the tail of a fast tracepoint.
// It fails wrapping ErrSite when an address is misaligned, not below
// MaxUserAddr, when the pad is the site itself or beyond the ±128 MB of
// a b (see PadWindow), or when the tail would overwrite the site;
// wrapping ErrRefused when the instruction must not run out of line
// (Decode's list; with opt.Guarded also landing pads); wrapping
// ErrOutOfRange when the relocated instruction cannot reach its target
// or Site+4 from tail. On error the plan is zero. It only computes: the
// caller writes the pad, the tail, then the patch.
func PlanSiteWith(site uint64, word uint32, pad, tail uint64, opt SiteOptions) (SitePlan, error) {
	p := SitePlan{Site: site, Pad: pad, TailAddr: tail}
	if err := checkSiteAddrs(site, pad, tail); err != nil {
		return SitePlan{}, err
	}
	in, err := Decode(word, site)
	if err != nil {
		return SitePlan{}, fmt.Errorf("fast tracepoint at %#x: %w", site, err)
	}
	if in.Landing && opt.Guarded {
		return SitePlan{}, refuse(word, site, "BTI landing pad in a guarded page: the b to the pad would not be one, and an indirect branch to the site would fault")
	}
	p.Insn, p.Patch = in, encB(int64(pad-site))
	if neverFallsThrough(in) && in.Kind == KindPlain {
		p.Tail = []uint32{word} // br, ret...: copied, nothing follows
	} else if p.Tail, err = RelocateWith(in, tail, site+4, opt.Options); err != nil {
		return SitePlan{}, fmt.Errorf("fast tracepoint at %#x: %w", site, err)
	}
	p.Resumes = !neverFallsThrough(in)
	if site >= tail && site < tail+4*uint64(len(p.Tail)) {
		return SitePlan{}, fmt.Errorf("%w: tail %#x (%d words) overwrites the site %#x", ErrSite, tail, len(p.Tail), site)
	}
	return p, nil
}

// checkSiteAddrs checks the addresses of a plan.
func checkSiteAddrs(site, pad, tail uint64) error {
	switch {
	case site|pad|tail >= MaxUserAddr:
		return fmt.Errorf("%w: site %#x, pad %#x or tail %#x not below %#x", ErrSite, site, pad, tail, uint64(MaxUserAddr))
	case site&3 != 0 || pad&3 != 0 || tail&3 != 0:
		return fmt.Errorf("%w: site %#x, pad %#x or tail %#x not 4-byte aligned", ErrSite, site, pad, tail)
	case pad == site:
		return fmt.Errorf("%w: pad at the site %#x itself", ErrSite, site)
	}
	if lo, hi := PadWindow(site); pad < lo || pad >= hi {
		return fmt.Errorf("%w: pad %#x beyond the ±128 MB a b at %#x reaches [%#x, %#x)", ErrSite, pad, site, lo, hi)
	}
	return nil
}

// PadWindow returns the addresses [lo, hi) the `b` at site reaches, from
// site-128 MB to site+128 MB-4, clipped to [0, MaxUserAddr): where a pad
// for site may go (any 4-byte aligned address in it but site itself). An
// arena shared by several sites must lie in the intersection of their
// windows. The pad's tail must also be within ±128 MB of the pad (the
// pad's b to it) and, when it resumes, of Site+4; a relocated branch
// reaches ±128 MB from the tail (PlanSite reports ErrOutOfRange
// otherwise), so tails close to their sites are best.
func PadWindow(site uint64) (lo, hi uint64) {
	lo, hi = 0, site+rangeB
	if site > rangeB {
		lo = site - rangeB
	}
	return lo, min(hi, MaxUserAddr)
}

// neverFallsThrough reports whether in always branches elsewhere: b, bl,
// blr, b.al, b.nv, and the plain branches to a register (br, ret and
// their pointer-authenticating forms).
func neverFallsThrough(in Insn) bool {
	switch in.Kind {
	case KindB, KindBL, KindBLR:
		return true
	case KindBCond:
		return in.Cond >= 14
	case KindPlain:
		return in.Word&0xfe000000 == 0xd6000000 // decodeBranchReg accepted it: br, ret, bra*, reta*
	}
	return false
}
