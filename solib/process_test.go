//go:build linux && amd64

package solib

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procMem reads a process's memory through /proc/PID/mem.
type procMem struct{ f *os.File }

// ReadMemory implements MemoryReader.
func (p procMem) ReadMemory(addr uint64, buf []byte) (int, error) {
	if addr > 1<<62 {
		return 0, fmt.Errorf("address %#x out of range", addr)
	}
	n, err := p.f.ReadAt(buf, int64(addr))
	if err != nil {
		return n, fmt.Errorf("read /proc mem at %#x: %w", addr, err)
	}
	return n, nil
}

const testProgram = `
#include <math.h>
#include <signal.h>

volatile double sink;

int main(int argc, char **argv) {
	sink = cos((double)argc);
	raise(SIGSTOP);
	return 0;
}
`

// buildProgram compiles testProgram with extra gcc flags.
func buildProgram(t *testing.T, flags ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not available")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(src, []byte(testProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	args := append([]string{"-O0", "-o", bin, src}, flags...)
	args = append(args, "-Wl,--no-as-needed", "-lm")
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		if strings.Contains(strings.Join(flags, " "), "-static") {
			t.Skipf("static linking unavailable: %v\n%s", err, out)
		}
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return bin
}

// waitStopped polls /proc/PID/stat until the process is stopped.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("read stat: %v", err)
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			if state := s[i+2]; state == 'T' || state == 't' {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d did not stop", pid)
}

// libraryListOf reads the library list of a stopped process.
func libraryListOf(t *testing.T, pid int) ([]byte, error) {
	t.Helper()
	auxv, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", pid))
	if err != nil {
		t.Fatalf("read auxv: %v", err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Skipf("cannot open /proc/%d/mem: %v", pid, err)
	}
	defer f.Close()
	return LibraryListSVR4(procMem{f}, auxv)
}

// xmlLibraryList mirrors the library-list-svr4 document.
type xmlLibraryList struct {
	XMLName   xml.Name `xml:"library-list-svr4"`
	Version   string   `xml:"version,attr"`
	MainLM    string   `xml:"main-lm,attr"`
	Libraries []struct {
		Name  string `xml:"name,attr"`
		LM    string `xml:"lm,attr"`
		LAddr string `xml:"l_addr,attr"`
		LLd   string `xml:"l_ld,attr"`
		LMID  string `xml:"lmid,attr"`
	} `xml:"library"`
}

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end, offset uint64
	path               string
}

// readMaps parses /proc/PID/maps.
func readMaps(t *testing.T, pid int) []mapping {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var maps []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		var m mapping
		m.start, _ = strconv.ParseUint(lo, 16, 64)
		m.end, _ = strconv.ParseUint(hi, 16, 64)
		m.offset, _ = strconv.ParseUint(fields[2], 16, 64)
		if len(fields) >= 6 {
			m.path = fields[5]
		}
		maps = append(maps, m)
	}
	return maps
}

// parseAddr parses "0x..." from the document.
func parseAddr(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil || !strings.HasPrefix(s, "0x") {
		t.Fatalf("bad address %q", s)
	}
	return v
}

// realPath resolves symlinks, falling back to the path itself.
func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func TestLibraryListOfRunningProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to read another process's memory")
	}
	for _, variant := range []struct {
		name  string
		flags []string
	}{{"pie", []string{"-pie", "-fPIE"}}, {"no-pie", []string{"-no-pie"}}} {
		t.Run(variant.name, func(t *testing.T) {
			bin := buildProgram(t, variant.flags...)
			cmd := exec.Command(bin)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}()
			pid := cmd.Process.Pid
			waitStopped(t, pid)
			doc, err := libraryListOf(t, pid)
			if err != nil {
				t.Fatalf("LibraryListSVR4: %v", err)
			}
			var list xmlLibraryList
			if err := xml.Unmarshal(doc, &list); err != nil {
				t.Fatalf("document does not parse: %v\n%s", err, doc)
			}
			if list.Version != "1.0" || list.MainLM == "" || parseAddr(t, list.MainLM) == 0 {
				t.Fatalf("bad header in %s", doc)
			}
			maps := readMaps(t, pid)
			found := map[string]bool{}
			for _, lib := range list.Libraries {
				base := filepath.Base(lib.Name)
				found[base] = true
				if !strings.HasPrefix(lib.Name, "/") {
					continue // linux-vdso.so.1 has no file
				}
				want := realPath(lib.Name)
				lAddr := parseAddr(t, lib.LAddr)
				lLd := parseAddr(t, lib.LLd)
				var lowest uint64
				ldInside := false
				for _, m := range maps {
					if m.path == "" || realPath(m.path) != want {
						continue
					}
					if m.offset == 0 && (lowest == 0 || m.start < lowest) {
						lowest = m.start
					}
					if lLd >= m.start && lLd < m.end {
						ldInside = true
					}
				}
				if lowest == 0 {
					t.Errorf("%s not found in /proc/%d/maps", lib.Name, pid)
					continue
				}
				if lAddr != lowest {
					t.Errorf("%s: l_addr %#x, but mapped at %#x", lib.Name, lAddr, lowest)
				}
				if !ldInside {
					t.Errorf("%s: l_ld %#x is not inside its mappings", lib.Name, lLd)
				}
				if parseAddr(t, lib.LMID) == 0 {
					t.Errorf("%s: lmid is 0", lib.Name)
				}
			}
			for _, want := range []string{"libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2"} {
				if !found[want] {
					t.Errorf("library list lacks %s:\n%s", want, doc)
				}
			}
			if found["prog"] {
				t.Errorf("main program listed as a library:\n%s", doc)
			}
		})
	}
}

func TestLibraryListBeforeDynamicLinker(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to read another process's memory")
	}
	bin := buildProgram(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(bin)
	// Stopped by ptrace right after execve: ld.so has not run yet.
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	waitStopped(t, cmd.Process.Pid)
	doc, err := libraryListOf(t, cmd.Process.Pid)
	if err != nil {
		t.Fatalf("LibraryListSVR4: %v", err)
	}
	if want := `<library-list-svr4 version="1.0"></library-list-svr4>`; string(doc) != want {
		t.Fatalf("document %s, want %s", doc, want)
	}
}

func TestLibraryListStaticProgram(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to read another process's memory")
	}
	bin := buildProgram(t, "-static")
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	waitStopped(t, cmd.Process.Pid)
	_, err := libraryListOf(t, cmd.Process.Pid)
	if !errors.Is(err, ErrNoDynamicLinker) {
		t.Fatalf("error = %v, want ErrNoDynamicLinker", err)
	}
}

// TestMatchesGdbserver compares the document with what gdbserver itself
// sends for the same program, both run without address randomisation.
func TestMatchesGdbserver(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to read another process's memory")
	}
	gdb, err1 := exec.LookPath("gdb")
	_, err2 := exec.LookPath("gdbserver")
	setarch, err3 := exec.LookPath("setarch")
	if err1 != nil || err2 != nil || err3 != nil {
		t.Skip("gdb, gdbserver or setarch not available")
	}
	bin := buildProgram(t)

	out, err := exec.Command(gdb, "-nx", "-batch",
		"-ex", "set startup-with-shell off",
		"-ex", "target remote | gdbserver - "+bin,
		"-ex", "continue",
		"-ex", "maint packet qXfer:libraries-svr4:read::0,fff",
		"-ex", "kill").CombinedOutput()
	if err != nil {
		t.Skipf("gdb/gdbserver run failed: %v\n%s", err, out)
	}
	_, after, ok := strings.Cut(string(out), `received: "l`)
	if !ok {
		t.Skipf("no qXfer reply in gdb output:\n%s", out)
	}
	fromGdbserver, _, _ := strings.Cut(after, "\"\n")

	cmd := exec.Command(setarch, "x86_64", "-R", bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	waitStopped(t, cmd.Process.Pid)
	doc, err := libraryListOf(t, cmd.Process.Pid)
	if err != nil {
		t.Fatalf("LibraryListSVR4: %v", err)
	}
	if string(doc) != fromGdbserver {
		t.Errorf("document differs from gdbserver's:\n ours %s\n gdbserver %s", doc, fromGdbserver)
	}
}
