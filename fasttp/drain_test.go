package fasttp

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"gotpstub/frames"
	"gotpstub/inferior"
	"gotpstub/jit"
	"gotpstub/tdesc"
	"gotpstub/tracing"
)

// nopInstaller lets the engine start a run without a process.
type nopInstaller struct{}

func (nopInstaller) Install(*tracing.Tracepoint) error { return nil }
func (nopInstaller) Remove(*tracing.Tracepoint) error  { return nil }

// drainRig is an Installer over lanes in ordinary memory (standing in for
// the shared mapping) feeding a running engine with tracepoint 1 in slot 0.
type drainRig struct {
	in    *Installer
	e     *tracing.Engine
	lanes *lanes
}

func newDrainRig(tb testing.TB, laneSize uint64, circular bool, collectRegs bool) *drainRig {
	tb.Helper()
	e := tracing.NewEngine(tracing.Config{Layout: tdesc.AMD64Linux(false), Installer: nopInstaller{}})
	action := ""
	if collectRegs {
		action = "-"
	}
	pkts := []string{"QTinit", "QTDP:1:401000:E:0:0" + action}
	if collectRegs {
		pkts = append(pkts, "QTDP:-1:401000:Rffffffffffffffffffffffff") // every register
	}
	pkts = append(pkts, "QTBuffer:size:4000000")
	if circular {
		pkts = append(pkts, "QTBuffer:circular:1")
	}
	pkts = append(pkts, "QTStart")
	for _, p := range pkts {
		if r, _ := e.HandlePacket([]byte(p)); string(r) != "OK" {
			tb.Fatalf("%s: %s", p, r)
		}
	}
	n := ownedLanes + 1
	mem := &inferior.SharedMemory{Addr: 0x10000000, Data: make([]byte, ctlBytes+uint64(n)*laneSize)}
	l := newLanes(mem, laneSize, n)
	l.populated = nil
	in := &Installer{engine: e, logf: tb.Logf, lanes: l, bySlot: make([]*jumpSite, maxSlots),
		ringSize: laneSize, ringSet: true}
	in.bySlot[0] = &jumpSite{tp: e.Tracepoints()[0]}
	return &drainRig{in: in, e: e, lanes: l}
}

// fill writes n committed records into lane i the way pads do (head
// advanced) and returns the cursor after them.
func (r *drainRig) fill(lane, n int, regs bool, time uint64) {
	c := r.lanes.ctl()
	h := laneHdr(lane)
	head := load64(c, h+jit.LaneHead)
	d := r.lanes.data(lane)
	for range n {
		size := padRecordSize(regs, 0)
		off := head & (r.lanes.laneSize - 1)
		if off+size > r.lanes.laneSize {
			putFiller(d, off)
			head += r.lanes.laneSize - off
			off = 0
		}
		putRecord(d, off, 0, regs, 1, nil, time)
		time++
		head += size
	}
	store64(c, h+jit.LaneHead, head)
}

func TestDrainIntoEngine(t *testing.T) {
	r := newDrainRig(t, 128<<10, false, true) // 100 records with registers: 83 KB on arm64
	r.fill(0, 100, true, 10)
	r.fill(3, 50, true, 5)
	r.fill(ownedLanes, 7, true, 1000) // the shared lane
	if n := r.in.drainOnce(false); n != 157 {
		t.Fatalf("drained %d records, want 157", n)
	}
	if reply, _ := r.e.HandlePacket([]byte("qTStatus")); !strings.Contains(string(reply), ";tframes:9d;") {
		t.Errorf("qTStatus %s, want 157 (0x9d) frames", reply)
	}
	// Consumed bytes are zeroed and the tails published.
	c := r.lanes.ctl()
	for _, lane := range []int{0, 3, ownedLanes} {
		if load64(c, laneHdr(lane)+jit.LaneTail) != load64(c, laneHdr(lane)+jit.LaneHead) {
			t.Errorf("lane %d: tail not published", lane)
		}
		for i, b := range r.lanes.data(lane) {
			if b != 0 {
				t.Fatalf("lane %d: byte %d not zeroed", lane, i)
			}
		}
	}
}

func TestDrainReportsDropsAndStops(t *testing.T) {
	r := newDrainRig(t, 64<<10, false, false)
	c := r.lanes.ctl()
	store64(c, laneHdr(2)+jit.LaneDropped, 40)
	store64(c, jit.CtlStubGoneSkips, 2)
	r.fill(2, 5, false, 1)
	r.in.drainOnce(false)
	reply, _ := r.e.HandlePacket([]byte("qTStatus"))
	if !strings.Contains(string(reply), fmt.Sprintf("%x", "gotpstub: 42 fast tracepoint hits dropped")) {
		t.Errorf("qTStatus %s does not note 42 dropped hits", reply)
	}
	// A pad reached the passcount (its record was dropped): the run stops.
	store64(c, jit.CtlStop, jit.StopPassCount|0<<32) // slot 0
	r.in.drainOnce(false)
	if r.e.Running() {
		t.Fatal("run still active after a pad reported the passcount")
	}
	if reply, _ := r.e.HandlePacket([]byte("qTStatus")); !strings.Contains(string(reply), "tpasscount:1") {
		t.Errorf("qTStatus %s, want tpasscount:1", reply)
	}
}

func TestStartRunDiscardsOldRecords(t *testing.T) {
	r := newDrainRig(t, 64<<10, false, false)
	r.fill(1, 10, false, 1)
	store64(r.lanes.ctl(), laneHdr(1)+jit.LaneDropped, 3)
	r.in.StartRun()
	if n := r.in.drainOnce(false); n != 0 {
		t.Errorf("drained %d stale records after StartRun", n)
	}
	c := r.lanes.ctl()
	if load64(c, laneHdr(1)+jit.LaneHead) != 0 || load64(c, laneHdr(1)+jit.LaneDropped) != 0 {
		t.Errorf("lane cursors or drops not reset")
	}
	for i, b := range r.lanes.data(1) {
		if b != 0 {
			t.Fatalf("byte %d of the lane not zeroed", i)
		}
	}
}

// TestKeptLookLastsWhileCollectionOff: the pcs releaseQuarantine kept
// serve leavePads once, and not after collection was switched on since
// (a thread could then have entered a pad and be writing a record).
func TestKeptLookLastsWhileCollectionOff(t *testing.T) {
	r := newDrainRig(t, 64<<10, false, false)
	in := r.in
	in.mu.Lock()
	defer in.mu.Unlock()
	keep := func() {
		in.look, in.lookOK, in.lookOn = []uint64{0x1000}, true, in.switchedOn
	}
	keep()
	in.setActiveLocked(false)
	if pcs, ok := in.takeLookLocked(); !ok || len(pcs) != 1 {
		t.Errorf("kept look %x, %v: want it to serve", pcs, ok)
	}
	if _, ok := in.takeLookLocked(); ok {
		t.Error("a kept look served twice")
	}
	keep()
	in.setActiveLocked(true)
	in.setActiveLocked(false) // a pad, or the stub, switching it off again changes nothing
	if _, ok := in.takeLookLocked(); ok {
		t.Error("a look kept before collection was switched on served")
	}
}

// BenchmarkDrain measures the drainer: records per second from the lanes
// into the trace buffer, a quarter lane at a time (passes of at most
// maxDrainBatch records until the lane is empty), without and with
// registers, into a circular buffer (dropping its oldest frames: a linear
// one would fill and stop the run).
func BenchmarkDrain(b *testing.B) {
	for _, c := range []struct{ regs, circular bool }{{false, true}, {true, true}} {
		regs, circular := c.regs, c.circular
		b.Run(fmt.Sprintf("regs=%v/circular=%v", regs, circular), func(b *testing.B) {
			const laneSize = 1 << 20
			r := newDrainRig(b, laneSize, circular, regs)
			batch := int(laneSize / 4 / padRecordSize(regs, 0))
			b.ResetTimer()
			total := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				r.fill(0, batch, regs, uint64(i*batch))
				b.StartTimer()
				for r.in.drainOnce(false) >= maxDrainBatch {
				}
				total += batch
			}
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(total), "ns/record")
		})
	}
}

func TestSyncDrainsPastOneBatch(t *testing.T) {
	// More records than one pass takes: Sync goes on until none is left.
	r := newDrainRig(t, 1<<20, false, false)
	const n = 3*maxDrainBatch + 5
	r.fill(0, n, false, 1)
	if got := r.in.drainOnce(false); got != maxDrainBatch {
		t.Fatalf("one pass took %d records, want %d", got, maxDrainBatch)
	}
	r.in.Sync()
	want := fmt.Sprintf(";tframes:%x;", n)
	if reply, _ := r.e.HandlePacket([]byte("qTStatus")); !strings.Contains(string(reply), want) {
		t.Errorf("qTStatus %s, want %s", reply, want)
	}
}

func TestPopulateAhead(t *testing.T) {
	const laneSize = 32 << 20
	n := ownedLanes + 1
	data, err := unix.Mmap(-1, 0, int(ctlBytes+uint64(n)*laneSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(data)
	l := newLanes(&inferior.SharedMemory{Data: data}, laneSize, n)
	resident := func(b []byte) int {
		vec := make([]byte, len(b)/4096)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatalf("mincore: %v", e)
		}
		k := 0
		for _, v := range vec {
			k += int(v & 1)
		}
		return k
	}
	l.populateAhead(3, 0) // a lane nobody wrote yet: its first pages
	if got, want := resident(l.data(3)), spareHead/4096; got != want {
		t.Fatalf("%d pages of an unused lane populated, want %d", got, want)
	}
	// Ahead of the head: populateRate times what the pads wrote since
	// the last look, at least populateMin, at most populateBytes.
	steps := []struct {
		head  uint64
		pages int
	}{
		{100, (populateMin + 4096) / 4096},               // a little written: the least
		{1 << 20, (1<<20 + populateRate*(1<<20)) / 4096}, // about 1 MiB since: 4 MiB ahead
		{2 << 20, (2<<20 + populateRate*(1<<20)) / 4096}, // 1 MiB since: 4 MiB ahead
		{12 << 20, (12<<20 + populateBytes) / 4096},      // 10 MiB since: the most
	}
	for _, s := range steps {
		l.populateAhead(3, s.head)
		if got := resident(l.data(3)); got != s.pages {
			t.Errorf("head %d: %d pages populated, want %d", s.head, got, s.pages)
		}
	}
	if got := resident(l.data(4)); got != 0 {
		t.Errorf("%d pages of lane 4 populated", got)
	}
	// A run's owned lane (prefaultLocked): its first startAhead bytes
	// at the first look, before its thread writes.
	l.startWant[8] = startAhead
	l.populateAhead(8, 0)
	if got, want := resident(l.data(8)), startAhead/4096; got != want {
		t.Errorf("%d pages of a run's owned lane populated before its first hit, want %d", got, want)
	}
	l.populateAhead(8, 100) // ahead of the head, no less than asked
	if got, want := resident(l.data(8)), startAhead/4096; got != want {
		t.Errorf("%d pages of the owned lane populated after a first hit, want %d", got, want)
	}
	l.populateAhead(3, laneSize+10) // a lap done
	if l.populated[3] != laneSize {
		t.Errorf("populated %d after a lap", l.populated[3])
	}

	// As many lanes written since the last look as the stub has CPUs:
	// the program's threads take every CPU, and fault their pages in
	// themselves.
	l.cpus = 2
	heads := make([]uint64, n)
	heads[5], heads[6] = 100, 100
	l.populate(heads)
	if got := resident(l.data(5)) + resident(l.data(6)); got != 0 {
		t.Errorf("%d pages populated for two writers on two CPUs, want 0", got)
	}
	l.populate(heads) // the same look again (backlog, then drain): nothing moved since
	if got := resident(l.data(5)) + resident(l.data(6)); got != 0 {
		t.Errorf("%d pages populated at a second call in the same look, want 0", got)
	}
	heads[5] = 200 // one writer now
	l.populate(heads)
	if got, want := resident(l.data(5)), (200+populateMin+4095)/4096; got != want {
		t.Errorf("%d pages populated for one writer on two CPUs, want %d", got, want)
	}
}

// The drainer leaves a lane alone until a pass is due: a quarter full,
// more than the trace buffer can take, a stop, or records old enough.
func TestDrainDue(t *testing.T) {
	const laneSize = 64 << 10
	rec := padRecordSize(false, 0)
	quarter := int(laneSize / drainShare / rec)
	cases := []struct {
		name    string
		records int
		since   time.Duration
		stop    bool
		linear  bool // a linear buffer, room for a few frames only
		wantDue bool
	}{
		{name: "empty", wantDue: false},
		{name: "empty, long ago", since: time.Hour, wantDue: false},
		{name: "a few records", records: 10, wantDue: false},
		{name: "a few records, old", records: 10, since: maxDrainDelay, wantDue: true},
		{name: "a quarter of the lane", records: quarter, wantDue: true},
		{name: "just under a quarter", records: quarter - 1, wantDue: false},
		{name: "a stop", stop: true, wantDue: true},
		{name: "more than the buffer takes", records: 10, linear: true, wantDue: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newDrainRig(t, laneSize, !c.linear, false)
			if c.linear {
				// 4,000,000-byte buffer: fill it but for 30 bytes.
				w := r.e.RoomBeforeFull()
				for w > 30+frames.HeaderSize {
					r.fill(5, min(1500, (w-30)/frames.HeaderSize), false, 1)
					r.in.drainOnce(false)
					w = r.e.RoomBeforeFull()
				}
			}
			r.fill(2, c.records, false, 1)
			if c.stop {
				store64(r.lanes.ctl(), jit.CtlStop, jit.StopPassCount)
			}
			if got := r.in.drainDue(c.since); got != c.wantDue {
				t.Errorf("drainDue = %v, want %v", got, c.wantDue)
			}
		})
	}
}

// A look at the lanes while the installer holds its lock (a tracepoint
// being installed) passes at once, without a drain, however due one is:
// waiting there put the lock in starvation mode and slowed QTStart.
func TestDrainDueSkipsBusyInstaller(t *testing.T) {
	r := newDrainRig(t, 64<<10, false, false)
	store64(r.lanes.ctl(), jit.CtlStop, jit.StopPassCount)
	if !r.in.drainDue(0) {
		t.Fatal("a pad's stop word does not make a drain due")
	}
	r.in.mu.Lock()
	done := make(chan bool)
	go func() { done <- r.in.drainDue(0) }()
	select {
	case due := <-done:
		if due {
			t.Error("drainDue reported a drain due while the installer holds its lock")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("drainDue waited for the installer's lock")
	}
	r.in.mu.Unlock()
	if !r.in.drainDue(0) {
		t.Error("the drain is no longer due once the lock is free")
	}
}

// When the lanes' records make more frame bytes than a linear buffer
// takes in the run, the pads are switched off at once and the run ends
// with tfull after the drain, however much of it the engine has seen.
func TestBufferFilledStopsPads(t *testing.T) {
	r := newDrainRig(t, 64<<10, false, false)
	c := r.lanes.ctl()
	store64(c, jit.CtlActive, 1)
	r.in.runRoom = 1000
	store64(c, laneHdr(2)+jit.LaneSpent, 500)
	store64(c, laneHdr(ownedLanes)+jit.LaneSpent, 494) // 994 + 6 bytes of end marker fit
	if r.in.bufferFilled(r.lanes) || load64(c, jit.CtlActive) != 1 {
		t.Fatal("pads stopped while the frames still fit")
	}
	store64(c, laneHdr(ownedLanes)+jit.LaneSpent, 495)
	if !r.in.bufferFilled(r.lanes) {
		t.Fatal("no stop with one byte too many")
	}
	if load64(c, jit.CtlActive) != 0 {
		t.Error("the pads are still active")
	}
	r.fill(2, 3, false, 1)
	r.in.drainOnce(true)
	reply, _ := r.e.HandlePacket([]byte("qTStatus"))
	if !strings.Contains(string(reply), "tfull:") || !strings.Contains(string(reply), ";tframes:3;") {
		t.Errorf("qTStatus %s, want tfull with the 3 drained frames", reply)
	}
	if r.in.bufferFilled(r.lanes) {
		t.Error("a second stop for the same run")
	}
}

// At each look while the frames fit, every lane's budget becomes what it
// spent plus the room left beyond all lanes' records: a lane that passes
// it means the lanes together passed the room (never earlier), and a
// lane that writes alone may still take all that is left.
func TestBufferFilledTightensBudgets(t *testing.T) {
	r := newDrainRig(t, 64<<10, false, false)
	c := r.lanes.ctl()
	store64(c, jit.CtlActive, 1)
	r.in.runRoom = 10000
	r.lanes.setBudget(r.in.runRoom)
	store64(c, laneHdr(0)+jit.LaneSpent, 3000)
	store64(c, laneHdr(5)+jit.LaneSpent, 1000)
	if r.in.bufferFilled(r.lanes) {
		t.Fatal("stopped with 4,000 of 10,000 bytes spent")
	}
	const left = 10000 - 4000
	for _, tc := range []struct {
		lane  int
		spent uint64
	}{{0, 3000}, {5, 1000}, {1, 0}, {ownedLanes, 0}} {
		if got, want := load64(c, laneHdr(tc.lane)+jit.LaneBudget), tc.spent+left; got != want {
			t.Errorf("lane %d: budget %d, want %d (its %d bytes and the %d left)", tc.lane, got, want, tc.spent, left)
		}
	}
	// Full: the budgets are left as they are (the pads are off).
	store64(c, laneHdr(5)+jit.LaneSpent, 7000)
	if !r.in.bufferFilled(r.lanes) {
		t.Fatal("no stop with 10,000 bytes spent")
	}
	if got := load64(c, laneHdr(1)+jit.LaneBudget); got != left {
		t.Errorf("lane 1's budget changed to %d after the stop", got)
	}
}

// Compact records come out of the drain with their lane's owner as the
// thread and their whole time stamp, merged by time with full records
// of other lanes.
func TestDrainCompactRecords(t *testing.T) {
	if rdtsc() == 0 {
		t.Skip("no time-stamp counter here")
	}
	r := newDrainRig(t, 64<<10, false, false)
	c := r.lanes.ctl()
	const owner = 0x7f00_aa00_0000
	store64(c, jit.CtlOwners+8*2, owner)
	now := rdtsc()
	d := r.lanes.data(2)
	n := putCompact(d, 0, 0, now-500)
	n += putCompact(d, n, 0, now-300)
	store64(c, laneHdr(2)+jit.LaneHead, n)
	store64(c, laneHdr(3)+jit.LaneHead, putRecord(r.lanes.data(3), 0, 0, false, 0, nil, now-400))
	recs, lost, more, err := r.lanes.drain(nil, false)
	if err != nil || lost != 0 || more || len(recs) != 3 {
		t.Fatalf("drain: %d records, lost %d, more %v, %v", len(recs), lost, more, err)
	}
	want := []struct {
		lane         int
		time, thread uint64
	}{{2, now - 500, owner}, {3, now - 400, 0x7f0000}, {2, now - 300, owner}}
	for i, w := range want {
		if g := recs[i]; g.Lane != w.lane || g.Time != w.time || g.Thread != w.thread {
			t.Errorf("record %d: lane %d time %d thread %#x, want lane %d time %d thread %#x", i, g.Lane, g.Time, g.Thread, w.lane, w.time, w.thread)
		}
	}
}

// The drainer's thread asks for a short slice; the kernel shows it in
// the thread's se.slice (Linux 6.12 and later; older kernels have no
// custom slices and the test is skipped).
func TestShortSlice(t *testing.T) {
	// Locked to the end: the test's goroutine exits with the thread
	// locked, so the runtime ends the thread with its short slice.
	runtime.LockOSThread()
	slice := func() (uint64, bool) {
		b, err := os.ReadFile("/proc/thread-self/sched")
		if err != nil {
			return 0, false
		}
		for _, line := range strings.Split(string(b), "\n") {
			name, value, ok := strings.Cut(line, ":")
			if ok && strings.TrimSpace(name) == "se.slice" {
				v, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
				return v, err == nil
			}
		}
		return 0, false
	}
	before, ok := slice()
	if !ok {
		t.Skip("no se.slice in /proc/thread-self/sched (kernel without custom slices)")
	}
	shortSlice()
	after, _ := slice()
	if after != uint64(drainerSlice) {
		t.Errorf("se.slice %d ns after shortSlice (%d before), want %d", after, before, drainerSlice)
	}
}

// The drainer backs off to maxBusySleep while the pads write and to
// maxIdleSleep when they do not; a look that finds writes again brings
// a long sleep back down at once.
func TestNextSleep(t *testing.T) {
	tests := []struct {
		sleep time.Duration
		moved bool
		want  time.Duration
	}{
		{minIdleSleep, true, 2 * minIdleSleep},
		{maxBusySleep, true, maxBusySleep},
		{maxIdleSleep, true, maxBusySleep},
		{maxBusySleep, false, 2 * maxBusySleep},
		{maxIdleSleep, false, maxIdleSleep},
	}
	for _, tc := range tests {
		if got := nextSleep(tc.sleep, tc.moved); got != tc.want {
			t.Errorf("nextSleep(%v, moved %v) = %v, want %v", tc.sleep, tc.moved, got, tc.want)
		}
	}
}

// A run that starts collecting wakes the drainer from its sleep
// (setActiveLocked writes its eventfd); without a wake it sleeps its
// time out.
func TestDrainerWake(t *testing.T) {
	in := &Installer{}
	w := in.drainerWake()
	if w <= 0 {
		t.Skip("no eventfd here")
	}
	defer in.closeDrainerWake()
	start := time.Now()
	if w.sleep(20 * time.Millisecond) {
		t.Fatal("woken with nobody waking it")
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("slept %v of 20 ms", d)
	}
	woke := make(chan bool)
	go func() { woke <- w.sleep(time.Minute) }()
	time.Sleep(10 * time.Millisecond)
	in.mu.Lock()
	in.setActiveLocked(true)
	in.mu.Unlock()
	select {
	case ok := <-woke:
		if !ok {
			t.Error("the sleep ended without reporting the wake")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a run's start did not wake the drainer")
	}
	if w.sleep(time.Millisecond) {
		t.Error("a second sleep saw the same wake")
	}
}
