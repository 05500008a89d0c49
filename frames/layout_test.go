package frames

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestFrameLayout(t *testing.T) {
	tests := []struct {
		name  string
		tp    int
		build func(f *FrameBuilder)
		want  []byte
	}{
		{
			name:  "header only",
			tp:    1,
			build: func(f *FrameBuilder) {},
			want:  []byte{0x01, 0x00, 0x00, 0x00, 0x00, 0x00},
		},
		{
			name: "registers memory variable",
			tp:   3,
			build: func(f *FrameBuilder) {
				f.AddRegisters([]byte{1, 2, 3, 4})
				f.AddMemory(0x1000, []byte{0xaa, 0xbb})
				f.AddTSV(5, -2)
			},
			want: []byte{
				0x03, 0x00, 0x1f, 0x00, 0x00, 0x00, // tpnum 3, 31 data bytes
				'R', 1, 2, 3, 4,
				'M', 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0x02, 0x00, 0xaa, 0xbb,
				'V', 0x05, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
			},
		},
		{
			name: "big tracepoint number and address",
			tp:   0x1234,
			build: func(f *FrameBuilder) {
				f.AddMemory(0x8877665544332211, []byte{0x42})
				f.AddTSV(-1, 0x0102030405060708)
			},
			want: []byte{
				0x34, 0x12, 0x19, 0x00, 0x00, 0x00, // 12 + 13 = 25 data bytes
				'M', 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x01, 0x00, 0x42,
				'V', 0xff, 0xff, 0xff, 0xff, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
			},
		},
		{
			name:  "empty memory range still makes a block",
			tp:    2,
			build: func(f *FrameBuilder) { f.AddMemory(0x10, nil) },
			want: []byte{
				0x02, 0x00, 0x0b, 0x00, 0x00, 0x00,
				'M', 0x10, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuffer(1 << 20)
			f := b.NewFrame(tc.tp)
			tc.build(f)
			if f.Size() != len(tc.want) {
				t.Errorf("Size() = %d before commit, want %d", f.Size(), len(tc.want))
			}
			if err := b.Commit(f); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			got := b.ReadRaw(0, 1<<20)
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("frame bytes\n got % x\nwant % x", got, tc.want)
			}
			fr, ok := b.Frame(0)
			if !ok {
				t.Fatal("Frame(0) missing")
			}
			if fr.TPNum != tc.tp {
				t.Errorf("TPNum = %d, want %d", fr.TPNum, tc.tp)
			}
			if err := fr.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestAddMemorySplitsLongRanges(t *testing.T) {
	data := make([]byte, 2*MaxMemoryBlock+10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b := NewBuffer(1 << 20)
	f := b.NewFrame(1)
	f.AddMemory(0x4000, data)
	if err := b.Commit(f); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	fr, _ := b.Frame(0)
	mem := fr.Memory()
	wantLens := []int{MaxMemoryBlock, MaxMemoryBlock, 10}
	if len(mem) != len(wantLens) {
		t.Fatalf("got %d memory blocks, want %d", len(mem), len(wantLens))
	}
	addr := uint64(0x4000)
	var joined []byte
	for i, m := range mem {
		if m.Addr != addr || len(m.Data) != wantLens[i] {
			t.Errorf("block %d: addr %#x len %d, want addr %#x len %d", i, m.Addr, len(m.Data), addr, wantLens[i])
		}
		addr += uint64(len(m.Data))
		joined = append(joined, m.Data...)
	}
	if !bytes.Equal(joined, data) {
		t.Error("memory blocks do not concatenate to the collected data")
	}
	// Second block header, by hand: 'M', address 0x4000+0xffff, length 0xffff.
	second := fr.Raw[HeaderSize+1+10+MaxMemoryBlock:]
	wantHdr := []byte{'M', 0xff, 0x3f, 0x01, 0, 0, 0, 0, 0, 0xff, 0xff}
	if !bytes.Equal(second[:11], wantHdr) {
		t.Errorf("second block header % x, want % x", second[:11], wantHdr)
	}
	if got := binary.LittleEndian.Uint32(fr.Raw[2:6]); int(got) != len(fr.Raw)-HeaderSize {
		t.Errorf("data size %d, frame has %d data bytes", got, len(fr.Raw)-HeaderSize)
	}
}

func TestFrameAccessors(t *testing.T) {
	b := NewBuffer(1 << 20)
	f := b.NewFrame(7)
	f.AddMemory(0x100, []byte{1, 2, 3, 4})
	f.AddRegisters(regs(24, 16, 0xdeadbeef, 9))
	f.AddTSV(1, 10)
	f.AddMemory(0x200, []byte{5, 6})
	f.AddTSV(1, 11) // recorded twice: the last wins
	f.AddTSV(2, -5)
	if err := b.Commit(f); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	fr, _ := b.Frame(0)
	if got := fr.Registers(); !bytes.Equal(got, regs(24, 16, 0xdeadbeef, 9)) {
		t.Errorf("Registers() = % x", got)
	}
	if pc, ok := fr.PC(16); !ok || pc != 0xdeadbeef {
		t.Errorf("PC(16) = %#x, %v; want 0xdeadbeef, true", pc, ok)
	}
	if _, ok := fr.PC(20); ok {
		t.Error("PC beyond the register block reported ok")
	}
	mem := fr.Memory()
	if len(mem) != 2 || mem[0].Addr != 0x100 || !bytes.Equal(mem[1].Data, []byte{5, 6}) {
		t.Errorf("Memory() = %+v", mem)
	}
	tsvs := fr.TSVs()
	want := []TSVBlock{{1, 10}, {1, 11}, {2, -5}}
	if len(tsvs) != len(want) {
		t.Fatalf("TSVs() = %+v, want %+v", tsvs, want)
	}
	for i := range want {
		if tsvs[i] != want[i] {
			t.Errorf("TSVs()[%d] = %+v, want %+v", i, tsvs[i], want[i])
		}
	}
	if v, ok := fr.TSV(1); !ok || v != 11 {
		t.Errorf("TSV(1) = %d, %v; want 11, true", v, ok)
	}
	if _, ok := fr.TSV(3); ok {
		t.Error("TSV(3) found")
	}
	buf := make([]byte, 8)
	if n := fr.ReadMemory(0x102, buf); n != 2 || !bytes.Equal(buf[:2], []byte{3, 4}) {
		t.Errorf("ReadMemory(0x102) = %d % x", n, buf[:n])
	}
	if n := fr.ReadMemory(0x104, buf); n != 0 {
		t.Errorf("ReadMemory(0x104) = %d, want 0 (not collected)", n)
	}
	xml := string(TraceframeInfoXML(fr, 0))
	wantXML := "<traceframe-info>\n" +
		"<memory start=\"0x100\" length=\"0x4\"/>\n" +
		"<tvar id=\"1\"/>\n" +
		"<memory start=\"0x200\" length=\"0x2\"/>\n" +
		"<tvar id=\"1\"/>\n" +
		"<tvar id=\"2\"/>\n" +
		"</traceframe-info>\n"
	if xml != wantXML {
		t.Errorf("TraceframeInfoXML =\n%s\nwant\n%s", xml, wantXML)
	}
}

func TestFramePCFallback(t *testing.T) {
	b := NewBuffer(1 << 20)
	noRegs := b.NewFrame(1)
	noRegs.SetFallbackPC(0x401000)
	zeroPC := b.NewFrame(1)
	zeroPC.AddRegisters(regs(16, 8, 0, 1))
	zeroPC.SetFallbackPC(0x401000)
	bare := b.NewFrame(1)
	for _, f := range []*FrameBuilder{noRegs, zeroPC, bare} {
		if err := b.Commit(f); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	tests := []struct {
		num    int
		wantPC uint64
		wantOK bool
	}{
		{0, 0x401000, true},
		{1, 0x401000, true},
		{2, 0, false},
	}
	for _, tc := range tests {
		fr, _ := b.Frame(tc.num)
		pc, ok := fr.PC(8)
		if pc != tc.wantPC || ok != tc.wantOK {
			t.Errorf("frame %d: PC = %#x, %v; want %#x, %v", tc.num, pc, ok, tc.wantPC, tc.wantOK)
		}
	}
	if fr, ok := b.FindPC(-1, 0x401000, 8); !ok || fr.Num != 0 {
		t.Errorf("FindPC(fallback) = %v, %v", fr, ok)
	}
	if fr, ok := b.FindRange(1, 0, 0x400000, false, 8); ok {
		t.Errorf("FindRange outside found frame %d; frame 2 has no address and must not match", fr.Num)
	}
}
