// Package rsp implements the framing layer of the GDB Remote Serial Protocol
// (RSP): packet framing and checksums, acknowledgments, no-ack mode,
// interrupts, run-length encoding of replies, escaping of binary data, hex
// helpers and a prefix-based packet dispatcher.
//
// # Framing
//
// A packet is "$payload#cs" where cs is the modulo-256 sum of the payload
// bytes as two hex digits. Outside no-ack mode every packet is acknowledged
// with '+' (received correctly) or '-' (request retransmission).
//
// Decisions documented here, taken from the GDB manual ("Overview",
// "Packet Acknowledgment", "Interrupts") and from what gdb/gdbserver do:
//
//   - Bytes outside a packet other than '$', '+', '-' and 0x03 are skipped.
//     A 0x03 byte outside a packet is an interrupt request; inside a packet it
//     is ordinary data.
//   - A '$' inside a packet restarts the packet (gdb's own reader does the
//     same): the partial packet is discarded.
//   - A checksum mismatch is answered with '-' and the packet dropped. In
//     no-ack mode the packet is delivered anyway, as gdbserver does: gdb does
//     not expect any acknowledgment, so there is nothing better to do.
//   - A packet whose payload exceeds MaxPacketSize (the PacketSize the stub
//     announces, so a correct gdb never sends one) is discarded without
//     buffering it and answered with '-' (dropped silently in no-ack mode).
//     gdb retransmits at most three times after a '-' and then reports an
//     error, so this cannot loop forever.
//   - Incoming data is never run-length expanded: gdb does not encode what it
//     sends.
//   - Replies sent with Conn.Send are run-length encoded. Repeat counts are
//     n+29 with 3 <= n <= 97; the counts 6 and 7 (which would produce '#' and
//     '$') are replaced by 5. Runs of '*' are never encoded. Payloads are not
//     escaped by Send: a handler returning binary data escapes it with
//     EscapeBinary. Send refuses payloads containing a raw '$' or '#', which
//     would break the framing.
//
// # Goroutines
//
// A reader goroutine parses the stream, acknowledges packets, passes
// acknowledgments to Send and queues packets and interrupts on Incoming.
// A connection made with NewConnDispatch first offers each of them to a
// dispatch function on the reader goroutine, which may handle it there:
// a hand-off between goroutines costs more than the rest of a simple
// packet's round trip on a VM.
//
// # Transport
//
// A TCP connection is best read and written through a BlockingSocket:
// blocking read(2) and write(2) on the socket itself, outside Go's network
// poller, so that the reader sleeps in read and the kernel wakes it with
// the next packet. Through the poller each packet cost an extra read
// (EAGAIN), an epoll_pwait and a scheduler hand-off: on the two-CPU
// virtual machine measured, the stub's context switches over a tstart
// session fell from 10,500 to 6,500 and its CPU time from 370 to 244 ms
// (perf stat around scripts/bench-insert.sh 100).
package rsp
