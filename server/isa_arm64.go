package server

import (
	"errors"

	"gotpstub/fasttp"
	"gotpstub/tracing"
)

// errNoTracepoints is why a tracepoint cannot be installed on arm64:
// trap tracepoints (displaced stepping) and fast tracepoints (jump pads)
// are x86-64 machine code so far.
var errNoTracepoints = errors.New("tracepoints are not supported on arm64 yet (issue 12)")

// tracepointInstaller is what the trace engine installs tracepoints
// with: on arm64 nothing installs them yet, so QTStart (and a
// tracepoint defined during a run) fails with errNoTracepoints instead
// of letting x86-64 code near the program.
func tracepointInstaller(*fasttp.Installer) tracing.Installer { return noTracepoints{} }

// noTracepoints refuses every tracepoint.
type noTracepoints struct{}

func (noTracepoints) Install(*tracing.Tracepoint) error { return errNoTracepoints }

func (noTracepoints) Remove(*tracing.Tracepoint) error { return nil }
