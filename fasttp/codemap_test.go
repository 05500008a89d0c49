package fasttp

import (
	"debug/elf"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCodeMapInsnStart asks a codeMap about libc's getpid in a running
// sleep(1): the load bias comes from its memory map, the function from
// libc's dynamic symbols.
func TestCodeMapInsnStart(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	m := newCodeMap(cmd.Process.Pid)
	var libc string
	var bias uint64
	for range 100 { // until the dynamic loader has mapped libc
		maps, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/maps")
		for _, line := range strings.Split(string(maps), "\n") {
			if f := strings.Fields(line); len(f) >= 6 && strings.Contains(f[5], "libc.so") && strings.Contains(f[1], "x") {
				lo, _, _ := strings.Cut(f[0], "-")
				var ok bool
				m.mu.Lock()
				libc, bias, ok = m.mappingOf(mustHex(t, lo))
				m.mu.Unlock()
				if !ok {
					t.Fatalf("no load bias for %s", line)
				}
			}
		}
		if libc != "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if libc == "" {
		t.Skip("sleep maps no libc")
	}
	f, err := elf.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	funcs, err := ELFFunctions(f, 0)
	if err != nil || len(funcs) == 0 {
		t.Fatalf("%d functions in %s: %v", len(funcs), libc, err)
	}
	fn := funcs[len(funcs)/2]
	insns, _, _ := DecodeFunction(fn)
	if len(insns) < 2 {
		t.Fatalf("function at %#x decodes to %d instructions", fn.Addr, len(insns))
	}
	for _, in := range insns[:2] {
		if !m.insnStart(bias + in.Addr) {
			t.Errorf("%#x (libc %#x) is not called an instruction start", bias+in.Addr, in.Addr)
		}
		if in.Len > 1 && m.insnStart(bias+in.Addr+1) {
			t.Errorf("%#x, inside a %d-byte instruction, is called an instruction start", bias+in.Addr+1, in.Len)
		}
	}
	if m.insnStart(0x10000) {
		t.Error("an unmapped address is called code")
	}
}

func mustHex(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
