package inferior

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestCatchSyscalls: with catching on, a caught syscall stops its thread
// at its entry and at its return, with its number; other syscalls and,
// once catching is off, all of them run without a stop.
func TestCatchSyscalls(t *testing.T) {
	t.Run("one syscall", func(t *testing.T) {
		p := launch(t, "signal") // raise(SIGUSR1): tgkill
		runToMain(t, p)
		p.SetCatchSyscalls(true, []int{unix.SYS_TGKILL})
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind != SignalStop || ev.Signal != int(unix.SIGTRAP) || ev.Syscall != SyscallEntry || ev.SyscallNr != unix.SYS_TGKILL {
			t.Fatalf("first stop %+v, want tgkill's entry", ev)
		}
		resumeAll(t, p)
		// The signal is queued when tgkill returns; the return stop
		// comes first.
		ev = wait(t, p)
		if ev.Syscall != SyscallReturn || ev.SyscallNr != unix.SYS_TGKILL {
			t.Fatalf("second stop %+v, want tgkill's return", ev)
		}
		resumeAll(t, p)
		if ev = wait(t, p); ev.Kind != SignalStop || ev.Signal != int(unix.SIGUSR1) || ev.Syscall != NoSyscall {
			t.Fatalf("third stop %+v, want SIGUSR1", ev)
		}
		if err := p.Resume([]Action{{Tid: -1, Signal: int(unix.SIGUSR1)}}); err != nil {
			t.Fatal(err)
		}
		if ev = wait(t, p); ev.Kind != Exited || ev.ExitCode != 7 {
			t.Fatalf("last stop %+v, want exit 7 (the handler ran)", ev)
		}
	})
	t.Run("injection at an entry", func(t *testing.T) {
		// The stub maps memory in the program (an injected mmap) while
		// its only thread is stopped at tgkill's entry: tgkill must still
		// run once, and gdb hear of its entry once.
		p := launch(t, "signal")
		runToMain(t, p)
		p.SetCatchSyscalls(true, []int{unix.SYS_TGKILL})
		resumeAll(t, p)
		if ev := wait(t, p); ev.Syscall != SyscallEntry || ev.SyscallNr != unix.SYS_TGKILL {
			t.Fatalf("first stop %+v, want tgkill's entry", ev)
		}
		addr, err := p.AllocateScratch(0, 4096)
		if err != nil || addr == 0 {
			t.Fatalf("AllocateScratch at a syscall entry: %#x, %v", addr, err)
		}
		if _, err := p.ReadMemory(addr, make([]byte, 8)); err != nil {
			t.Fatalf("reading the new mapping: %v", err)
		}
		resumeAll(t, p)
		if ev := wait(t, p); ev.Syscall != SyscallReturn || ev.SyscallNr != unix.SYS_TGKILL {
			t.Fatalf("second stop %+v, want tgkill's return (and no second entry)", ev)
		}
		resumeAll(t, p)
		if ev := wait(t, p); ev.Kind != SignalStop || ev.Signal != int(unix.SIGUSR1) {
			t.Fatalf("third stop %+v, want SIGUSR1: tgkill ran", ev)
		}
		if err := p.Resume([]Action{{Tid: -1, Signal: int(unix.SIGUSR1)}}); err != nil {
			t.Fatal(err)
		}
		if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 7 {
			t.Fatalf("last stop %+v, want exit 7", ev)
		}
	})
	t.Run("every syscall", func(t *testing.T) {
		p := launch(t, "exit")
		runToMain(t, p)
		p.SetCatchSyscalls(true, nil)
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Syscall != SyscallEntry || ev.SyscallNr != unix.SYS_EXIT_GROUP {
			t.Fatalf("stop %+v, want exit_group's entry", ev)
		}
		resumeAll(t, p)
		if ev = wait(t, p); ev.Kind != Exited || ev.ExitCode != 42 {
			t.Fatalf("stop %+v, want exit 42", ev)
		}
	})
	t.Run("off again", func(t *testing.T) {
		p := launch(t, "signal")
		runToMain(t, p)
		p.SetCatchSyscalls(true, nil)
		p.SetCatchSyscalls(false, nil)
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind != SignalStop || ev.Signal != int(unix.SIGUSR1) || ev.Syscall != NoSyscall {
			t.Fatalf("stop %+v, want SIGUSR1 and no syscall stop", ev)
		}
	})
}
