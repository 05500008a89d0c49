// Package displace is the seam between the trap-tracepoint installer
// (package trapfallback) and an instruction set: how one instruction is
// run somewhere other than where it lies, so a trap can stay on it.
//
// Each instruction set has its own package behind this interface
// (trapfallback/amd64, trapfallback/arm64); the installer, its sites,
// slots, hits and stepping are shared.
package displace

import (
	"errors"

	"gotpstub/tdesc"
)

// How says how an instruction runs out of line.
type How int

const (
	// CopyAndStep: a copy made by Insn.Relocate is single-stepped in a
	// slot near the instruction, then Insn.AfterStep moves the pc home.
	CopyAndStep How = iota
	// Skip: the instruction does nothing the program can see; the pc
	// moves past it.
	Skip
	// Emulate: Insn.Emulate executes it on the saved registers.
	Emulate
)

// ErrUnsupported is wrapped when an instruction cannot be run out of
// line safely.
var ErrUnsupported = errors.New("instruction cannot be displaced")

// Memory is a stopped thread's view of its process's memory.
type Memory interface {
	ReadMemory(addr uint64, b []byte) (int, error)
	WriteMemory(addr uint64, b []byte) error
}

// Insn is one decoded instruction and how to run it out of line.
type Insn interface {
	// How says which of the methods below applies.
	How() How
	// Len is the instruction's length in bytes.
	Len() int
	// Bytes are the instruction's own bytes (a trap over them replaced
	// the first ones).
	Bytes() []byte
	// Emulate executes the instruction on regs (the pc included) and
	// mem, for How() == Emulate.
	Emulate(regs *tdesc.Regs, mem Memory) error
	// Relocate returns the code that, placed at slot, executes the
	// instruction and then continues at the next original instruction
	// (or where the instruction branches), for How() == CopyAndStep. A
	// thread left running in it (the stub died) thus runs on correctly.
	Relocate(slot uint64) ([]byte, error)
	// AfterStep is called with the registers after each single-step of
	// the code Relocate placed at slot (size bytes). It reports done
	// once the instruction has executed, having moved the pc to where
	// the original would have left it and repaired anything the copy
	// left showing its own address (a pushed return address); not done:
	// step again.
	AfterStep(regs *tdesc.Regs, mem Memory, slot uint64, size int) (done bool, err error)
}

// ISA is what the installer needs to know of an instruction set.
type ISA struct {
	// MaxInsnLen is how many bytes Analyse may need.
	MaxInsnLen int
	// SlotSize is the room one relocated copy needs.
	SlotSize int
	// Reach is how far from an instruction its slot may be.
	Reach uint64
	// Analyse decodes the instruction at addr, whose bytes begin code.
	Analyse func(addr uint64, code []byte) (Insn, error)
}
