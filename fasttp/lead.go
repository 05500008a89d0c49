package fasttp

import "fmt"

// The jump after a function's first push.
//
// A function entry that starts with a 1- or 2-byte `push %reg` and
// whose jump cannot go at the entry itself (in a non-PIE executable's
// low addresses every pun there forces a displacement below 0) may get
// its jump one instruction later: the push stays and runs in place, the
// jump at the next instruction leads to a pad that records the registers
// as they were at the entry. A push changes only rsp (8 lower) and the
// 8 bytes below the entry's rsp, which no frame's registers hold: the pad
// adds 8 to the rsp it records (jit.PadSpec.SPBias) and records the
// entry as rip. The only difference a frame can show is those 8 bytes
// below the entry's stack pointer (the pushed register's value instead
// of what was there), memory no code of the function has written yet.
//
// A thread that reaches the instruction after the push other than from
// the push would run the tracepoint too: the caller offers these sites
// only at a function symbol's entry whose second instruction no direct
// branch of the function targets (prologues are not branched into).

// pushLen returns the length of in when it is a `push %reg` (50+r, or
// REX.B 41 50+r), 0 otherwise.
func pushLen(code []byte) int {
	switch {
	case len(code) >= 1 && code[0]&0xf8 == 0x50:
		return 1
	case len(code) >= 2 && code[0] == 0x41 && code[1]&0xf8 == 0x50:
		return 2
	}
	return 0
}

// LeadSites returns the sites of a jump after the push at addr (see
// above): the candidates SiteCandidates gives for the next instruction,
// each with Lead set to the push's length. back holds the bytes before
// addr, code those from addr. It refuses when the instruction at addr is
// not a push. The caller checks that addr is a function's entry and that
// nothing branches to the instruction after the push.
func LeadSites(back, code []byte, addr uint64, isCode CodeOracle) ([]Site, error) {
	n := pushLen(code)
	if n == 0 {
		return nil, fmt.Errorf("plan site %#x: %w: not a push", addr, ErrSiteRefused)
	}
	back = append(append([]byte(nil), back...), code[:n]...)
	back = back[len(back)-min(len(back), ShortBackLen):]
	cands, err := SiteCandidates(back, code[n:], addr+uint64(n), isCode)
	if err != nil {
		return nil, err
	}
	for i := range cands {
		cands[i].Lead = n
	}
	return cands, nil
}

// Start is the tracepoint's address: the first byte the site's code
// depends on (Addr less the push left in place, Lead).
func (s Site) Start() uint64 { return s.Addr - uint64(s.Lead) }

// Span is the number of bytes from Start whose instructions the site
// changes or depends on: the push left in place and the footprint.
func (s Site) Span() int { return s.Lead + s.Footprint() }
