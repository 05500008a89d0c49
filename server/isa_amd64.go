package server

import (
	"gotpstub/fasttp"
	"gotpstub/tracing"
	"gotpstub/trapfallback"
)

// tracepointInstaller is what the trace engine installs tracepoints
// with: on x86-64 the fast tracepoint installer (jump pads, with the trap
// installer behind them).
func tracepointInstaller(fast *fasttp.Installer, _ *trapfallback.Installer) tracing.Installer {
	return fast
}
