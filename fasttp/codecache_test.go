package fasttp

import (
	"bytes"
	"os"
	"testing"

	"gotpstub/inferior"
	"gotpstub/tdesc"
)

// Inside a Batch, code is read a page at a time and kept: a second read
// sees the page as first read (a write that bypasses the installer does
// not show), the installer's own writes drop the pages they touch, code
// patches take their originals from it, reads across a page boundary are
// whole, and outside a Batch every read goes to the process.
func TestCodeCache(t *testing.T) {
	if _, err := os.Stat("/bin/sleep"); err != nil {
		t.Skip("no /bin/sleep")
	}
	p, err := inferior.Launch(inferior.LaunchOptions{Path: "/bin/sleep", Args: []string{"sleep", "10"}})
	if err != nil {
		t.Skipf("cannot launch a program here: %v", err)
	}
	defer p.Close()
	defer p.Kill()
	regs, err := p.Registers(p.Threads()[0])
	if err != nil {
		t.Fatal(err)
	}
	pc := regs.Uint64(tdesc.RIP)
	direct := func(addr uint64, n int) []byte {
		b := make([]byte, n)
		if m, err := p.ReadMemory(addr, b); m != n {
			t.Fatalf("reading %#x: %d bytes, %v", addr, m, err)
		}
		return b
	}
	in := &Installer{proc: p}
	read := func(addr uint64, n int) []byte {
		b := make([]byte, n)
		if m, err := in.readCode(addr, b); m != n {
			t.Fatalf("readCode %#x: %d bytes, %v", addr, m, err)
		}
		return b
	}
	orig := direct(pc, 16)
	changed := append([]byte(nil), orig[:4]...)
	for i := range changed {
		changed[i] ^= 0xff
	}
	in.Batch(func() {
		if got := read(pc, 16); !bytes.Equal(got, orig) {
			t.Errorf("first read in the Batch: % x, want % x", got, orig)
		}
		if err := p.WriteMemory(pc, changed); err != nil {
			t.Fatal(err)
		}
		if got := read(pc, 16); !bytes.Equal(got, orig) {
			t.Errorf("second read: % x, want the cached % x", got, orig)
		}
		if err := in.writeMemory(pc, changed); err != nil {
			t.Fatal(err)
		}
		if got := read(pc, 4); !bytes.Equal(got, changed) {
			t.Errorf("after the installer's write: % x, want % x", got, changed)
		}
		// A patch saves the cached bytes as the originals (no read):
		// removing it puts them back over a write made behind the
		// cache's back.
		at := pc + 8
		before := read(at, 2)
		if err := p.WriteMemory(at, []byte{before[0] ^ 0xff, before[1] ^ 0xff}); err != nil {
			t.Fatal(err)
		}
		if err := in.insertPatch(at, []byte{0x90, 0x90}); err != nil {
			t.Fatal(err)
		}
		if err := p.RemovePatch(at); err != nil {
			t.Fatal(err)
		}
		if got := direct(at, 2); !bytes.Equal(got, before) {
			t.Errorf("after the patch's removal: % x, want the cached originals % x", got, before)
		}
		edge := (pc | (codePage - 1)) - 7 // 8 bytes before a page's end
		if got, want := read(edge, 16), direct(edge, 16); !bytes.Equal(got, want) {
			t.Errorf("across the page boundary: % x, want % x", got, want)
		}
	})
	if in.codePages != nil {
		t.Error("the pages outlive the Batch")
	}
	if err := p.WriteMemory(pc, orig[:4]); err != nil {
		t.Fatal(err)
	}
	if got := read(pc, 16); !bytes.Equal(got, orig) {
		t.Errorf("outside a Batch: % x, want % x", got, orig)
	}
}
