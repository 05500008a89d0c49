package inferior

import (
	"testing"
)

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
