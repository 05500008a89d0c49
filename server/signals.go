package server

// GDB numbers signals its own way (include/gdb/signals.def); the remote
// protocol carries GDB numbers, ptrace reports Linux numbers. These tables
// translate for x86-64 and arm64 Linux, whose classic signal numbers agree.

// linuxToGDB maps Linux signal numbers 1..31 to GDB signal numbers.
var linuxToGDB = [32]int{
	0,   // 0
	1,   // SIGHUP
	2,   // SIGINT
	3,   // SIGQUIT
	4,   // SIGILL
	5,   // SIGTRAP
	6,   // SIGABRT
	10,  // SIGBUS
	8,   // SIGFPE
	9,   // SIGKILL
	30,  // SIGUSR1
	11,  // SIGSEGV
	31,  // SIGUSR2
	13,  // SIGPIPE
	14,  // SIGALRM
	15,  // SIGTERM
	143, // SIGSTKFLT: GDB has no name for it (GDB_SIGNAL_UNKNOWN)
	20,  // SIGCHLD
	19,  // SIGCONT
	17,  // SIGSTOP
	18,  // SIGTSTP
	21,  // SIGTTIN
	22,  // SIGTTOU
	16,  // SIGURG
	24,  // SIGXCPU
	25,  // SIGXFSZ
	26,  // SIGVTALRM
	27,  // SIGPROF
	28,  // SIGWINCH
	23,  // SIGIO
	32,  // SIGPWR
	12,  // SIGSYS
}

// HostToGDBSignal converts a Linux signal number to GDB's numbering.
func HostToGDBSignal(sig int) int {
	switch {
	case sig >= 0 && sig < 32:
		return linuxToGDB[sig]
	case sig == 32:
		return 77 // GDB_SIGNAL_REALTIME_32
	case sig == 33:
		return 45 // GDB_SIGNAL_REALTIME_33
	case sig >= 34 && sig <= 63:
		return 46 + (sig - 34)
	case sig == 64:
		return 78 // GDB_SIGNAL_REALTIME_64
	}
	return 143 // GDB_SIGNAL_UNKNOWN
}

// GDBToHostSignal converts a GDB signal number to the Linux one; it returns
// 0 and false for signals Linux does not have.
func GDBToHostSignal(g int) (int, bool) {
	if g == 0 {
		return 0, true
	}
	for s := 1; s < 32; s++ {
		if linuxToGDB[s] == g && s != 16 {
			return s, true
		}
	}
	switch {
	case g == 77:
		return 32, true
	case g == 45:
		return 33, true
	case g >= 46 && g <= 75:
		return 34 + (g - 46), true
	case g == 78:
		return 64, true
	}
	return 0, false
}
