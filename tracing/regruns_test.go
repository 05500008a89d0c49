package tracing

import (
	"encoding/hex"
	"fmt"
	"testing"

	"gotpstub/frames"
	"gotpstub/tdesc"
)

// `collect $rdi` (gdb: R20) stores rdi, what the actions read, and the
// PC, stack and frame pointers: the frame is small, the other registers
// are unavailable, and qTBuffer serves gdb a whole 'R'
// block (zeros elsewhere) so that gdb's tsave writes a valid tfile.
func TestCollectSomeRegisters(t *testing.T) {
	for _, tc := range []struct {
		mask      string
		action    string // another action, or ""
		frameSize int    // besides the header; 0: an 'R' block
		valid     []int  // nil: every register
	}{
		// rdi, and always rbp, rsp (one run with rdi) and rip.
		{"20", "", 3 + 2*4 + 24 + 8, []int{tdesc.RDI, tdesc.RBP, tdesc.RSP, regRIP}},
		{"30", "", 3 + 2*4 + 32 + 8, []int{tdesc.RSI, tdesc.RDI, tdesc.RBP, tdesc.RSP, regRIP}},
		{"10020", "", 3 + 2*4 + 24 + 8, []int{tdesc.RDI, tdesc.RBP, tdesc.RSP, regRIP}},
		// An expression reading rdx (reg 3): rdx too.
		{"20", "X4,26000327", 3 + 3*4 + 8 + 24 + 8, []int{tdesc.RDX, tdesc.RDI, tdesc.RBP, tdesc.RSP, regRIP}},
		{allRegs, "", 0, nil},
	} {
		t.Run(tc.mask, func(t *testing.T) {
			e, p, _ := newTestEngine(t)
			pkts := []string{"QTinit", "QTDP:1:" + hexAddr(addrWork) + ":E:0:0-", "QTDP:-1:" + hexAddr(addrWork) + ":R" + tc.mask}
			if tc.action != "" {
				pkts[2] += "-"
				pkts = append(pkts, "QTDP:-1:"+hexAddr(addrWork)+":"+tc.action)
			}
			mustOK(t, e, append(pkts, "QTStart")...)
			p.enterWork(1)
			p.thread.setReg(tdesc.RDI, 0x1122334455667788)
			p.thread.setReg(tdesc.RSI, 7)
			e.Hit(findTracepoint(t, e, 1), p.thread)
			want := tc.frameSize
			if want == 0 {
				want = 1 + p.layout.Size
			}
			if got := e.buf.Used(); got != frames.HeaderSize+want {
				t.Errorf("frame of %d bytes, want %d", got, frames.HeaderSize+want)
			}
			if r := send(t, e, "QTFrame:0"); r != "F0T1" {
				t.Fatalf("QTFrame:0 = %q", r)
			}
			regs, _ := e.FrameRegisters()
			for i, r := range p.layout.Regs {
				wantValid := tc.valid == nil
				for _, n := range tc.valid {
					wantValid = wantValid || n == r.Num
				}
				if regs.Valid[i] != wantValid {
					t.Errorf("register %s valid %v, want %v", r.Name, regs.Valid[i], wantValid)
				}
			}
			if got := regs.Uint64(tdesc.RDI); got != 0x1122334455667788 {
				t.Errorf("rdi %#x", got)
			}
			mustOK(t, e, "QTFrame:-1")
			raw := send(t, e, "qTBuffer:0,10000")
			b, err := hex.DecodeString(raw)
			if err != nil || len(b) != frames.HeaderSize+1+p.layout.Size || b[frames.HeaderSize] != 'R' {
				t.Fatalf("qTBuffer gave %d bytes (%v), want one frame with an 'R' block", len(b), err)
			}
			if r := send(t, e, fmt.Sprintf("qTBuffer:%x,10", len(b))); r != "l" {
				t.Errorf("qTBuffer at the end = %q, want l", r)
			}
		})
	}
}
