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

// TestCodeMapInsnStart asks a codeMap about a function of libc in a
// running sleep(1): the load bias comes from its memory map, the
// function from libc's symbols.
func TestCodeMapInsnStart(t *testing.T) {
	m, bias, funcs := sleepingLibc(t)
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

// sleepingLibc starts sleep(1) and returns a new codeMap of it (its
// memory map read, no file's symbols), libc's load bias in it and libc's
// functions.
func sleepingLibc(t *testing.T) (*codeMap, uint64, []Function) {
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
	if err != nil || len(funcs) < 3 {
		t.Fatalf("%d functions in %s: %v", len(funcs), libc, err)
	}
	return m, bias, funcs
}

func mustHex(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCodeMapPrepare: addresses queued with prepare are looked up in the
// background: their file's symbols read and their functions decoded
// before anyone asks.
func TestCodeMapPrepare(t *testing.T) {
	m, bias, funcs := sleepingLibc(t)
	picked := []Function{funcs[0], funcs[len(funcs)/2], funcs[len(funcs)-1]}
	for _, fn := range picked {
		m.prepare(bias + fn.Addr)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		m.qmu.Lock()
		busy := m.warming
		m.qmu.Unlock()
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queued addresses were not looked up in 10 s")
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.files) != 1 {
		t.Fatalf("%d files read, want libc's", len(m.files))
	}
	for path := range m.files {
		for _, fn := range picked {
			if _, ok := m.facts[funcKey{path, fn.Addr}]; !ok {
				t.Errorf("function at %#x of %s not decoded", fn.Addr, path)
			}
		}
	}
}
