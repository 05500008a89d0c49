package sdt

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// note builds one NT_STAPSDT note.
func note(pc, base, sem uint64, provider, name, args string) []byte {
	desc := binary.LittleEndian.AppendUint64(nil, pc)
	desc = binary.LittleEndian.AppendUint64(desc, base)
	desc = binary.LittleEndian.AppendUint64(desc, sem)
	desc = append(desc, provider+"\x00"+name+"\x00"+args+"\x00"...)
	b := binary.LittleEndian.AppendUint32(nil, 8)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, ntStapSDT)
	b = append(b, "stapsdt\x00"...)
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestParseNotes(t *testing.T) {
	data := append(note(0x1067, 0x200f, 0, "demo", "tick", "-4@%eax -8@%rdx"), note(0x1100, 0x200f, 0x4018, "demo", "guarded", "")...)
	other := binary.LittleEndian.AppendUint32(nil, 4) // a GNU note: skipped
	other = binary.LittleEndian.AppendUint32(other, 4)
	other = binary.LittleEndian.AppendUint32(other, 1)
	other = append(other, "GNU\x00abcd"...)
	ms, err := ParseNotes(append(other, data...), 0x300f) // prelinked 0x1000 higher
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID() != "demo:tick" || ms[0].PC != 0x2067 || ms[0].Semaphore != 0 || ms[0].Args != "-4@%eax -8@%rdx" ||
		ms[1].PC != 0x2100 || ms[1].Semaphore != 0x5018 {
		t.Fatalf("markers %+v", ms)
	}
	for _, bad := range [][]byte{data[:5], data[:20], note(1, 2, 3, "x", "y", "z")[:30]} {
		if _, err := ParseNotes(bad, 0); err == nil {
			t.Errorf("no error for % x", bad)
		}
	}
}

func TestParseArgsAndFormat(t *testing.T) {
	args, err := ParseArgs("-4@%eax 8@-8(%rbp) 1@%r9b -2@$-7 8@(%rsp) 2@%r12w")
	if err != nil {
		t.Fatal(err)
	}
	regs := map[string]uint64{"rax": 0xffffffff, "rbp": 0x1008, "r9": 0x1ff, "rsp": 0x2000, "r12": 0x12345}
	mem := map[uint64][]byte{0x1000: {0x2a, 0, 0, 0, 0, 0, 0, 0}}
	reg := func(n string) (uint64, bool) { v, ok := regs[n]; return v, ok }
	read := func(addr uint64, buf []byte) bool {
		b, ok := mem[addr]
		if !ok {
			return false
		}
		copy(buf, b)
		return true
	}
	got := Format(Marker{Provider: "p", Name: "n"}, args, reg, read)
	if want := "p:n(-1, 42, 255, -7, ?, 9029)"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
	for _, bad := range []string{"4", "3@%eax", "4@%foo", "4@8(%eax", "x@%eax", "4@sym(%rip)",
		"4@x31", "4@q0", "8@[x1", "8@[x1, y]", "8@[foo]", "4@x01"} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("ParseArgs(%q): no error", bad)
		}
	}
}

// aarch64's operand syntax: registers by name, brackets, plain or #
// immediates; the comma inside brackets does not split arguments.
func TestParseArgsAArch64(t *testing.T) {
	args, err := ParseArgs("-4@w0 8@[sp, 16] 8@[x29, #-8] 4@[x1] -4@-7 8@#3 8@x30 8@sp")
	if err != nil {
		t.Fatal(err)
	}
	regs := map[string]uint64{"x0": 0xffffffff, "sp": 0x2000, "x29": 0x1008, "x1": 0x3000, "x30": 0x400123}
	mem := map[uint64][]byte{0x2010: {0x2a, 0, 0, 0, 0, 0, 0, 0}, 0x1000: {5, 0, 0, 0, 0, 0, 0, 0}}
	reg := func(n string) (uint64, bool) { v, ok := regs[n]; return v, ok }
	read := func(addr uint64, buf []byte) bool {
		b, ok := mem[addr]
		if ok {
			copy(buf, b)
		}
		return ok
	}
	got := Format(Marker{Provider: "p", Name: "n"}, args, reg, read)
	if want := "p:n(-1, 42, 5, ?, -7, 3, 4194595, 8192)"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
}

// A real program's markers, built with <sys/sdt.h>.
func TestReadELF(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x86-64 markers")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "m.c")
	os.WriteFile(src, []byte(`#include <sys/sdt.h>
int main(int argc, char **argv) { DTRACE_PROBE2(demo, tick, argc, argv); return 0; }
`), 0o644)
	bin := filepath.Join(dir, "m")
	if b, err := exec.Command("gcc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Skipf("cannot build with <sys/sdt.h> (systemtap-sdt-dev): %v\n%s", err, b)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := Read(f)
	if err != nil || len(ms) != 1 || ms[0].ID() != "demo:tick" {
		t.Fatalf("Read = %+v, %v", ms, err)
	}
	args, err := ParseArgs(ms[0].Args)
	if err != nil || len(args) != 2 {
		t.Errorf("args %q: %+v %v", ms[0].Args, args, err)
	}
	text := f.Section(".text")
	if ms[0].PC < text.Addr || ms[0].PC >= text.Addr+text.Size {
		t.Errorf("probe at %#x outside .text", ms[0].PC)
	}
}

func FuzzParseNotes(f *testing.F) {
	f.Add(note(0x1067, 0x200f, 0, "demo", "tick", "-4@%eax"), uint64(0x300f))
	f.Fuzz(func(t *testing.T, data []byte, base uint64) {
		ms, _ := ParseNotes(data, base)
		for _, m := range ms {
			_ = m.ID()
		}
	})
}

func FuzzParseArgs(f *testing.F) {
	f.Add("-4@%eax 8@-8(%rbp) 4@$5 1@%r9b")
	f.Add("-4@w0 8@[sp, 16] 8@[x29, #-8] 4@#3")
	f.Fuzz(func(t *testing.T, spec string) {
		args, err := ParseArgs(spec)
		if err != nil {
			return
		}
		for _, a := range args {
			if a.Size != 1 && a.Size != 2 && a.Size != 4 && a.Size != 8 {
				t.Fatalf("size %d from %q", a.Size, spec)
			}
		}
		_ = Format(Marker{}, args, func(string) (uint64, bool) { return ^uint64(0), true },
			func(uint64, []byte) bool { return true })
	})
}
