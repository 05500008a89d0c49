package inferior

import (
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	debugRegsOnce sync.Once
	debugRegsErr  error
)

// requireDebugRegisters skips t, with the reason, on a machine whose
// debug registers do not trap (some virtual machines).
func requireDebugRegisters(t *testing.T) {
	t.Helper()
	debugRegsOnce.Do(func() { debugRegsErr = ProbeDebugRegisters("/bin/true") })
	if debugRegsErr != nil {
		t.Skipf("skipped: %v", debugRegsErr)
	}
}

func TestProbeDebugRegisters(t *testing.T) {
	start := time.Now()
	err := ProbeDebugRegisters("/bin/true")
	t.Logf("ProbeDebugRegisters: %v (%v)", err, time.Since(start))
	if err != nil && !strings.Contains(err.Error(), "debug registers") {
		t.Errorf("the reason does not say what failed: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("the probe took %v", time.Since(start))
	}
	if err := ProbeDebugRegisters("/nonexistent/program"); err == nil {
		t.Error("probing with a program that does not exist: no error")
	}
}
