package tdesc

import "golang.org/x/sys/cpu"

// Host returns the layout of processes on this machine: amd64 GNU/Linux,
// with the AVX upper halves when the CPU has AVX.
func Host() *Layout { return AMD64Linux(cpu.X86.HasAVX) }
