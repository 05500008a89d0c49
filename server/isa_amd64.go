package server

import (
	"gotpstub/fasttp"
	"gotpstub/tracing"
)

// tracepointInstaller is what the trace engine installs tracepoints
// with: on x86-64 the fast tracepoint installer (jump pads, with trap
// tracepoints behind them).
func tracepointInstaller(traps *fasttp.Installer) tracing.Installer { return traps }
