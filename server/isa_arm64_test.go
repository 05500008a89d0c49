package server

import (
	"errors"
	"strings"
	"testing"

	"gotpstub/tracing"
)

// TestTracepointsRefusedOnARM64: the trace engine's installer refuses
// every tracepoint on arm64, saying so, and removing is harmless.
func TestTracepointsRefusedOnARM64(t *testing.T) {
	inst := tracepointInstaller(nil)
	tp := &tracing.Tracepoint{Num: 1, Addr: 0x400000}
	err := inst.Install(tp)
	if !errors.Is(err, errNoTracepoints) || !strings.Contains(err.Error(), "not supported on arm64") {
		t.Errorf("Install: %v, want %v", err, errNoTracepoints)
	}
	if err := inst.Remove(tp); err != nil {
		t.Errorf("Remove: %v", err)
	}
}
