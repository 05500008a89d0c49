package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestDemoScript runs scripts/demo.sh (with STUB set to the stub under
// test) and checks the frames it prints against demo.c's behaviour.
func TestDemoScript(t *testing.T) {
	stub := stubPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "demo.sh"))
	cmd.Env = append(cmd.Environ(), "STUB="+stub)
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("scripts/demo.sh:\n%s", out)
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v", err)
	}
	const calls = 10
	conditional := 0 // hits of "if n % 3 == 0"
	for n := range calls {
		if n%3 == 0 {
			conditional++
		}
	}
	// compute: every call + the conditional ones; demo_done: once.
	frames := calls + conditional + 1
	mustContain(t, out,
		fmt.Sprintf("Collected %d trace frames.", frames),
		fmt.Sprintf("Found trace frame %d, tracepoint 4", frames-1),
		fmt.Sprintf("call_count = %d\n", calls),
		fmt.Sprintf("$1 = %d\n", calls),
		`name = 0x`,
		`"hello, tracepoints"`,
		fmt.Sprintf("compute called %d times", calls),
	)
	for n := 0; n < calls; n += 3 {
		mustContain(t, out, fmt.Sprintf("*p = {x = %d, y = %d, label = \"pt%d", n, 2*n, n),
			fmt.Sprintf("square = %d\n", n*n))
	}
	if got := countMatches(out, `Data collected at tracepoint 2, `); got != conditional {
		t.Errorf("conditional tracepoint collected %d frames, want %d", got, conditional)
	}
}
