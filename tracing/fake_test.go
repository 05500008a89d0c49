package tracing

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"gotpstub/tdesc"
)

// Register numbers of the amd64 layout used by the tests.
const (
	regRBP = 6
	regRIP = 16
)

// fakeMemory is a sparse inferior address space made of regions.
type fakeMemory struct {
	regions map[uint64][]byte // start → bytes
}

func newFakeMemory() *fakeMemory { return &fakeMemory{regions: map[uint64][]byte{}} }

func (m *fakeMemory) add(start uint64, data []byte) { m.regions[start] = data }

// write stores data at addr inside an existing region.
func (m *fakeMemory) write(addr uint64, data []byte) {
	for start, r := range m.regions {
		if addr >= start && addr+uint64(len(data)) <= start+uint64(len(r)) {
			copy(r[addr-start:], data)
			return
		}
	}
	panic(fmt.Sprintf("fakeMemory: write outside every region at %#x", addr))
}

func (m *fakeMemory) writeU32(addr uint64, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	m.write(addr, b[:])
}

// ReadMemory copies what is mapped from addr on, stopping at a hole.
func (m *fakeMemory) ReadMemory(addr uint64, buf []byte) (int, error) {
	done := 0
	for done < len(buf) {
		a := addr + uint64(done)
		progressed := false
		for start, r := range m.regions {
			if a >= start && a < start+uint64(len(r)) {
				done += copy(buf[done:], r[a-start:])
				progressed = true
				break
			}
		}
		if !progressed {
			return done, fmt.Errorf("address %#x not mapped", a)
		}
	}
	return done, nil
}

// fakeThread is a stopped thread for Hit and Step.
type fakeThread struct {
	tid     int
	regs    *tdesc.Regs
	mem     *fakeMemory
	regsErr error
}

func (t *fakeThread) Tid() int { return t.tid }

func (t *fakeThread) Registers() (*tdesc.Regs, error) {
	if t.regsErr != nil {
		return nil, t.regsErr
	}
	return t.regs.Clone(), nil
}

func (t *fakeThread) ReadMemory(addr uint64, buf []byte) (int, error) {
	return t.mem.ReadMemory(addr, buf)
}

func (t *fakeThread) setReg(num int, v uint64) {
	if err := t.regs.SetUint64(num, v); err != nil {
		panic(err)
	}
}

// fakeInstaller records Install and Remove calls.
type fakeInstaller struct {
	mu        sync.Mutex
	installed map[*Tracepoint]bool
	log       []string
	failAddr  uint64 // Install fails for this address
}

func newFakeInstaller() *fakeInstaller {
	return &fakeInstaller{installed: map[*Tracepoint]bool{}}
}

func (f *fakeInstaller) Install(tp *Tracepoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tp.Addr == f.failAddr && f.failAddr != 0 {
		return errors.New("cannot patch the instruction")
	}
	f.installed[tp] = true
	f.log = append(f.log, fmt.Sprintf("install %d@%x", tp.Num, tp.Addr))
	return nil
}

func (f *fakeInstaller) Remove(tp *Tracepoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.installed, tp)
	f.log = append(f.log, fmt.Sprintf("remove %d@%x", tp.Num, tp.Addr))
	return nil
}

func (f *fakeInstaller) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.installed)
}

// exchange is one packet and the reply gdbserver gave.
type exchange struct{ packet, reply string }

// readSession reads a captured gdb/gdbserver session from testdata.
func readSession(t testing.TB, name string) []exchange {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []exchange
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "> "):
			out = append(out, exchange{packet: line[2:]})
		case strings.HasPrefix(line, "< ") && len(out) > 0:
			out[len(out)-1].reply = line[2:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// send runs one packet through e and returns the reply.
func send(t testing.TB, e *Engine, packet string) string {
	t.Helper()
	reply, handled := e.HandlePacket([]byte(packet))
	if !handled {
		t.Fatalf("%s: not handled", packet)
	}
	return string(reply)
}

// mustOK sends packets that must all answer OK.
func mustOK(t testing.TB, e *Engine, packets ...string) {
	t.Helper()
	for _, p := range packets {
		if r := send(t, e, p); r != "OK" {
			t.Fatalf("%s: got %q, want OK", p, r)
		}
	}
}

// statusField returns field name of a qTStatus reply.
func statusField(t testing.TB, status, name string) string {
	t.Helper()
	for _, f := range strings.Split(strings.TrimPrefix(status, "T"), ";") {
		if k, v, ok := strings.Cut(f, ":"); ok && k == name {
			return v
		}
	}
	t.Fatalf("qTStatus %q has no field %q", status, name)
	return ""
}

// findTracepoint returns location num of e.
func findTracepoint(t testing.TB, e *Engine, num int) *Tracepoint {
	t.Helper()
	for _, tp := range e.Tracepoints() {
		if tp.Num == num {
			return tp
		}
	}
	t.Fatalf("no tracepoint %d", num)
	return nil
}
