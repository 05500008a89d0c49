// Package tracing is the trace experiment engine of the stub: the
// tracepoint table, the trace state variables, the run state and status,
// the trace buffer and the selected trace frame. It answers every packet
// gdb's trace commands send (QTinit, QTDP, QTDPsrc, QTDV, QTStart, QTStop,
// qTStatus, QTFrame, qTfP/qTsP, qTfV/qTsV, qTV, qTP, QTEnable/QTDisable,
// QTBuffer, qTBuffer, QTNotes, QTro, QTDisconnected, qTMinFTPILen, QTSave,
// qXfer:traceframe-info:read).
//
// How a tracepoint is hit is not this package's business: an Installer
// (traps in trapfallback, jump pads in fasttp) puts tracepoints into the
// inferior and reports every hit with Engine.Hit and every while-stepping
// step with Engine.Step. Those run on the ptrace thread while the packet
// goroutine may be in HandlePacket; one mutex guards the engine's state,
// and the engine never calls the Installer while holding it. An Installer
// that is a Preparer hears of each fast tracepoint gdb defines, to start
// the work its placement will need while gdb downloads the rest.
//
// Semantics follow gdbserver (gdbserver/tracepoint.cc) unless noted:
//
//   - A hit counts (qTP, passcount) only when the condition is true; a
//     condition that cannot be evaluated stops the run with terror.
//   - A tracepoint without while-stepping stops the run (tpasscount) on the
//     hit that reaches its passcount; one with while-stepping stops after
//     its last step. Unlike gdbserver, a hit whose condition is false does
//     not start while-stepping.
//   - A frame that does not fit a linear buffer stops the run (tfull) and
//     is not stored; a circular buffer drops its oldest frames.
//   - Memory that cannot be read at collection time is not recorded (a
//     partial read keeps the bytes that could be read); register blocks
//     record the tracepoint's address as the PC, like gdbserver's stop_pc.
//   - Memory an expression dereferences but cannot read reads as zero
//     (gdbserver ignores those read errors too); an expression that fails
//     otherwise (division by zero, stack overflow) stops the run with
//     terror, its text naming the condition or action.
//   - M actions honour their base register (gdbserver ignores it).
//   - In a selected frame, memory neither collected nor in a QTro range
//     reads from the live program where it is code (a Live reader that is
//     a CodeSpanner): gdb's QTro ranges miss a PIE's code, and aarch64 gdb
//     cannot unwind a frame whose pc it cannot read.
//   - Redefining a known location (same number and address) replaces its
//     definition: gdb re-sends a running experiment's locations when it
//     re-sets breakpoints after a shared library loads, which gdbserver
//     answers with an error.
//   - qTStatus ends after the notes field (gdbserver appends a stray ':').
//   - Trace state variable 1 is $trace_timestamp, predefined, whose value
//     is the wall-clock time in microseconds (for a fast hit, the time
//     the pad read, FastRecord.When).
//   - Every frame records when it was taken (frames.FrameBuilder.SetTime:
//     the stub's clock at a trap hit, the record's converted time-stamp
//     counter for a fast one); gdb never sees it, QTSave writes it and
//     `gotpstub export` reads it.
//   - qTP answers in hex as the manual says (gdbserver answers decimal).
//   - Static tracepoints (QTDP's S) are SDT probe markers: the L action
//     ($_sdata) stores what the StaticDataSource gives (the server:
//     "provider:name(args)") in an 'S' block, which qXfer:statictrace
//     serves for the selected frame. A fast hit's record holds the
//     registers and the memory StaticReads names; the engine makes the
//     block from them and drops that memory (faststatic.go).
package tracing
