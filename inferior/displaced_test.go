package inferior

import "testing"

// TestDisplacedStepOverTrap: a trap whose hook resumes the thread where
// it stopped (a breakpoint whose condition is false) is stepped over by
// the DisplacedStepper, the int3 left in memory and the other threads
// running on; without a stepper, or when it declines, in place (every
// thread stopped for the step). Four threads pass the trap 100 times
// each either way.
func TestDisplacedStepOverTrap(t *testing.T) {
	for _, c := range []struct {
		name    string
		stepper bool
		decline bool
		want    int // displaced steps
	}{
		{"displaced", true, false, 400},
		{"declined", true, true, 0},
		{"in place", false, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := launch(t, "tp")
			runToMain(t, p)
			site := symbol(t, p, "tp_nop") // a nop
			hits, steps := 0, 0
			p.SetTrapHook(func(s *Stopped) TrapAction {
				hits++
				return TrapResume // the pc stays on the trap
			})
			if c.stepper {
				p.SetDisplacedStepper(func(s *Stopped, addr uint64) (bool, error) {
					if c.decline {
						return false, nil
					}
					steps++
					r, err := s.Registers()
					if err != nil || addr != site || r.Uint64(regPC) != site {
						t.Errorf("stepper at %#x (pc %#x), want %#x: %v", addr, r.Uint64(regPC), site, err)
						return false, nil
					}
					_ = r.SetUint64(regPC, site+uint64(len(nopInsn))) // the nop, run
					return true, s.SetRegisters(r)
				})
			}
			if err := p.InsertInternalTrap(site); err != nil {
				t.Fatal(err)
			}
			resumeAll(t, p)
			if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 400&0xff {
				t.Fatalf("end %+v", ev)
			}
			if hits != 400 || steps != c.want || p.displacedSteps != c.want {
				t.Errorf("%d hits, %d steps by the stepper, %d counted; want 400, %d, %d", hits, steps, p.displacedSteps, c.want, c.want)
			}
		})
	}
}
