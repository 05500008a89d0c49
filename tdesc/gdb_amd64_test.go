package tdesc

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The amd64 descriptions checked against this machine's gdb. (On arm64
// TestHostXMLLoadedByGDB checks the aarch64 one; gdb's own native
// description there has SVE, pointer authentication and TLS features
// when the CPU does, which this layout leaves out.)

// TestXMLLoadedByGDB feeds our documents to gdb ("set tdesc filename")
// and checks that gdb derives exactly our numbering and g layout.
func TestXMLLoadedByGDB(t *testing.T) {
	for _, avx := range []bool{false, true} {
		dir := t.TempDir()
		for name, doc := range XML(avx) {
			if err := os.WriteFile(filepath.Join(dir, name), doc, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		regs := gdbRemoteRegisters(t,
			"-ex", "set tdesc filename "+filepath.Join(dir, "target.xml"),
			"-ex", "maint print remote-registers")
		compareWithGDB(t, AMD64Linux(avx), regs)
	}
}

// TestMatchesNativeGDB compares our layout with the description gdb builds
// itself when it runs a program natively on this machine.
func TestMatchesNativeGDB(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "tiny.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "tiny")
	if out, err := exec.Command("gcc", "-g", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	regs := gdbRemoteRegisters(t, "-ex", "break main", "-ex", "run",
		"-ex", "maint print remote-registers", "-ex", "kill", bin)
	compareWithGDB(t, Host(), regs)
}
