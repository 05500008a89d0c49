package inferior

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// mappingRss returns the resident kilobytes of the process's mapping
// that starts at addr (from /proc/PID/smaps).
func mappingRss(t *testing.T, pid int, addr uint64) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if start, _, ok := strings.Cut(line, "-"); ok && !strings.Contains(start, " ") {
			a, err := strconv.ParseUint(start, 16, 64)
			in = err == nil && a == addr
			continue
		}
		if rest, ok := strings.CutPrefix(line, "Rss:"); ok && in {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return kb
		}
	}
	t.Fatalf("no mapping at %#x", addr)
	return 0
}

func TestSharedMemory(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	before, _ := p.Registers(p.Pid())
	const size = 1 << 20
	m, err := p.MapShared(size)
	if err != nil {
		t.Fatal(err)
	}
	// The stub's writes are the process's memory and the other way round.
	copy(m.Data[100:], "from the stub")
	got := make([]byte, 13)
	if _, err := p.ReadMemory(m.Addr+100, got); err != nil || string(got) != "from the stub" {
		t.Fatalf("process reads %q, %v", got, err)
	}
	if err := p.WriteMemory(m.Addr+size-8, []byte("process!")); err != nil {
		t.Fatal(err)
	}
	if string(m.Data[size-8:]) != "process!" {
		t.Errorf("stub sees %q", m.Data[size-8:])
	}

	// Populate maps the pages in the process: they become resident there.
	rss0 := mappingRss(t, p.Pid(), m.Addr)
	if err := p.Populate(m, 256<<10, 512<<10); err != nil {
		t.Fatal(err)
	}
	if rss := mappingRss(t, p.Pid(), m.Addr); rss < rss0+512 {
		t.Errorf("resident %d kB after populating 512 kB (was %d kB)", rss, rss0)
	}
	if !bytes.Equal(m.Data[256<<10:768<<10], make([]byte, 512<<10)) {
		t.Error("populating changed the contents")
	}
	for _, c := range []struct{ off, n uint64 }{{size, 1}, {0, size + 1}, {size - 10, 20}} {
		if err := p.Populate(m, c.off, c.n); err == nil {
			t.Errorf("Populate(%d, %d) of a %d-byte mapping: no error", c.off, c.n, size)
		}
	}
	after, _ := p.Registers(p.Pid())
	for num, r := range before.Layout.Regs {
		if b, a := before.Get(num), after.Get(num); string(a) != string(b) {
			t.Errorf("register %s changed by the injected system calls: % x → % x", r.Name, b, a)
		}
	}

	if err := p.Unmap(m); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReadMemory(m.Addr+100, got); err == nil {
		t.Error("the process still maps the memory after Unmap")
	}
}
