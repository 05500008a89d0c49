package inferior

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ProbeDebugRegisters reports whether hardware breakpoints work on this
// machine (nil) or why not. Some virtual machines give guests debug
// registers that can be written but never trap; hardware watchpoints and
// breakpoints then silently never fire. It launches path (a short
// program, /bin/true will do), puts a hardware breakpoint on its entry
// point (AT_ENTRY) and runs it: the breakpoint must stop it there within
// a few seconds. The program is killed afterwards.
func ProbeDebugRegisters(path string) error {
	p, err := Launch(LaunchOptions{Path: path, Args: []string{path}})
	if err != nil {
		return fmt.Errorf("probing debug registers: %w", err)
	}
	defer func() {
		_ = p.Kill()
		p.Close()
	}()
	entry, err := auxvEntry(p)
	if err != nil {
		return fmt.Errorf("probing debug registers: %w", err)
	}
	if err := p.InsertBreakpoint(HardwareBreakpoint, entry, 1); err != nil {
		return fmt.Errorf("debug registers: a hardware breakpoint cannot be set: %w", err)
	}
	if err := p.Resume([]Action{{Tid: -1}}); err != nil {
		return fmt.Errorf("probing debug registers: %w", err)
	}
	type result struct {
		ev  StopEvent
		err error
	}
	done := make(chan result, 1)
	go func() {
		ev, err := p.Wait()
		done <- result{ev, err}
	}()
	select {
	case r := <-done:
		switch {
		case r.err != nil:
			return fmt.Errorf("probing debug registers: %w", r.err)
		case r.ev.Kind == SignalStop && r.ev.Reason == "hwbreak":
			return nil
		default:
			return fmt.Errorf("debug registers do not trap: a hardware breakpoint on %s's entry point %#x was not hit (the program %s)",
				path, entry, describeStop(r.ev))
		}
	case <-time.After(5 * time.Second):
		p.Interrupt()
		<-done
		return fmt.Errorf("debug registers do not trap: a hardware breakpoint on %s's entry point %#x was not hit in 5 s", path, entry)
	}
}

// Auxiliary vector keys (AT_*) the stub reads.
const (
	AtEntry  = 9  // the program's entry point
	AtHWCap2 = 26 // more CPU capabilities: HWCap2FSGSBase
	// HWCap2FSGSBase: user space may use rdfsbase and friends.
	HWCap2FSGSBase = 1 << 1
)

// AuxvValue returns the value of key in auxv, an auxiliary vector in the
// kernel's 64-bit layout (/proc/PID/auxv).
func AuxvValue(auxv []byte, key uint64) (uint64, bool) {
	for i := 0; i+16 <= len(auxv); i += 16 {
		if binary.LittleEndian.Uint64(auxv[i:]) == key {
			return binary.LittleEndian.Uint64(auxv[i+8:]), true
		}
	}
	return 0, false
}

// auxvEntry returns the process's AT_ENTRY.
func auxvEntry(p *Process) (uint64, error) {
	auxv, err := p.Auxv()
	if err != nil {
		return 0, err
	}
	if v, ok := AuxvValue(auxv, AtEntry); ok {
		return v, nil
	}
	return 0, errors.New("no AT_ENTRY in the auxiliary vector")
}

// describeStop says in words how a probe's program stopped instead.
func describeStop(ev StopEvent) string {
	switch ev.Kind {
	case Exited:
		return fmt.Sprintf("exited with status %d", ev.ExitCode)
	case Killed:
		return fmt.Sprintf("was killed by signal %d", ev.Signal)
	default:
		return fmt.Sprintf("stopped with signal %d (%q)", ev.Signal, ev.Reason)
	}
}
