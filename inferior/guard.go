package inferior

import "os"

// Guard is told about every int3 the stub keeps in the process's memory,
// so that another process can take them out if the stub dies (package
// guard's watchdog): once the kernel has detached a dead tracer's
// tracees, an int3 left in their code kills them with SIGTRAP.
//
// The calls are made on the ptrace goroutine, in the order the memory
// changes: Memory whenever the process's memory file is opened (launch,
// attach, exec, following a fork child: the int3s of the old image are
// gone) and with pid 0 and a nil file once the process is gone or
// detached; Trap before an int3 is written at addr, and again whenever
// the byte saved under it changes (gdb writes memory there, a code patch
// goes in or out under it); Untrap once the byte at addr has its saved
// value back. A breakpoint instruction longer than a byte (brk on
// arm64) is told byte by byte. A Guard must not call the Process.
type Guard interface {
	Memory(pid int, mem *os.File)
	Trap(addr uint64, orig byte)
	Untrap(addr uint64)
}

// SetGuard installs g (nil removes it) and tells it the current state:
// the memory file and every software breakpoint.
func (p *Process) SetGuard(g Guard) {
	_ = p.do(func() error {
		p.guard = g
		if g == nil {
			return nil
		}
		if p.exitEvent != nil || p.memFile == nil {
			g.Memory(0, nil)
			return nil
		}
		g.Memory(p.pid, p.memFile)
		for addr, bp := range p.swbps {
			p.guardTrap(addr, bp.orig)
		}
		return nil
	})
}

// guardMemory tells the guard the memory file changed (nil: the process
// is gone).
func (p *Process) guardMemory() {
	if p.guard == nil {
		return
	}
	if p.memFile == nil || p.exitEvent != nil {
		p.guard.Memory(0, nil)
		return
	}
	p.guard.Memory(p.pid, p.memFile)
}

// guardTrap tells the guard, byte by byte, what a breakpoint at addr
// saved.
func (p *Process) guardTrap(addr uint64, orig [breakpointLen]byte) {
	if p.guard != nil {
		for i, b := range orig {
			p.guard.Trap(addr+uint64(i), b)
		}
	}
}

// guardUntrap tells the guard that the breakpoint at addr is gone.
func (p *Process) guardUntrap(addr uint64) {
	if p.guard != nil {
		for i := range breakpointLen {
			p.guard.Untrap(addr + uint64(i))
		}
	}
}
