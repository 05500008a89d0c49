package a64

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBLRGuardedPage runs blr xN into a BTI-guarded page whose target is
// a `bti c` or paciasp landing pad, in place and relocated: the relocated
// `ret xN` must be accepted where the original's BTYPE is. It first checks,
// in a child process, that this machine enforces BTI (a br x5 to the same
// pad must die with SIGILL); otherwise the test would prove nothing.
func TestBLRGuardedPage(t *testing.T) {
	if os.Getenv("A64_BTI_PROBE") == "1" {
		btiProbe(t)
		return
	}
	if why := btiEnforced(t); why != "" {
		t.Skip(why)
	}
	h := newHarness(t)
	a := mapRegion(t, 0, 1<<20, h.stateAddr(), protBTI)
	rng := rand.New(rand.NewSource(3))
	s, target, r := a.base+0x10000, a.base+0x20000, a.base+0x30000
	w := &world{t: t, rng: rng, h: h, a: a, s: s}
	for _, landing := range []uint32{tBTIC, tPACIASP} {
		for _, n := range []uint32{3, 16, 29} {
			c := execCase{word: 0xd63f0000 | n<<5, target: target, regs: w.randRegs()}
			c.regs.X[n] = target
			a.put(target, append([]uint32{landing}, exitStub(target+4, a.common, idTarget)...))
			what := fmt.Sprintf("blr x%d to %s", n, dis1(landing, 0))
			if got := w.check(what, c, a, r); got != "run" {
				t.Errorf("%s: %s", what, got)
			}
		}
	}
}

// btiEnforced returns "" when a child process running btiProbe dies of
// SIGILL, else why BTI cannot be tested here.
func btiEnforced(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		return err.Error()
	}
	args := []string{"-test.run=^TestBLRGuardedPage$", "-test.v"}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "A64_BTI_PROBE=1")
	out, err := cmd.CombinedOutput()
	if err != nil && !strings.Contains(string(out), "PROBE") { // not started: an arm64 binary on an x86 host
		q, qerr := exec.LookPath("qemu-aarch64")
		if qerr != nil {
			return "cannot run the BTI probe: " + err.Error()
		}
		cmd = exec.Command(q, append([]string{exe}, args...)...)
		cmd.Env = append(os.Environ(), "A64_BTI_PROBE=1")
		out, err = cmd.CombinedOutput()
	}
	switch {
	case strings.Contains(string(out), "SIGILL"):
		return ""
	case strings.Contains(string(out), "PROBE RETURNED"):
		return "BTI is not enforced here (no FEAT_BTI, or a kernel without CONFIG_ARM64_BTI)"
	}
	t.Fatalf("BTI probe: %v\n%s", err, out)
	return ""
}

// btiProbe branches with br x5 (BTYPE 11) to a `bti c` in a guarded page,
// which must raise SIGILL.
func btiProbe(t *testing.T) {
	fmt.Println("PROBE STARTED")
	h := newHarness(t)
	a := mapRegion(t, 0, 1<<20, h.stateAddr(), protBTI)
	s, target := a.base+0x10000, a.base+0x20000
	a.put(s, []uint32{tBrX5})
	a.put(target, append([]uint32{tBTIC}, exitStub(target+4, a.common, idTarget)...))
	var in regs
	in.X[5], in.SP = target, h.stackBase()+stackSize/2
	h.run(a, s, &in, make([]byte, stackSize))
	fmt.Println("PROBE RETURNED")
}
