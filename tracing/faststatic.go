package tracing

import (
	"encoding/binary"
)

// collectsStatic reports whether tp's actions collect the static trace
// data ($_sdata, an L action).
func (tp *Tracepoint) collectsStatic() bool {
	for _, a := range tp.Actions {
		if a.Kind == ActionStaticData {
			return true
		}
	}
	return false
}

// jitBlock is one 'M' or 'V' block of a fast hit's blocks (jit format):
// its bytes, and for 'M' its address and data.
type jitBlock struct {
	raw  []byte
	addr uint64
	data []byte
}

// splitJITBlocks cuts jit-format blocks into their blocks; it stops at
// the first malformed one (addBlocks reports it).
func splitJITBlocks(b []byte, out []jitBlock) []jitBlock {
	for len(b) > 0 {
		n := 0
		var blk jitBlock
		switch {
		case b[0] == 'M' && len(b) >= 11:
			size := int(binary.LittleEndian.Uint16(b[9:11]))
			if len(b) < 11+size {
				return append(out, jitBlock{raw: b})
			}
			n = 11 + size
			blk.addr, blk.data = binary.LittleEndian.Uint64(b[1:9]), b[11:n]
		case b[0] == 'V' && len(b) >= 13:
			n = 13
		default:
			return append(out, jitBlock{raw: b})
		}
		blk.raw = b[:n]
		out = append(out, blk)
		b = b[n:]
	}
	return out
}

// fastStaticLocked makes the static trace data ($_sdata) of fast hit r at
// static tracepoint tp, from the registers and the memory the pad
// recorded for it (StaticReads: the last 'M' blocks), adds it to the
// frame and returns the other blocks. A range the pad could not read has
// no block (or a short one) and reads as unreadable, as at a trap.
func (e *Engine) fastStaticLocked(tp *Tracepoint, r *FastRecord, blocks []byte) []byte {
	reads, ok := e.static.StaticReads(tp.Addr)
	if !ok {
		return blocks
	}
	reg := func(num int) (uint64, bool) {
		if num < 0 || 8*num+8 > len(r.Regs) {
			return 0, false
		}
		return binary.LittleEndian.Uint64(r.Regs[8*num:]), true
	}
	all := splitJITBlocks(blocks, e.staticScratch[:0])
	e.staticScratch = all
	// The pad collects the marker's ranges after the tracepoint's own
	// actions: take each one's block from the end.
	taken := make([]bool, len(all))
	var mine []jitBlock
	for i := len(reads.Memory) - 1; i >= 0; i-- {
		m := &reads.Memory[i]
		addr := m.Offset
		if m.BaseReg >= 0 {
			base, ok := reg(m.BaseReg)
			if !ok {
				continue
			}
			addr += base
		}
		for j := len(all) - 1; j >= 0; j-- {
			if !taken[j] && all[j].data != nil && all[j].addr == addr && uint64(len(all[j].data)) <= m.Len {
				taken[j] = true
				mine = append(mine, all[j])
				break
			}
		}
	}
	mem := func(addr uint64, buf []byte) bool {
		for _, b := range mine {
			if addr >= b.addr && addr-b.addr+uint64(len(buf)) <= uint64(len(b.data)) {
				copy(buf, b.data[addr-b.addr:])
				return true
			}
		}
		return false
	}
	e.fastFrame.AddStatic(e.static.StaticData(tp.Addr, reg, mem))
	if len(mine) == 0 {
		return blocks
	}
	rest := e.staticRest[:0]
	for j, b := range all {
		if !taken[j] {
			rest = append(rest, b.raw...)
		}
	}
	e.staticRest = rest
	return rest
}
