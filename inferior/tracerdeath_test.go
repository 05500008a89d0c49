package inferior

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tracerHelperEnv makes the test binary act as a tracer that dies: it
// launches /bin/sh -c SCRIPT (KillOnTracerExit when the value is "kill"),
// lets it run, prints "running pid N" and waits until it is killed.
const tracerHelperEnv = "GOTPSTUB_TEST_TRACER_HELPER"

func init() {
	mode := os.Getenv(tracerHelperEnv)
	if mode == "" {
		return
	}
	script := os.Getenv(tracerHelperEnv + "_SCRIPT")
	p, err := Launch(LaunchOptions{Path: "/bin/sh", Args: []string{"sh", "-c", script},
		KillOnTracerExit: mode == "kill"})
	if err != nil {
		fmt.Println("launch:", err)
		os.Exit(2)
	}
	if err := p.Resume([]Action{{Tid: -1}}); err != nil {
		fmt.Println("resume:", err)
		os.Exit(2)
	}
	fmt.Printf("running pid %d\n", p.Pid())
	// The ptrace thread blocks in wait4 for the running program.
	ev, err := p.Wait()
	fmt.Println("unexpected stop:", ev, err)
	select {}
}

// A tracer killed with SIGKILL while its launched program runs: the
// kernel detaches the program (and the child it forked), which runs to
// its end, unless KillOnTracerExit asked for PTRACE_O_EXITKILL.
func TestTracerDeath(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	for _, mode := range []string{"survive", "kill"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			// 10 rounds of a forked sleep: 1 s in all.
			script := fmt.Sprintf(`i=0; while [ $i -lt 10 ]; do sleep 0.1; i=$((i+1)); done; echo done $i > %s`, out)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), tracerHelperEnv+"="+mode, tracerHelperEnv+"_SCRIPT="+script)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			line, err := bufio.NewReader(stdout).ReadString('\n')
			var pid int
			if _, serr := fmt.Sscanf(line, "running pid %d", &pid); serr != nil || err != nil {
				t.Fatalf("helper said %q (%v)", line, err)
			}
			t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
			time.Sleep(200 * time.Millisecond) // inside the loop
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			var got []byte
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) {
				got, _ = os.ReadFile(out)
				if strings.HasSuffix(string(got), "\n") {
					break
				}
				if mode == "kill" {
					if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
						break // gone, as asked
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			switch mode {
			case "survive":
				if string(got) != "done 10\n" {
					t.Errorf("the program wrote %q, want \"done 10\\n\" (state %s)", got, procState(pid))
				}
			case "kill":
				if len(got) != 0 {
					t.Errorf("the program outlived its tracer despite KillOnTracerExit: wrote %q", got)
				}
				if st := procState(pid); st != "" && st != "Z" {
					t.Errorf("the program is still there (state %s)", st)
				}
			}
		})
	}
}

// procState is the state letter of /proc/PID/stat, "" if it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "?"
	}
	return s[i+2 : i+3]
}

// guardLog records what a Guard is told, checking each Trap against
// memory: the int3 must not be there yet.
type guardLog struct {
	t      *testing.T
	calls  []string
	traps  map[uint64]byte
	memPid int
}

func (g *guardLog) Memory(pid int, mem *os.File) {
	g.calls = append(g.calls, fmt.Sprintf("memory %d %v", pid, mem != nil))
	g.memPid = pid
	g.traps = map[uint64]byte{}
	if pid != 0 && mem == nil {
		g.t.Errorf("Memory(%d, nil)", pid)
	}
}

func (g *guardLog) Trap(addr uint64, orig byte) {
	g.calls = append(g.calls, fmt.Sprintf("trap %#x %#x", addr, orig))
	g.traps[addr] = orig
}

func (g *guardLog) Untrap(addr uint64) {
	g.calls = append(g.calls, fmt.Sprintf("untrap %#x", addr))
	delete(g.traps, addr)
}

// The guard hears of every int3 with the byte under it, of its removal,
// and of the process's end; SetGuard replays the current int3s.
func TestGuardHearsOfInt3s(t *testing.T) {
	p := launch(t, "bp")
	addr := symbol(t, p, "hit")
	var orig [1]byte
	if _, err := p.ReadMemory(addr, orig[:]); err != nil {
		t.Fatal(err)
	}
	g := &guardLog{t: t}
	if err := p.InsertBreakpoint(SoftwareBreakpoint, addr, 1); err != nil {
		t.Fatal(err)
	}
	p.SetGuard(g)
	if g.memPid != p.Pid() || g.traps[addr] != orig[0] {
		t.Fatalf("after SetGuard: %q", g.calls)
	}
	if err := p.RemoveBreakpoint(SoftwareBreakpoint, addr, 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.traps[addr]; ok {
		t.Fatalf("no Untrap after the removal: %q", g.calls)
	}
	// An internal trap (a trap tracepoint's) is told too, and gdb's
	// write under it changes the saved byte.
	if err := p.InsertInternalTrap(addr); err != nil {
		t.Fatal(err)
	}
	if g.traps[addr] != orig[0] {
		t.Fatalf("internal trap: %q", g.calls)
	}
	if err := p.WriteMemory(addr, []byte{orig[0] ^ 1}); err != nil {
		t.Fatal(err)
	}
	if g.traps[addr] != orig[0]^1 {
		t.Fatalf("after a write under the trap: %q", g.calls)
	}
	if err := p.WriteMemory(addr, orig[:]); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if g.memPid != 0 {
		t.Fatalf("after Kill: %q", g.calls)
	}
}
