// Package agentexpr decodes, validates, interprets, optimises and
// disassembles GDB agent expressions: the stack-machine bytecode GDB sends
// in QTDP (conditions and "X" collection actions) and related packets.
//
// The opcode set is GDB's gdbsupport/ax.def (see OpTable). The reference
// semantics follow the GDB manual ("Agent Expressions", "Bytecode
// Descriptions") and, where the manual is silent, what gdbserver's
// interpreter (gdbserver/ax.cc) does. Where gdbserver relies on undefined
// C behaviour, this package defines the result:
//
//   - The stack holds 64-bit values, stored unsigned; signed operations
//     reinterpret them as two's complement.
//   - lsh and rsh_unsigned by a count >= 64 give 0; rsh_signed by a count
//     >= 64 fills with the sign bit (0 or all ones). (C leaves shifts of a
//     64-bit value by >= 64 undefined.)
//   - div_signed INT64_MIN / -1 gives INT64_MIN and rem_signed INT64_MIN % -1
//     gives 0 (two's complement wrap-around; x86 would trap). Division or
//     remainder by zero fails with ErrDivideByZero.
//   - ext n sign-extends from bit n-1; n >= 64 leaves the value unchanged
//     (as the manual says); ext 0 is rejected (ErrBadOperand).
//     zero_ext n keeps the low n bits; n >= 64 leaves the value unchanged
//     and zero_ext 0 gives 0.
//   - const8/16/32/64 push their big-endian immediate zero-extended; GDB
//     emits an ext after a negative constant.
//   - ref8/16/32/64 read little-endian target memory and zero-extend.
//   - tracev n records trace state variable n and leaves the stack
//     unchanged. ax.def lists it as producing one value, but gdbserver
//     never pushes and GDB's own code generator (getv n; tracev n) relies on
//     that; Insn.StackEffect is the authoritative stack effect.
//   - setv n stores the top of the stack and leaves it there.
//   - trace pops size (top) then addr and records size bytes at addr;
//     trace_quick n and trace16 n record n bytes at the address on top and
//     leave it there; tracenz pops limit (top) then addr and records the
//     bytes at addr up to and including the first NUL, at most limit bytes.
//   - pick n pushes a copy of the item n below the top (pick 0 is dup);
//     rot turns a b c (c on top) into c a b (b on top), as the manual and
//     gdbserver do.
//   - printf has the layout: 0x34, nargs (1 byte), format length (2 bytes,
//     big-endian, including the terminating NUL), format bytes. It pops the
//     function (top), the channel, then nargs arguments; the first popped
//     argument belongs to the first conversion (GDB pushes them in reverse).
//   - end returns the value on top of the stack, or 0 if it is empty.
//
// # Using the package
//
// Parse (or DecodeHex for the hex of a QTDP "X" action) decodes bytecode;
// Validate checks it against the target's Limits and computes MaxDepth;
// Eval interprets it against an Env (memory, registers, trace state
// variables, a Collector for trace opcodes, an Output for printf);
// Optimize returns a smaller equivalent expression; Disassemble and Explain
// render expressions for people. Insn.StackEffect and Expr.JumpTarget give
// other code generators (package jit) the facts Validate relies on.
// Assemble builds bytecode from text and ParseGDBListing from the listing
// "maint agent" prints, for tests and tools.
//
// The golden tests in testdata/golden hold bytecode captured from gdb 13.1
// and gdbserver for testdata/prog.c; re-capture them with
//
//	go test ./agentexpr -run TestGoldenCapture -update
//
// Errors are *DecodeError, *ValidationError or *EvalError; errors.Is finds
// their class (ErrDivideByZero, ErrUnreadable, ErrStackUnderflow, ...).
//
// Validate insists, like GDB's own ax_reqs, that every instruction is reached
// with the same stack depth on every path; that makes the static analysis
// exact and guarantees that no loop can grow the stack.
package agentexpr
