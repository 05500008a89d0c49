// Package frames is the trace buffer of the stub: it stores trace frames in
// gdbserver's byte layout, indexes them for tfind, serves qTBuffer and
// writes the tfile format for QTSave.
//
// # Frame layout
//
// Every frame is stored exactly as gdbserver stores it (gdbserver/tracepoint.cc,
// struct traceframe, packed, target byte order = little-endian on x86-64):
//
//	u16 tpnum        tracepoint number (0 is the end-of-buffer marker, never a frame)
//	u32 data_size    number of block bytes that follow
//	blocks:
//	  'R' + register block of exactly the g-packet size
//	  'M' + u64 address + u16 length + length bytes
//	  'V' + u32 (C int) variable number + i64 value
//	  'S' + u16 length + length bytes (static tracepoint data)
//	  'r' + u16 length + runs of the register block (gotpstub's own:
//	      a frame of the collected size, see regruns.go)
//
// gdb's tsave copies qTBuffer bytes verbatim into the tfile and `target tfile`
// walks them with the same layout, so this is the on-wire format too, with
// one exception: a tracepoint that collects some registers only (`collect
// $rdi`) stores them, and the PC, in an 'r' block, which qTBuffer and QTSave
// serve expanded to an 'R' block (zeros outside the runs). Used() and the
// budget count the stored frames; GDBUsed() is the length gdb reads.
//
// Beside its bytes a stored frame keeps its fallback PC and which
// registers its R block really holds (RegsSource: a jump pad saves no
// orig_rax, gs_base and, unless asked, no vector state), so that the
// stub shows the others as unavailable. The layout has no room for
// either: a tfile loses them (its R blocks read as wholly collected).
//
// # Budget
//
// A Buffer has a byte budget (default 5 MiB, gdbserver's
// DEFAULT_TRACE_BUFFER_SIZE). Like gdbserver, every allocation must leave
// room for a 6-byte end-of-buffer marker, so a frame of S bytes fits when
// Used()+S+6 <= Size(). Used() counts frame bytes only (it is gdbserver's
// "tsize - tfree" and the length of the qTBuffer byte stream), Free() is
// Size()-Used().
//
// Linear buffers refuse a frame that does not fit (ErrFull; the frame is not
// stored and nothing already stored is lost; the engine then stops the run
// with reason "tfull"). Circular buffers drop the oldest frames until the new
// one fits. Deliberate differences from gdbserver:
//
//   - Frames are committed whole. gdbserver allocates the header and then
//     each block separately; in a linear buffer a block that does not fit is
//     silently left out (the frame is kept, truncated) and the run only
//     stops when not even a frame header fits.
//   - A circular buffer is a byte ring like gdbserver's, but a frame may
//     cross the end of the ring and continue at its start. gdbserver's
//     ring wastes its tail when a block does not fit before the wrap point,
//     and so may drop a few more frames than strictly needed; here exactly
//     the oldest frames needed to fit the budget are dropped.
//   - A frame larger than the whole buffer is refused with ErrFull without
//     first discarding every stored frame.
//
// # Frame numbers
//
// As in gdbserver's find_traceframe, a frame's number is its position among
// the frames currently present, oldest first: the oldest frame present is
// always number 0. When a circular buffer drops old frames, the numbers of the
// remaining frames shift down. Created() counts every frame committed since
// the last Clear, including dropped ones (gdbserver's traceframes_created);
// Count() counts those present (traceframe_count).
//
// # Finding frames
//
// FindPC, FindTracepoint and FindRange implement QTFrame:pc, :tdp, :range and
// :outside: each returns the first frame whose number is greater than after
// (the current frame; -1 when none is selected). The search never wraps.
// A frame's address is the PC in its register block (read at pcOffset as a
// little-endian u64); when the frame has no register block, or the PC reads
// 0, the fallback address given with FrameBuilder.SetFallbackPC is used (the
// tracepoint's address, as gdbserver's get_traceframe_address does). A frame
// with neither matches no address search.
//
// Per-tracepoint and per-PC lists of frame sequence numbers make FindPC and
// FindTracepoint O(log n); FindRange scans a dense array of addresses.
// These indexes are built by the first search and brought up to date by
// the next ones: Commit does not maintain them.
//
// # Time
//
// A frame's time (FrameBuilder.SetTime, Frame.Time: nanoseconds since the
// Unix epoch, 0 unknown) is kept in its record, not in its bytes: gdb's
// frames have no place for it and the budget gdb set counts only the
// frames' bytes. WriteTFile adds the times after the end marker
// (TimesMagic), where gdb's reader does not look; ReadTFile reads them
// back.
//
// # Memory
//
// Frame bytes are stored in a ring of the budget's size made of 1 MiB
// pieces (byteRing), allocated as the writer nears them — in the
// background, a few pieces ahead (growAheadLocked) — or up front by
// Reserve (QTStart reserves up to 16 MiB after the installation, without
// the buffer's lock; populate makes each piece's pages present with one
// madvise, then touches them), never moved once
// there, and kept across Clear. The arena that doubled, which it
// replaced, copied every stored byte under the lock: committing 300,000
// 1 KB frames into a 512 MiB buffer, the worst commit held the lock for
// 3.1-3.7 s; with the pieces 6-13 ms (BenchmarkCommitWorst, 2026-11-26).
// A frame that crosses pieces is read through a copy. Each present frame also
// has a 24-byte record (with the time it was taken), in chunks of 4,096
// records that are added as frames arrive and reused once their frames
// are dropped or cleared (recRing): the index of a long run is never
// copied (the doubling ring it replaced copied 96 MB under the buffer's
// lock at 4 million frames, a 312 ms stall of the drainer and of gdb's
// requests here; now the worst commit of 8 million takes about 2 ms).
// The search indexes add up to 25 bytes per frame once tfind has used
// them. Nothing holds a pointer per frame, and Commit allocates nothing
// in steady state (a reused FrameBuilder, see FrameBuilder.Reset).
//
// # Concurrency
//
// A Buffer is safe for concurrent use; one mutex guards all of it (a
// Batch holds it across many commits: the fast tracepoints' drainer;
// Batch.CommitHeader stores a frame that collected nothing without a
// builder). Frames
// returned by the Buffer (Frame, FindPC, FindTracepoint, FindRange, and
// the ones Frames passes to its callback) hold a copy of their bytes, made
// under the lock: a circular buffer reuses the space of dropped frames,
// and Clear that of all frames, so a selected frame must not point into
// it. Copying on read keeps Commit cheap; reads are rare (tfind, tdump).
// A FrameBuilder is not safe for concurrent use.
package frames
