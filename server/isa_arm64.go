package server

import (
	"gotpstub/fasttp"
	"gotpstub/tracing"
	"gotpstub/trapfallback"
)

// tracepointInstaller is what the trace engine installs tracepoints
// with: on arm64 the trap installer, for fast tracepoints too (jump pads
// are x86-64 machine code so far; issue 12, part 3). A fast tracepoint
// thus collects what it would collect, at a trap's cost.
func tracepointInstaller(_ *fasttp.Installer, traps *trapfallback.Installer) tracing.Installer {
	return traps
}
