package fasttp

import (
	"encoding/binary"

	"gotpstub/tracing"
)

// semaphore adds delta to the SDT semaphore of static tracepoint tp's
// marker, if it has one: <sys/sdt.h> probes with a semaphore run (and
// compute their arguments) only while it is not 0, as SystemTap and
// bpftrace arrange. The stub adds 1 while the tracepoint is installed.
// The marker comes from the engine's static data source (the server's
// list of the process's markers). Failures are logged; the tracepoint is
// then hit only when something else enabled the probe.
func (in *Installer) semaphore(tp *tracing.Tracepoint, delta int) {
	if in.proc == nil {
		return
	}
	m, ok := in.engine.StaticReads(tp.Addr)
	if !ok || m.Semaphore == 0 {
		return
	}
	var b [2]byte
	if n, err := in.proc.ReadMemory(m.Semaphore, b[:]); n != 2 {
		in.logf("static tracepoint %d: reading the semaphore at %#x: %v", tp.Num, m.Semaphore, err)
		return
	}
	v := int(binary.LittleEndian.Uint16(b[:])) + delta
	if v < 0 || v > 0xffff {
		return
	}
	binary.LittleEndian.PutUint16(b[:], uint16(v))
	if err := in.writeMemory(m.Semaphore, b[:]); err != nil {
		in.logf("static tracepoint %d: writing the semaphore at %#x: %v", tp.Num, m.Semaphore, err)
	}
}
