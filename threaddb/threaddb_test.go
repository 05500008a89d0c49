package threaddb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"
)

// fakeMemory is a sparse little-endian 64-bit word store.
type fakeMemory map[uint64]uint64

func (m fakeMemory) ReadMemory(addr uint64, buf []byte) (int, error) {
	for i := range buf {
		word, ok := m[(addr+uint64(i))&^7]
		if !ok {
			return i, fmt.Errorf("unmapped %#x", addr+uint64(i))
		}
		buf[i] = byte(word >> (8 * ((addr + uint64(i)) & 7)))
	}
	return len(buf), nil
}

// Layout of the fake inferior, with glibc 2.36 x86-64 descriptors.
const (
	fakeRtldPtr  = 0x1000 // __nptl_rtld_global
	fakeRtld     = 0x2000 // _rtld_global
	fakeSlotList = 0x3000 // first slotinfo list entry, len 2 (modids 0, 1)
	fakeSlotNext = 0x3800 // second entry, len 4 (modids 2..5)
	fakeMapMain  = 0x4000
	fakeMapDyn   = 0x5000
	fakeTP       = 0x9000
	fakeDTV      = 0x8010 // dtv[-1] at 0x8000
)

func fakeResolver(mem Memory, slotinfo bool) *Resolver {
	return fakeResolverVar(mem, slotinfo, false)
}

// fakeResolverVar: with slotinfoVar the list head is read from the
// variable at fakeRtld+4208 directly, as in a static executable.
func fakeResolverVar(mem Memory, slotinfo, slotinfoVar bool) *Resolver {
	rtldPtr := uint64(fakeRtldPtr)
	if slotinfoVar {
		rtldPtr = fakeRtld + 4208
	}
	d := func(bits, count, off uint32) Descriptor { return Descriptor{bits, count, off} }
	return &Resolver{
		mem: mem, order: binary.LittleEndian,
		linkMapTLSModid: d(64, 1, 1152), linkMapTLSOffset: d(64, 1, 1144),
		pthreadDTVP: d(64, 1, 8), dtvDTV: d(128, 134217727, 0),
		dtvPointerVal: d(64, 1, 0), dtvCounter: d(64, 1, 0),
		hasSlotinfo: slotinfo, slotinfoVar: slotinfoVar, slotinfoRootAddr: rtldPtr,
		slotinfoRoot: d(64, 1, 0), rtldSlotinfoList: d(64, 1, 4208),
		slotinfoListLen: d(64, 1, 0), slotinfoListNext: d(64, 1, 8),
		slotinfoListSlotinfo: d(128, 0, 16),
		slotinfoGen:          d(64, 1, 0), slotinfoMap: d(64, 1, 8),
	}
}

// fakeInferior: module 1 (main, static TLS at tp-0x40, dtv slot set),
// module 3 (dlopen'ed, generation 5, dtv slot given by dyn).
func fakeInferior(dtvGen, dyn uint64) fakeMemory {
	return fakeMemory{
		fakeRtldPtr:        fakeRtld,
		fakeRtld + 4208:    fakeSlotList,
		fakeSlotList:       2,
		fakeSlotList + 8:   fakeSlotNext,
		fakeSlotList + 16:  0, // modid 0
		fakeSlotList + 24:  0,
		fakeSlotList + 32:  1, // modid 1: gen 1, map main
		fakeSlotList + 40:  fakeMapMain,
		fakeSlotNext:       4,
		fakeSlotNext + 8:   0,
		fakeSlotNext + 16:  0, // modid 2: free
		fakeSlotNext + 24:  0,
		fakeSlotNext + 32:  5, // modid 3: gen 5, map dyn
		fakeSlotNext + 40:  fakeMapDyn,
		fakeMapMain + 1152: 1,
		fakeMapMain + 1144: 0x40,
		fakeMapDyn + 1152:  3,
		fakeMapDyn + 1144:  ^uint64(0), // FORCED_DYNAMIC_TLS_OFFSET
		fakeTP + 8:         fakeDTV,
		fakeDTV - 16:       4, // dtv[-1].counter: dtv length
		fakeDTV:            dtvGen,
		fakeDTV + 16:       fakeTP - 0x40, // dtv[1]
		fakeDTV + 2*16:     ^uint64(0),
		fakeDTV + 3*16:     dyn,
		fakeDTV + 4*16:     ^uint64(0),
		fakeDTV + 5*16:     0xdead0000, // beyond the dtv's length
		fakeSlotNext + 48:  7,          // modid 4: gen 7, no map
		fakeSlotNext + 56:  0,
		fakeSlotNext + 64:  1, // modid 5: gen 1, map dyn (stale dtv slot test)
		fakeSlotNext + 72:  fakeMapDyn,
		0x6000 + 1152:      5,
		0x7000 + 1152:      9,
		0x7100 + 1152:      0,
	}
}

func TestTLSAddressFake(t *testing.T) {
	tests := []struct {
		name     string
		slotinfo bool
		dtvGen   uint64
		dyn      uint64
		tp, lm   uint64
		offset   uint64
		want     uint64
		wantErr  error // nil: success; else errors.Is target (or errAny)
	}{
		{"main module via dtv", true, 5, 0xa000, fakeTP, fakeMapMain, 4, fakeTP - 0x40 + 4, nil},
		{"lm 0 is module 1", true, 5, 0xa000, fakeTP, 0, 8, fakeTP - 0x40 + 8, nil},
		{"dynamic module allocated", true, 5, 0xa000, fakeTP, fakeMapDyn, 0x10, 0xa010, nil},
		{"dynamic module unallocated", true, 5, ^uint64(0), fakeTP, fakeMapDyn, 0, 0, ErrTLSNotAllocated},
		{"dtv older than module, forced dynamic", true, 4, 0xa000, fakeTP, fakeMapDyn, 0, 0, ErrTLSNotAllocated},
		{"module id 0", true, 5, 0xa000, fakeTP, 0x7100, 0, 0, ErrNoTLS},
		{"module beyond slotinfo list", true, 5, 0xa000, fakeTP, 0x7000, 0, 0, ErrNoTLS},
		{"slotinfo without map", true, 7, 0xa000, fakeTP, 0x7300, 0, 0, errAny},
		{"thread pointer 0", true, 5, 0xa000, 0, fakeMapMain, 0, 0, ErrTLSNotAllocated},
		{"unreadable link_map", true, 5, 0xa000, fakeTP, 0xbad000, 0, 0, errAny},
		{"no slotinfo: main module", false, 5, 0xa000, fakeTP, fakeMapMain, 4, fakeTP - 0x40 + 4, nil},
		{"no slotinfo: dynamic allocated", false, 5, 0xa000, fakeTP, fakeMapDyn, 1, 0xa001, nil},
		{"no slotinfo: unallocated", false, 5, ^uint64(0), fakeTP, fakeMapDyn, 0, 0, ErrTLSNotAllocated},
		{"no slotinfo: beyond dtv length", false, 5, 0xa000, fakeTP, 0x6000, 0, 0, ErrTLSNotAllocated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := fakeInferior(tc.dtvGen, tc.dyn)
			mem[0x7300+1152] = 4
			r := fakeResolver(mem, tc.slotinfo)
			got, err := r.TLSAddress(tc.tp, tc.lm, tc.offset)
			switch {
			case tc.wantErr == nil:
				if err != nil || got != tc.want {
					t.Fatalf("TLSAddress = %#x, %v; want %#x", got, err, tc.want)
				}
			case tc.wantErr == errAny:
				if err == nil {
					t.Fatalf("TLSAddress = %#x, want an error", got)
				}
			default:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("TLSAddress = %#x, %v; want %v", got, err, tc.wantErr)
				}
			}
		})
	}
}

var errAny = errors.New("any error")

func TestSlotinfoListVariable(t *testing.T) {
	// Static executable: the slotinfo list head is a variable of its own.
	for _, tc := range []struct {
		lm, want uint64
		dyn      uint64
		wantErr  error
	}{
		{fakeMapMain, fakeTP - 0x40 + 4, 0xa000, nil},
		{fakeMapDyn, 0xa004, 0xa000, nil},
		{fakeMapDyn, 0, ^uint64(0), ErrTLSNotAllocated},
	} {
		r := fakeResolverVar(fakeInferior(5, tc.dyn), true, true)
		got, err := r.TLSAddress(fakeTP, tc.lm, 4)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("lm %#x: TLSAddress = %#x, %v; want %v", tc.lm, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("lm %#x: TLSAddress = %#x, %v; want %#x", tc.lm, got, err, tc.want)
		}
	}
}

func TestStaticTLSFallback(t *testing.T) {
	// Module 5 is stale in the dtv (generation 1 <= dtv 5 but slot
	// unallocated) and its link_map has a static TLS offset.
	mem := fakeInferior(5, 0xa000)
	mem[fakeMapDyn+1144] = 0x80
	mem[fakeMapDyn+1152] = 5
	mem[fakeDTV+5*16] = ^uint64(0)
	mem[fakeDTV-16] = 8
	r := fakeResolver(mem, true)
	got, err := r.TLSAddress(fakeTP, fakeMapDyn, 3)
	if err != nil || got != fakeTP-0x80+3 {
		t.Fatalf("TLSAddress = %#x, %v; want %#x", got, err, fakeTP-0x80+3)
	}
}

func TestParseDescriptor(t *testing.T) {
	le := func(w ...uint32) []byte {
		b := make([]byte, 4*len(w))
		for i, v := range w {
			binary.LittleEndian.PutUint32(b[4*i:], v)
		}
		return b
	}
	tests := []struct {
		name    string
		in      []byte
		want    Descriptor
		wantErr bool
	}{
		{"field", le(64, 1, 1152), Descriptor{64, 1, 1152}, false},
		{"array", le(128, 134217727, 0), Descriptor{128, 134217727, 0}, false},
		{"flexible array", le(128, 0, 16), Descriptor{128, 0, 16}, false},
		{"short", le(64, 1), Descriptor{}, true},
		{"long", le(64, 1, 0, 0), Descriptor{}, true},
		{"zero width", le(0, 1, 0), Descriptor{}, true},
		{"partial byte width", le(12, 1, 0), Descriptor{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDescriptor(tc.in, binary.LittleEndian)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseDescriptor = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestElementAddress(t *testing.T) {
	tests := []struct {
		d       Descriptor
		base    uint64
		index   uint64
		want    uint64
		wantErr bool
	}{
		{Descriptor{64, 1, 8}, 0x1000, 0, 0x1008, false},
		{Descriptor{64, 1, 8}, 0x1000, 1, 0, true},
		{Descriptor{128, 10, 0}, 0x1000, 3, 0x1030, false},
		{Descriptor{128, 10, 0}, 0x1000, 10, 0, true},
		{Descriptor{128, 0, 16}, 0x1000, 1000, 0x1000 + 16 + 16000, false},
	}
	for _, tc := range tests {
		got, err := tc.d.ElementAddress(tc.base, tc.index)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%+v.ElementAddress(%#x, %d) = %#x, %v; want %#x, error %v", tc.d, tc.base, tc.index, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestFindLibcMapping(t *testing.T) {
	tests := []struct {
		name    string
		maps    string
		exe     string
		want    libcMapping
		wantErr bool
	}{
		{"debian", "55d0a000-55d0b000 r--p 00000000 08:01 123 /usr/bin/cat\n" +
			"7f0000000000-7f0000026000 r--p 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6\n" +
			"7f0000026000-7f000017c000 r-xp 00026000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6\n", "/usr/bin/cat",
			libcMapping{0x7f0000000000, 456, "/usr/lib/x86_64-linux-gnu/libc.so.6"}, false},
		{"offset 0 not first", "7f0000026000-7f000017c000 r-xp 00026000 08:01 456 /lib/libc.so.6\n" +
			"7f0000000000-7f0000026000 r--p 00000000 08:01 456 /lib/libc.so.6\n", "",
			libcMapping{0x7f0000000000, 456, "/lib/libc.so.6"}, false},
		{"old name, deleted", "7f0000000000-7f0000026000 r--p 00000000 08:01 9 /lib/libc-2.31.so (deleted)\n", "",
			libcMapping{0x7f0000000000, 9, "/lib/libc-2.31.so"}, false},
		{"not libc", "7f0000000000-7f0000026000 r--p 00000000 08:01 9 /lib/libcrypt.so.1\n" +
			"7f0000000000-7f0000026000 r--p 00000000 08:01 9 /lib/mylibc.so.6\n", "", libcMapping{}, true},
		{"anonymous and garbage", "zzz\n7f00-7f10 rw-p 00000000 00:00 0\n\n", "", libcMapping{}, true},
		{"static executable", "00400000-00401000 r--p 00000000 08:01 77 /tmp/my prog\n" +
			"00401000-00498000 r-xp 00001000 08:01 77 /tmp/my prog\n", "/tmp/my prog",
			libcMapping{0x400000, 77, "/tmp/my prog"}, false},
		{"executable not mapped", "00400000-00401000 r--p 00000000 08:01 77 /tmp/other\n", "/tmp/prog",
			libcMapping{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findLibcMapping(tc.maps, tc.exe)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("findLibcMapping = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestNewResolverRejects(t *testing.T) {
	if _, err := NewResolver(fakeMemory{}, "/nonexistent/libc.so.6", 0); err == nil {
		t.Error("NewResolver accepted a missing file")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary is an ELF file without glibc's descriptors.
	if _, err := NewResolver(fakeMemory{}, exe, 0); !errors.Is(err, ErrUnsupported) && err == nil {
		t.Errorf("NewResolver(test binary) = %v, want an error", err)
	}
}

func FuzzParseDescriptor(f *testing.F) {
	f.Add([]byte{64, 0, 0, 0, 1, 0, 0, 0, 0x80, 4, 0, 0})
	f.Add([]byte{128, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDescriptor(b, binary.LittleEndian)
		if err != nil {
			return
		}
		if d.SizeBits == 0 || d.SizeBits%8 != 0 {
			t.Fatalf("accepted width %d", d.SizeBits)
		}
		var again [12]byte
		binary.LittleEndian.PutUint32(again[0:], d.SizeBits)
		binary.LittleEndian.PutUint32(again[4:], d.Count)
		binary.LittleEndian.PutUint32(again[8:], d.Offset)
		if !bytes.Equal(again[:], b) {
			t.Fatalf("round trip %x -> %+v -> %x", b, d, again)
		}
		d.ElementAddress(0x1000, 5)
	})
}

// FuzzReadLibc feeds arbitrary bytes as a libc image: parsing and
// descriptor lookup must fail cleanly, never panic.
func FuzzReadLibc(f *testing.F) {
	if b, err := os.ReadFile("/lib/x86_64-linux-gnu/libc.so.6"); err == nil && len(b) > 0 {
		f.Add(b[:min(len(b), 4096)])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		lib, err := readLibc(bytes.NewReader(b))
		if err != nil {
			return
		}
		newResolver(fakeMemory{}, lib, 0x7f0000000000)
	})
}

func FuzzFindLibcMapping(f *testing.F) {
	f.Add("7f0000000000-7f0000026000 r--p 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
	f.Add("zzz\n1-2 r 0 0 0 /libc.so.6")
	f.Fuzz(func(t *testing.T, maps string) {
		m, err := findLibcMapping(maps, "")
		if err == nil && !isLibcName(m.path) {
			t.Fatalf("found non-libc path %q", m.path)
		}
	})
}
