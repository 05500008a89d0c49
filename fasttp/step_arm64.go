package fasttp

import (
	"encoding/binary"
	"fmt"

	"gotpstub/inferior"
	"gotpstub/tdesc"
)

// stepInPad moves st, stopped at pc inside a pad with registers r, one
// instruction on: a single-step, except at a store-exclusive (the pads'
// ldaxr/stlxr loops: lane reservations, counters, `teval $n = $n + K`),
// which it performs itself. A single-step's exception clears the
// exclusive monitor that the load-exclusive before it set, so a stepped
// store-exclusive always fails and its loop would retry for ever; the
// stub instead writes the register to memory, reports success (status
// register 0) and moves the pc past it. With every other thread stopped
// (all-stop) that store is as atomic as the one it replaces; in
// non-stop a running thread updating the same word between the
// load-exclusive stepped before and this store would lose its update.
func stepInPad(st *inferior.Stopped, pc uint64, r *tdesc.Regs) error {
	var b [4]byte
	if n, err := st.ReadMemory(pc, b[:]); n != len(b) {
		return fmt.Errorf("reading the pad at %#x: %w", pc, err)
	}
	w := binary.LittleEndian.Uint32(b[:])
	if !isStoreExclusive(w) {
		return st.SingleStep()
	}
	size := 1 << (w >> 30)
	rs, rn, rt := int(w>>16&31), int(w>>5&31), int(w&31)
	addr := r.Uint64(rn) // rn 31 is sp, GDB's aarch64 register 31
	val := uint64(0)
	if rt != 31 { // rt 31 is xzr
		val = r.Uint64(rt)
	}
	buf := binary.LittleEndian.AppendUint64(nil, val)[:size]
	if err := st.WriteMemory(addr, buf); err != nil {
		return fmt.Errorf("store-exclusive at %#x to %#x: %w", pc, addr, err)
	}
	if rs != 31 {
		if err := r.SetUint64(rs, 0); err != nil {
			return err
		}
	}
	if err := r.SetUint64(r.Layout.PC, pc+4); err != nil {
		return err
	}
	return st.SetRegisters(r)
}

// isStoreExclusive reports whether w is a single-register
// store-exclusive: STXRB/H, STXR, STLXRB/H, STLXR (load/store exclusive
// class, L = 0, o1 = 0, not a pair).
func isStoreExclusive(w uint32) bool { return w&0x3fe00000 == 0x08000000 }

// leftPad ends a thread's way out of a pad by single-steps: nothing
// left over on arm64.
func leftPad(*inferior.Stopped, *tdesc.Regs) error { return nil }
