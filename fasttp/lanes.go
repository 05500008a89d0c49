package fasttp

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"gotpstub/frames"
	"gotpstub/inferior"
	"gotpstub/jit"
)

// Layout of the memory the stub shares with the inferior: the control
// block (jit.Ctl*, with the lane headers and the tracepoint table), then
// the lanes' data, each laneSize bytes.
const (
	// ownedLanes is the number of lanes threads can own (jit.PadSpec.Lanes);
	// one more is shared by the others.
	ownedLanes = 16
	// padTSVs is how many trace state variables the pads keep: numbers
	// 0 to padTSVs-1, in an int64 array after the tracepoint table
	// (jit.CtlTSVs points to it, jit.CtlNTSVs is padTSVs).
	padTSVs = 256
	// tsvOff is the array's offset in the control block.
	tsvOff = jit.CtlTPs + maxSlots*jit.CtlTPSize
	// ctlBytes is the control block, rounded to pages.
	ctlBytes = (tsvOff + 8*padTSVs + 4095) &^ 4095
)

// lanes is the stub's view of the shared memory.
type lanes struct {
	mem      *inferior.SharedMemory
	laneSize uint64
	tails    []uint64 // the stub's consumer cursor of each lane (mirrors LaneTail)
	// populated is, per lane, how far (in bytes from its start) the stub
	// has had the lane's pages allocated (populateAhead).
	populated []uint64
	// mapped is, per lane, how many bytes from its start the process has
	// mapped already (prefault, mapInProcess): its writes there take no
	// page fault.
	mapped []uint64
	// startWant is, per lane, how far from its start the drainer is to
	// allocate its pages and have the process map them at its next look
	// (prefaultLocked sets it for a run's owned lanes).
	startWant []uint64
	// seen is, per lane, its head at the stub's last look
	// (populateAhead): how far the pads wrote between two looks sets how
	// far ahead the stub allocates.
	seen  []uint64
	heads []uint64 // readHeads' result
	// cpus is how many CPUs the stub may run on: when as many lanes'
	// pads are writing, the program's threads keep every CPU busy and
	// populate leaves the pages to them.
	cpus    int
	busy    bool // populate's last verdict: the writers took every CPU
	pid     int  // the process, for mapInProcess (0: none, unit tests)
	scratch [][]RingRecord
	// next is, per lane, the tail after the records of the last drain,
	// published by release once the engine is done with them.
	next []uint64
}

// newLanes returns the stub's view of n lanes of laneSize bytes in mem.
func newLanes(mem *inferior.SharedMemory, laneSize uint64, n int) *lanes {
	return &lanes{mem: mem, laneSize: laneSize, tails: make([]uint64, n), next: make([]uint64, n),
		scratch: make([][]RingRecord, n), populated: make([]uint64, n), mapped: make([]uint64, n), startWant: make([]uint64, n), seen: make([]uint64, n),
		heads: make([]uint64, n), cpus: runtime.NumCPU()}
}

// ctl returns the control block.
func (l *lanes) ctl() []byte { return l.mem.Data[:ctlBytes] }

// hdr returns lane i's header offset in the control block.
func laneHdr(i int) uint64 { return uint64(jit.CtlLanes + i*jit.LaneHdrSize) }

// dataOff returns the offset of lane i's data in the shared memory.
func (l *lanes) dataOff(i int) uint64 { return ctlBytes + uint64(i)*l.laneSize }

// data returns lane i's data.
func (l *lanes) data(i int) []byte {
	off := l.dataOff(i)
	return l.mem.Data[off : off+l.laneSize]
}

// clearOwners frees every lane of the owner table. No thread may be in
// a pad.
func (l *lanes) clearOwners() {
	c := l.ctl()
	for i := range ownedLanes {
		store64(c, uint64(jit.CtlOwners+8*i), 0)
	}
}

// claim gives the thread whose thread pointer is fs a lane, in the owner
// table where the pads' search finds it (jit.LaneSlot), and returns the
// lane; false when every lane is taken (the thread will use the shared
// lane). No thread may be in a pad.
func (l *lanes) claim(fs uint64) (int, bool) {
	c := l.ctl()
	slot := jit.LaneSlot(fs, ownedLanes)
	for k := range ownedLanes {
		i := (slot + k) % ownedLanes
		switch load64(c, uint64(jit.CtlOwners+8*i)) {
		case fs:
			return i, true
		case 0:
			store64(c, uint64(jit.CtlOwners+8*i), fs)
			return i, true
		}
	}
	return 0, false
}

// mapLanes creates the shared memory in p and initialises the control
// block: inactive, lanes empty, the stub's liveness word tied to p's
// tracer thread (when the stub ends, however it ends, the kernel clears
// it and the pads skip every hit).
func mapLanes(p *inferior.Process, laneSize uint64) (*lanes, error) {
	n := ownedLanes + 1
	mem, err := p.MapShared(int(ctlBytes + uint64(n)*laneSize))
	if err != nil {
		return nil, fmt.Errorf("mapping the trace lanes: %w", err)
	}
	l := newLanes(mem, laneSize, n)
	l.pid = p.Pid()
	c := l.ctl()
	binary.LittleEndian.PutUint64(c[jit.CtlPid:], uint64(p.Pid()))
	binary.LittleEndian.PutUint64(c[jit.CtlTSVs:], mem.Addr+tsvOff)
	binary.LittleEndian.PutUint64(c[jit.CtlNTSVs:], padTSVs)
	for i := range n {
		h := laneHdr(i)
		binary.LittleEndian.PutUint64(c[h+jit.LaneBase:], mem.Addr+ctlBytes+uint64(i)*laneSize)
		binary.LittleEndian.PutUint64(c[h+jit.LaneSize:], laneSize)
	}
	if err := p.MarkTracerAlive((*uint32)(unsafe.Pointer(&c[jit.CtlStubAlive]))); err != nil {
		_ = mem.Close()
		return nil, err
	}
	return l, nil
}

// setActive switches collection in every pad on or off.
func (l *lanes) setActive(on bool) {
	v := uint64(0)
	if on {
		v = 1
	}
	store64(l.ctl(), jit.CtlActive, v)
}

// active reports whether collection is on (setActive).
func (l *lanes) active() bool { return load64(l.ctl(), jit.CtlActive) != 0 }

// writeSlot initialises tracepoint table entry slot.
func (l *lanes) writeSlot(slot uint32, passcount uint64) {
	off := uint64(jit.CtlTPs) + uint64(slot)*jit.CtlTPSize
	c := l.ctl()
	store64(c, off+jit.TPHits, 0)
	store64(c, off+jit.TPErrors, 0)
	store64(c, off+jit.TPPassCount, passcount)
}

// reset empties every lane and clears the counters and the stop word, for a
// new experiment. No thread may be inside a pad (all stopped, none in a
// pad's memory) and everything wanted must have been drained.
func (l *lanes) reset() {
	l.release()
	c := l.ctl()
	for i := range l.tails {
		h := laneHdr(i)
		head := load64(c, h+jit.LaneHead)
		l.zero(i, l.tails[i], head)
		store64(c, h+jit.LaneHead, 0)
		store64(c, h+jit.LaneTail, 0)
		store64(c, h+jit.LaneDropped, 0)
		store64(c, h+jit.LaneSpent, 0)
		l.tails[i], l.next[i], l.seen[i] = 0, 0, 0
	}
	// Pages stay allocated: populated stays as it is.
	store64(c, jit.CtlStop, 0)
	store64(c, jit.CtlStubGoneSkips, 0)
}

// zero clears lane i's bytes between cursors from and to.
func (l *lanes) zero(i int, from, to uint64) {
	rs, err := ConsumedRanges(l.laneSize, from, min(to, from+l.laneSize))
	if err != nil {
		return
	}
	d := l.data(i)
	for _, r := range rs {
		clear(d[r[0]:r[1]])
	}
}

// maxDrainBatch bounds the records one drain pass takes out of the lanes
// (and so the stub's memory for them); more stay for the next pass. It
// also bounds how long the drainer goes without looking at the pads'
// stop words and the buffer's room between passes (a pass of records
// with registers takes about 0.3 µs a record, more when cold).
const maxDrainBatch = 2048

// drain reads the committed records of every lane, at most maxDrainBatch
// of them, and returns them merged by time (each lane's order kept); more
// says some were left. The records point into the lanes: the caller
// calls release when it is done with them, before the next drain.
// quiescent says no thread can be writing (all stopped outside the
// pads): a record still uncommitted then was abandoned (its thread died
// in the pad) and the rest of its lane is discarded, counted in the
// returned lost bytes.
func (l *lanes) drain(out []*RingRecord, quiescent bool) (_ []*RingRecord, lost uint64, more bool, _ error) {
	l.release()
	var firstErr error
	budget := maxDrainBatch
	heads := l.readHeads()
	l.populate(heads)
	for i, head := range heads {
		tail := l.tails[i]
		if head == tail {
			l.scratch[i] = l.scratch[i][:0]
			continue
		}
		recs, newTail, capped, err := parseLaneN(l.data(i), tail, head, l.scratch[i][:0], budget)
		l.scratch[i] = recs
		budget -= len(recs)
		more = more || capped
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("lane %d: %w", i, err)
		}
		if (err != nil || quiescent && !capped) && newTail < head {
			// Corrupt or abandoned: drop the rest of the lane.
			lost += head - newTail
			newTail = head
		}
		for j := range recs {
			recs[j].Lane = i
		}
		completeCompact(recs, l.owner(i), rdtsc()+compactSkew)
		l.next[i] = newTail
	}
	return mergeByTime(l.scratch, out), lost, more, firstErr
}

// compactSkew is added to the stub's clock when it completes compact
// records' time stamps: a record written on another CPU may read a
// counter a little ahead of the stub's (about 1.4 s of cycles here).
const compactSkew = 1 << 32

// owner returns the thread pointer that owns lane i (0: none, or the
// shared lane).
func (l *lanes) owner(i int) uint64 {
	if i >= ownedLanes {
		return 0
	}
	return load64(l.ctl(), uint64(jit.CtlOwners+8*i))
}

// backlog returns the most bytes any lane holds that the stub has not
// consumed (a lane's head less its tail), and whether a lane was written
// since the last look. It also allocates the pages the pads will reach
// next (populate), whether or not the stub drains now.
func (l *lanes) backlog() (most uint64, moved bool) {
	heads := l.readHeads()
	moved = l.populate(heads) > 0
	for i, tail := range l.tails {
		most = max(most, heads[i]-tail)
	}
	return most, moved
}

// readHeads returns every lane's head (jit.LaneHead) as it is now, in a
// slice the next call reuses.
func (l *lanes) readHeads() []uint64 {
	c := l.ctl()
	for i := range l.heads {
		l.heads[i] = load64(c, laneHdr(i)+jit.LaneHead)
	}
	return l.heads
}

// spent returns the frame bytes the lanes' records make, all lanes
// together, since the run started (jit.LaneSpent).
func (l *lanes) spent() uint64 {
	c := l.ctl()
	var n uint64
	for i := range l.tails {
		n += load64(c, laneHdr(i)+jit.LaneSpent)
	}
	return n
}

// release gives the lanes' space of the last drain's records back to the
// pads: it zeroes their bytes, then publishes the new tails.
func (l *lanes) release() {
	c := l.ctl()
	for i, next := range l.next {
		if tail := l.tails[i]; next != tail {
			l.zero(i, tail, next)
			store64(c, laneHdr(i)+jit.LaneTail, next)
			l.tails[i] = next
		}
	}
}

// populateBytes is the most a lane's pages are allocated ahead of its
// head (during its first lap), and populateMin the least once the lane
// is written.
const (
	populateBytes = 8 << 20
	populateMin   = 256 << 10
)

// populateRate is how many times what the pads wrote into a lane since
// the stub's last look it allocates ahead of the lane's head: the stub
// looks again within 500 µs while the pads write, their rate may have
// grown meanwhile.
const populateRate = 4

// populate allocates, for each lane, the pages its pads will reach next
// (populateAhead), heads being the lanes' heads now — unless the lanes
// whose heads moved since the last look are as many as the CPUs the
// stub may use. A shared page first touched by the program costs it a
// page fault that allocates and zeroes it (2.7-3.8 µs a page on the KVM
// guest measured last, 6 ns per compact record); allocated and mapped
// ahead by the stub, it costs the program nothing, and the stub about
// 4 µs (bench/README.md). That is worth it while a CPU has room for the
// stub; when the program's writing threads keep every CPU busy the
// stub's work only takes their CPU from them (two threads on two CPUs
// paid 1.7-2 times one thread's cost per hit that way), and the pads
// fault the pages in themselves. It returns how many lanes were written
// since the last look.
func (l *lanes) populate(heads []uint64) (writers int) {
	for i, h := range heads {
		if h != l.seen[i] {
			writers++
		}
	}
	if writers > 0 {
		// No lane moved (a second call in the same look, or a program
		// that paused) keeps the last look's verdict.
		l.busy = writers >= l.cpus
	}
	busy := l.busy
	for i, h := range heads {
		if busy {
			l.seen[i] = h
			continue
		}
		l.populateAhead(i, h)
	}
	return writers
}

// populateAhead allocates the pages of lane i the writer will reach next
// (madvise MADV_POPULATE_WRITE on the stub's view) and maps them in the
// process (mapInProcess). On the PVM virtual machines this was first
// measured on (shadow page tables) a process's first access to each page
// of its address space cost about 5.4 µs however the page got there,
// which the stub cannot take off the program (bench/firsttouch.c); the
// page fault it does take off. A lane no thread has written yet gets its
// first spareHead bytes (a thread started after tstart claims a lane at
// its first hit, before the drainer has seen it); a lane in use gets
// populateRate times what its pads wrote since the last look, between
// populateMin and populateBytes, ahead of its head, a little at a time:
// pages allocated and never written are the stub's work for nothing.
func (l *lanes) populateAhead(i int, head uint64) {
	grown := head - l.seen[i]
	l.seen[i] = head
	if l.populated == nil || l.populated[i] >= l.laneSize {
		return
	}
	if head >= l.laneSize {
		// One lap done: the writer touched everything.
		l.populated[i] = l.laneSize
		return
	}
	ahead := uint64(spareHead)
	if head > 0 {
		ahead = min(max(populateRate*grown, populateMin), populateBytes)
	}
	target := max(head+ahead, l.startWant[i])
	l.allocate(i, min(l.laneSize, (target+4095)&^4095))
}

// allocate allocates lane i's pages up to target bytes from its start
// (madvise MADV_POPULATE_WRITE on the stub's view) and maps them in the
// process, a step at a time, each mapped as soon as it is allocated: the
// writer may be close behind.
func (l *lanes) allocate(i int, target uint64) {
	for from := l.populated[i]; from < target; {
		to := min(target, from+populateStep)
		_ = unix.Madvise(l.data(i)[from:to], unix.MADV_POPULATE_WRITE) // older kernels: EINVAL, harmless
		l.mapInProcess(i, from, to)
		l.populated[i], from = to, to
	}
}

// populateStep is the bytes populateAhead allocates (and maps in the
// process) at a time.
const populateStep = 256 << 10

// mapInProcess has the process map lane i's bytes [from, to), allocated
// already, while it runs: process_vm_readv reads one byte of every page,
// and the reads fault in the process's page table (a shared writable
// mapping gets writable entries) each page, a fault mapping its
// neighbours too (the kernel's fault-around, 64 KiB by default, aligned
// on addresses, not on the lane). The pads' writes there then take no
// fault. A byte every 64 KiB of the lane, as before, left the pages of
// each window before the read unmapped: of the 2,048 KiB asked at a
// tstart (a lane's first MiB, 64 KiB of each other lane), 1,912 were
// mapped (TestFastTraceLanesMappedAtTstart).
func (l *lanes) mapInProcess(i int, from, to uint64) {
	if l.pid == 0 || l.mapped[i] >= to {
		return
	}
	from = max(from, l.mapped[i])
	base := l.mem.Addr + l.dataOff(i)
	var remote []unix.RemoteIovec
	for a := (base + from) &^ 4095; a < base+to; a += 4096 {
		remote = append(remote, unix.RemoteIovec{Base: uintptr(a), Len: 1})
	}
	buf := make([]byte, min(len(remote), iovMax))
	for len(remote) > 0 {
		n := min(len(remote), iovMax)
		_, _ = unix.ProcessVMReadv(l.pid, []unix.Iovec{{Base: &buf[0], Len: uint64(n)}}, remote[:n], 0)
		remote = remote[n:]
	}
	l.mapped[i] = to
}

// iovMax is the most iovecs one process_vm_readv takes (IOV_MAX).
const iovMax = 1024

// setBudget sets every lane's LaneBudget: the pads switch collection off
// once a lane's records make more than room frame bytes (less the
// end-of-buffer marker); room 0 (a circular buffer) sets none. Each lane
// may take the whole room (a lane cannot know the others'): the stub's
// look at all lanes together (Installer.bufferFilled) stays the exact
// test, the budget only makes a lone writer stop at once.
func (l *lanes) setBudget(room uint64) {
	budget := uint64(0)
	if room > 0 {
		budget = max(room-min(room, frames.EOBMarkerSize), 1)
	}
	for i := range l.tails {
		store64(l.ctl(), laneHdr(i)+jit.LaneBudget, budget)
	}
}

// tightenBudgets lowers each lane's LaneBudget to what the lane spent so
// far plus left, the room the linear buffer has left beyond every lane's
// records now (EOB marker included). A pad that passes its lane's budget
// then knows the lanes together passed the room (its lane alone took all
// that was left), so the run never stops early; and it stops within what
// the other lanes write between two looks, where a budget of the whole
// room let each of two threads run on for up to the whole room: two
// threads collecting `$regs` wrote 25-30% more records than a 5 MB
// buffer takes before the stub saw it full.
func (l *lanes) tightenBudgets(left uint64) {
	c := l.ctl()
	for i := range l.tails {
		spent := load64(c, laneHdr(i)+jit.LaneSpent)
		store64(c, laneHdr(i)+jit.LaneBudget, max(spent+left, 1))
	}
}

// dropped returns the hits the pads dropped: lanes full, no stub.
func (l *lanes) dropped() (full, noStub uint64) {
	c := l.ctl()
	for i := range l.tails {
		full += load64(c, laneHdr(i)+jit.LaneDropped)
	}
	return full, load64(c, jit.CtlStubGoneSkips)
}

// takeStop returns why a pad stopped tracing (0: none) and the slot,
// clearing the stop word so that a later stop can be told.
func (l *lanes) takeStop() (why uint64, slot uint32) {
	p := (*uint64)(unsafe.Pointer(&l.ctl()[jit.CtlStop]))
	v := atomic.LoadUint64(p)
	if v == 0 || !atomic.CompareAndSwapUint64(p, v, 0) {
		return 0, 0
	}
	return v & 0xffffffff, uint32(v >> 32)
}

// loadTSV and storeTSV read and write trace state variable num in the
// shared array (atomically: pads update it with LOCK XADD).
func (l *lanes) loadTSV(num int) int64 { return int64(load64(l.ctl(), tsvOff+8*uint64(num))) }

func (l *lanes) storeTSV(num int, v int64) { store64(l.ctl(), tsvOff+8*uint64(num), uint64(v)) }
