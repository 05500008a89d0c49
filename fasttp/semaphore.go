package fasttp

import (
	"encoding/binary"

	"gotpstub/sdt"
	"gotpstub/tracing"
)

// semaphore adds delta to the SDT semaphore of static tracepoint tp's
// marker, if it has one: <sys/sdt.h> probes with a semaphore run (and
// compute their arguments) only while it is not 0, as SystemTap and
// bpftrace arrange. The stub adds 1 while the tracepoint is installed.
// Failures are logged; the tracepoint is then hit only when something
// else enabled the probe.
func (in *Installer) semaphore(tp *tracing.Tracepoint, delta int) {
	if in.proc == nil {
		return
	}
	ms, err := sdt.InProcess(in.proc.Pid())
	if err != nil {
		in.logf("static tracepoint %d: listing SDT markers: %v", tp.Num, err)
		return
	}
	for _, m := range ms {
		if m.Addr != tp.Addr || m.Semaphore == 0 {
			continue
		}
		var b [2]byte
		if n, err := in.proc.ReadMemory(m.Semaphore, b[:]); n != 2 {
			in.logf("static tracepoint %d: reading the semaphore of %s at %#x: %v", tp.Num, m.ID(), m.Semaphore, err)
			return
		}
		v := int(binary.LittleEndian.Uint16(b[:])) + delta
		if v < 0 || v > 0xffff {
			return
		}
		binary.LittleEndian.PutUint16(b[:], uint16(v))
		if err := in.proc.WriteMemory(m.Semaphore, b[:]); err != nil {
			in.logf("static tracepoint %d: writing the semaphore of %s at %#x: %v", tp.Num, m.ID(), m.Semaphore, err)
		}
		return
	}
}
