package tracing

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// fakeMarker is a StaticDataSource with one marker at 0x401000 whose
// arguments are rdi (GDB register 5) and 4 bytes at rsp-4 (register 7).
type fakeMarker struct{}

func (fakeMarker) StaticData(addr uint64, reg func(num int) (uint64, bool), mem func(addr uint64, buf []byte) bool) []byte {
	if addr != 0x401000 {
		return nil
	}
	di, _ := reg(5)
	sp, ok := reg(7)
	var b [4]byte
	if !ok || !mem(sp-4, b[:]) {
		return fmt.Appendf(nil, "demo:m(%d, ?)", di)
	}
	return fmt.Appendf(nil, "demo:m(%d, %d)", di, binary.LittleEndian.Uint32(b[:]))
}

func (fakeMarker) StaticReads(addr uint64) (StaticReads, bool) {
	if addr != 0x401000 {
		return StaticReads{}, false
	}
	return StaticReads{Memory: []Action{{Kind: ActionMemory, BaseReg: 7, Offset: ^uint64(3), Len: 4}}, MinText: 12}, true
}

// A fast hit at a static tracepoint collecting $_sdata: the engine makes
// the 'S' block from the record's registers and the marker's memory (the
// last blocks), which leave the frame; the tracepoint's own blocks stay.
func TestFastHitStaticData(t *testing.T) {
	const sp = 0x7ff000
	for _, tc := range []struct {
		name    string
		actions []string
		blocks  []byte
		want    string
		memory  int // 'M' blocks left in the frame
		regs    bool
	}{
		{"sdata only", []string{"L"}, mBlock(sp-4, []byte{42, 0, 0, 0}), "demo:m(9, 42)", 0, false},
		{"memory unreadable", []string{"L"}, nil, "demo:m(9, ?)", 0, false},
		{"with the tracepoint's own block of the same range", []string{"M7,fffffffffffffffc,4", "L"},
			append(mBlock(sp-4, []byte{42, 0, 0, 0}), mBlock(sp-4, []byte{42, 0, 0, 0})...), "demo:m(9, 42)", 1, false},
		{"with registers and a variable", []string{"R1", "L"},
			append(vBlock(2, 7), mBlock(sp-4, []byte{1, 1, 0, 0})...), "demo:m(9, 257)", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProgram()
			inst := newFakeInstaller()
			e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
			e.SetStaticData(fakeMarker{})
			e.SetFastTracepoints(true)
			mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:0-")
			for _, a := range tc.actions {
				mustOK(t, e, "QTDP:-1:401000:"+a)
			}
			mustOK(t, e, "QTStart")
			regs := make([]byte, 8*24)
			binary.LittleEndian.PutUint64(regs[8*5:], 9)
			binary.LittleEndian.PutUint64(regs[8*7:], sp)
			binary.LittleEndian.PutUint64(regs[8*regRIP:], 0x401000)
			e.FastHits([]FastRecord{{TP: findTracepoint(t, e, 1), Regs: regs, Blocks: tc.blocks}})
			if r := send(t, e, "QTFrame:0"); r != "F0T1" {
				t.Fatalf("QTFrame:0 = %q", r)
			}
			e.mu.Lock()
			f := e.frame
			e.mu.Unlock()
			if got := string(f.Static()); got != tc.want {
				t.Errorf("static data %q, want %q", got, tc.want)
			}
			if got := len(f.Memory()); got != tc.memory {
				t.Errorf("%d memory blocks in the frame, want %d", got, tc.memory)
			}
			if got := f.Registers() != nil; got != tc.regs {
				t.Errorf("register block in the frame: %v, want %v", got, tc.regs)
			}
		})
	}
}
