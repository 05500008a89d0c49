package threaddb

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pidMemory reads another process's memory with process_vm_readv.
type pidMemory int

func (p pidMemory) ReadMemory(addr uint64, buf []byte) (int, error) {
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMReadv(int(p), local, remote, 0)
	if err != nil {
		return n, fmt.Errorf("process_vm_readv %#x: %w", addr, err)
	}
	if n != len(buf) {
		return n, fmt.Errorf("process_vm_readv %#x: short read %d", addr, n)
	}
	return n, nil
}

// tlsSymbolOffset returns the TLS-block offset of symbol name (its
// st_value, what gdb sends as the qGetTLSAddr offset).
func tlsSymbolOffset(t *testing.T, file, name string) uint64 {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_TLS {
			return s.Value
		}
	}
	t.Fatalf("no TLS symbol %s in %s", name, file)
	return 0
}

// tlsThread is one "thread" line of the test program's output.
type tlsThread struct {
	name                     string
	tp, a, arr, linked, dlib uint64
}

// startTLSProgram builds and starts testdata/tlsprog.c and returns its
// pid, the link_map addresses it printed and its threads.
func startTLSProgram(t *testing.T) (dir string, pid int, lms map[string]uint64, threads []tlsThread) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not available")
	}
	dir = t.TempDir()
	builds := [][]string{
		{"-g", "-shared", "-fPIC", "-o", filepath.Join(dir, "libtlslinked.so"), "testdata/tlslinked.c"},
		{"-g", "-shared", "-fPIC", "-o", filepath.Join(dir, "libtlsdl.so"), "testdata/tlsdl.c"},
		{"-g", "-pthread", "-o", filepath.Join(dir, "tlsprog"), "testdata/tlsprog.c", "-L" + dir, "-ltlslinked", "-ldl", "-Wl,-rpath," + dir},
	}
	for _, args := range builds {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	cmd := exec.Command(filepath.Join(dir, "tlsprog"), filepath.Join(dir, "libtlsdl.so"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lms = make(map[string]uint64)
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		line := lines.Text()
		switch {
		case line == "ready":
			go io.Copy(io.Discard, stdout)
			return dir, cmd.Process.Pid, lms, threads
		case strings.HasPrefix(line, "lm "):
			var m, l, d uint64
			if _, err := fmt.Sscanf(line, "lm main=%v linked=%v dl=%v", &m, &l, &d); err != nil {
				t.Fatalf("parsing %q: %v", line, err)
			}
			lms["main"], lms["linked"], lms["dl"] = m, l, d
		case strings.HasPrefix(line, "thread "):
			var th tlsThread
			line = strings.ReplaceAll(line, "(nil)", "0")
			if _, err := fmt.Sscanf(line, "thread %s tp=%v a=%v arr=%v linked=%v dl=%v", &th.name, &th.tp, &th.a, &th.arr, &th.linked, &th.dlib); err != nil {
				t.Fatalf("parsing %q: %v", line, err)
			}
			threads = append(threads, th)
		}
	}
	t.Fatalf("test program ended before it was ready: %v", lines.Err())
	return
}

func TestTLSAddressInLiveProcess(t *testing.T) {
	dir, pid, lms, threads := startTLSProgram(t)
	if len(threads) != 3 {
		t.Fatalf("got %d thread lines, want 3", len(threads))
	}
	libcPath, libcBase, err := FindLibc(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !isLibcName(libcPath) {
		t.Errorf("FindLibc path %q is not a libc", libcPath)
	}
	mem := pidMemory(pid)
	full, err := NewResolver(mem, libcPath, libcBase)
	if err != nil {
		t.Fatal(err)
	}
	if !full.hasSlotinfo {
		t.Fatalf("this glibc exports the slotinfo descriptors and __nptl_rtld_global; resolver did not find them")
	}
	// The same resolver without the slotinfo walk (older glibc path).
	noSlotinfo := *full
	noSlotinfo.hasSlotinfo = false

	prog := filepath.Join(dir, "tlsprog")
	offA := tlsSymbolOffset(t, prog, "a")
	offArr := tlsSymbolOffset(t, prog, "arr")
	offLinked := tlsSymbolOffset(t, filepath.Join(dir, "libtlslinked.so"), "linked_tls")
	offDL := tlsSymbolOffset(t, filepath.Join(dir, "libtlsdl.so"), "dl_tls") + 4 // &dl_tls[1]

	for _, r := range []struct {
		name string
		res  *Resolver
	}{{"slotinfo", full}, {"dtv-length", &noSlotinfo}} {
		for _, th := range threads {
			cases := []struct {
				what          string
				lm, off, want uint64
			}{
				{"a", lms["main"], offA, th.a},
				{"arr", lms["main"], offArr, th.arr},
				{"arr[2]", lms["main"], offArr + 16, th.arr + 16},
				{"linked_tls", lms["linked"], offLinked, th.linked},
				{"dl_tls[1]", lms["dl"], offDL, th.dlib},
			}
			for _, c := range cases {
				t.Run(r.name+"/"+th.name+"/"+c.what, func(t *testing.T) {
					got, err := r.res.TLSAddress(th.tp, c.lm, c.off)
					if c.want == 0 { // the thread never touched the dlopen'ed module
						// Not allocated yet, unless glibc placed the
						// module in static TLS at dlopen (aarch64's
						// does), which every thread has.
						if !errors.Is(err, ErrTLSNotAllocated) && (err != nil || !staticTLSAtDlopen) {
							t.Fatalf("TLSAddress = %#x, %v; want ErrTLSNotAllocated", got, err)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if got != c.want {
						t.Fatalf("TLSAddress = %#x, want %#x", got, c.want)
					}
				})
			}
		}
	}

	// The values behind the addresses are each thread's own.
	wantA := map[string]uint32{"main": 42, "t1": 100, "t2": 200}
	for _, th := range threads {
		addr, err := full.TLSAddress(th.tp, lms["main"], offA)
		if err != nil {
			t.Fatal(err)
		}
		var buf [4]byte
		if _, err := mem.ReadMemory(addr, buf[:]); err != nil {
			t.Fatal(err)
		}
		if got := full.order.Uint32(buf[:]); got != wantA[th.name] {
			t.Errorf("thread %s: a = %d, want %d", th.name, got, wantA[th.name])
		}
	}

	// lm 0 means module 1, the main program.
	got, err := full.TLSAddress(threads[0].tp, 0, offA)
	if err != nil || got != threads[0].a {
		t.Errorf("TLSAddress(lm 0) = %#x, %v; want %#x", got, err, threads[0].a)
	}
}

// TestTLSAddressStaticExecutable: a statically linked program carries the
// descriptors in its .symtab and the slotinfo list head in its own
// _dl_tls_dtv_slotinfo_list; gdb sends lm 0 for it.
func TestTLSAddressStaticExecutable(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not available")
	}
	prog := filepath.Join(t.TempDir(), "tlsstatic")
	if out, err := exec.Command("gcc", "-g", "-static", "-pthread", "-o", prog, "testdata/tlsstatic.c").CombinedOutput(); err != nil {
		t.Skipf("cannot link statically (no libc.a?): %v\n%s", err, out)
	}
	cmd := exec.Command(prog)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	type thread struct{ tp, sarr uint64 }
	var threads []thread
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "ready" {
		var th thread
		if _, err := fmt.Sscanf(lines.Text(), "thread tp=%v sarr=%v", &th.tp, &th.sarr); err != nil {
			t.Fatalf("parsing %q: %v", lines.Text(), err)
		}
		threads = append(threads, th)
	}
	go io.Copy(io.Discard, stdout)
	if len(threads) != 3 {
		t.Fatalf("got %d thread lines, want 3", len(threads))
	}
	path, base, err := FindLibc(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "tlsstatic" {
		t.Errorf("FindLibc chose %s, want the executable", path)
	}
	r, err := NewResolver(pidMemory(cmd.Process.Pid), path, base)
	if err != nil {
		t.Fatal(err)
	}
	if !r.hasSlotinfo || !r.slotinfoVar {
		t.Errorf("static executable: slotinfo %v, list variable %v; want both", r.hasSlotinfo, r.slotinfoVar)
	}
	off := tlsSymbolOffset(t, prog, "sarr")
	for _, th := range threads {
		got, err := r.TLSAddress(th.tp, 0, off+8)
		if err != nil || got != th.sarr+8 {
			t.Errorf("thread %#x: TLSAddress = %#x, %v; want %#x", th.tp, got, err, th.sarr+8)
		}
	}
}
