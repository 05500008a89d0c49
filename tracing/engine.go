package tracing

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"gotpstub/agentexpr"
	"gotpstub/frames"
	"gotpstub/tdesc"
)

// MemoryReader reads live inferior memory.
type MemoryReader interface {
	ReadMemory(addr uint64, buf []byte) (int, error)
}

// Installer puts tracepoints into the inferior and takes them out. The
// engine calls Install for every enabled tracepoint at QTStart, for a
// tracepoint defined or enabled during a run, and Remove at QTStop, at
// QTDisable during a run and when the run stops by itself (passcount,
// buffer full, error) — the latter from inside Hit or Step, on the ptrace
// thread. The engine never holds its own lock while calling an Installer.
//
// Like gdbserver (handle_tracepoints runs at every stop), a thread that
// stops exactly at an installed tracepoint's address for any reason — a
// gdb single-step or range step, stepping over a breakpoint — has hit that
// tracepoint: the installer (or whoever resumes the thread over the trap)
// must report it with Hit, since the thread will not take the trap.
type Installer interface {
	Install(tp *Tracepoint) error
	Remove(tp *Tracepoint) error
}

// Batcher is an Installer that installs or removes many tracepoints
// faster together: the Install and Remove calls f makes share the
// installer's exclusive use of the process. Batch is used only where the
// program is stopped (QTStart, QTStop).
type Batcher interface {
	Batch(f func())
}

// Preparer is an Installer that can start, when gdb defines a fast
// tracepoint, work its placement at QTStart will need (reading the
// program's files). Prepare returns at once; the engine calls it without
// holding its lock.
type Preparer interface {
	Prepare(addr uint64)
}

// batch runs f through inst's Batch when it has one.
func batch(inst Installer, f func()) {
	if b, ok := inst.(Batcher); ok {
		b.Batch(f)
		return
	}
	f()
}

// HitContext is the thread that hit a tracepoint, as the Installer sees it.
type HitContext interface {
	Tid() int
	Registers() (*tdesc.Regs, error)
	ReadMemory(addr uint64, buf []byte) (int, error)
}

// Config configures an Engine.
type Config struct {
	// Layout is the register layout: the R block of a frame is Layout.Size
	// bytes in this layout.
	Layout *tdesc.Layout
	// Live reads live inferior memory: QTro ranges (and the program's
	// code, if it is a CodeSpanner) are served from it while a trace
	// frame is selected. May be nil.
	Live MemoryReader
	// Installer may also be set later with SetInstaller.
	Installer Installer
	// NoSave refuses QTSave (tsave -r: a file written on the stub's
	// machine); SaveDir, when set, confines it to that directory.
	NoSave  bool
	SaveDir string
}

// ActionKind is the letter of a tracepoint action in QTDP.
type ActionKind byte

// The tracepoint actions gdb sends.
const (
	ActionRegisters ActionKind = 'R' // R<mask>: the whole register block
	ActionMemory    ActionKind = 'M' // M<basereg>,<offset>,<len>
	ActionExpr      ActionKind = 'X' // X<len>,<bytecode>: evaluate (collect/teval)
	// ActionStaticData: L, gdb's `collect $_sdata` at a static
	// tracepoint: the marker's data (StaticDataSource) in an 'S' block.
	ActionStaticData ActionKind = 'L'
)

// Action is one tracepoint action.
type Action struct {
	Kind ActionKind
	// Text is the action exactly as gdb sent it, uploaded back by qTsP.
	Text string
	// RegMask is the hex register mask of an R action: the registers it
	// names are stored (an 'r' block when they are fewer than the whole
	// register block, see Engine.registerRuns).
	RegMask string
	// BaseReg, Offset and Len describe an M action: Len bytes at
	// Offset plus the value of register BaseReg, or at Offset when
	// BaseReg is -1.
	BaseReg int
	Offset  uint64
	Len     uint64
	// Expr is the bytecode of an X action.
	Expr *agentexpr.Expr
}

// Source is one QTDPsrc piece: the source form of a tracepoint's
// location ("at"), condition ("cond") or an action line ("cmd").
type Source struct {
	Type  string
	Start uint64
	Len   uint64
	Text  string
}

// Tracepoint is one tracepoint location (gdb sends one QTDP per location;
// locations of one tracepoint share Num).
type Tracepoint struct {
	Num       int
	Addr      uint64
	Enabled   bool
	StepCount int
	PassCount int
	// Fast is set when gdb asked for a fast tracepoint (F<len>, with
	// FastLen the instruction length); it is traced like any other.
	Fast    bool
	FastLen int
	// Static is set for a static (marker) tracepoint (S).
	Static      bool
	Cond        *agentexpr.Expr
	Actions     []Action
	StepActions []Action
	// regRuns and stepRegRuns cache actionRegisterRuns.
	regRuns, stepRegRuns regRuns
	Sources              []Source
	// Hits counts the hits whose condition was true in the current or
	// last run; BytesUsed the frame bytes they took.
	Hits      uint64
	BytesUsed uint64

	stepping  bool // QTDP parse state: an S marker was seen
	installed bool
}

// Stop reasons, as qTStatus reports them.
const (
	reasonNotRun       = "tnotrun"
	reasonStop         = "tstop"
	reasonFull         = "tfull"
	reasonPassCount    = "tpasscount"
	reasonDisconnected = "tdisconnected"
	reasonError        = "terror"
)

// timestampTSV is the number of the predefined $trace_timestamp.
const timestampTSV = 1

// tsv is one trace state variable.
type tsv struct {
	num     int
	initial int64
	value   int64
	name    string
	builtin bool // value computed by the stub ($trace_timestamp)
}

// roRange is one QTro range [start, end).
type roRange struct{ start, end uint64 }

// maxReplyBytes caps the raw bytes of one qTBuffer or qXfer reply.
const maxReplyBytes = 8192

// Engine is the trace experiment. Its methods are safe for concurrent use.
type Engine struct {
	mu        sync.Mutex
	layout    *tdesc.Layout
	live      MemoryReader
	installer Installer

	regIndex map[int]int // register number → index in layout.Regs
	// fastSlots: register number → place in the register block, for
	// the registers fast tracepoints deliver (FastHits).
	fastSlots []regSlot
	fastSpans []regSpan // fastSlots as copies of consecutive registers
	// fastFrame is the frame builder FastHits reuses for every hit.
	fastFrame frames.FrameBuilder
	// staticScratch and staticRest are fastStaticLocked's buffers.
	staticScratch []jitBlock
	staticRest    []byte
	numRegs       int
	pcReg         int // register number of the PC, -1 if unknown
	pcOffset      int // offset of the PC in the register block, -1 if unknown

	tps  []*Tracepoint
	tsvs []*tsv

	fastTracepoints bool // announce FastTracepoints (SetFastTracepoints)
	buf             *frames.Buffer
	noSave          bool   // Config.NoSave
	saveDir         string // Config.SaveDir
	// batch, while inBatch, holds buf's lock for FastHits' commits;
	// stopLocked ends it (a stop reads the buffer).
	batch   frames.Batch
	inBatch bool

	running    bool
	stopReason string
	stopTP     int
	stopError  string
	startTime  int64 // µs since the Unix epoch
	stopTime   int64
	user       string
	notes      string
	// fastDropped counts the hits the Installer dropped in this run
	// (SetFastDropped).
	fastDropped uint64
	// asTraps: fast tracepoints the Installer put in as traps this run,
	// by number, with the reason (FastAsTrap).
	asTraps map[int]string
	// tsvStore holds the variables pads update (SetTSVStore); nil: all
	// live in tsvs.
	tsvStore TSVStore
	// static gives static tracepoints' data (SetStaticData); nil: no
	// static tracepoints.
	static   StaticDataSource
	stopNote string
	disconn  bool
	ro       []roRange

	frame *frames.Frame // selected trace frame, nil when none

	uploadTPs  []string // pending qTsP replies
	uploadTSVs []string // pending qTsV replies

	now func() time.Time

	// hit scratch, reused under mu so a hit allocates only its frame.
	hit hitState
}

// NewEngine returns an engine with an empty tracepoint table, the
// predefined $trace_timestamp and a default-size linear buffer.
func NewEngine(cfg Config) *Engine {
	e := &Engine{
		layout:     cfg.Layout,
		live:       cfg.Live,
		installer:  cfg.Installer,
		regIndex:   map[int]int{},
		pcReg:      -1,
		pcOffset:   -1,
		buf:        frames.NewBuffer(frames.DefaultSize),
		noSave:     cfg.NoSave,
		saveDir:    cfg.SaveDir,
		stopReason: reasonNotRun,
		now:        time.Now,
	}
	if e.layout != nil {
		for i, r := range e.layout.Regs {
			e.regIndex[r.Num] = i
			if r.Num+1 > e.numRegs {
				e.numRegs = r.Num + 1
			}
			switch r.Name {
			case "rip", "pc", "eip":
				if e.pcReg < 0 {
					e.pcReg, e.pcOffset = r.Num, r.Offset
				}
			}
		}
		e.buildFastSlots()
	}
	e.tsvs = []*tsv{{num: timestampTSV, name: "trace_timestamp", builtin: true}}
	e.hit.e = e
	return e
}

// SetInstaller sets the Installer (the server creates it after the
// inferior exists).
func (e *Engine) SetInstaller(i Installer) {
	e.mu.Lock()
	e.installer = i
	e.mu.Unlock()
}

// Features returns the qSupported features the engine implements.
func (e *Engine) Features() []string {
	e.mu.Lock()
	fast, static := e.fastTracepoints, e.static != nil
	e.mu.Unlock()
	f := []string{
		"ConditionalTracepoints+",
		"TraceStateVariables+",
		"TracepointSource+",
		"DisconnectedTracing+",
		"InstallInTrace+",
		"EnableDisableTracepoints+",
		"QTBuffer:size+",
		"tracenz+",
		"qXfer:traceframe-info:read+",
	}
	if fast {
		f = append(f, "FastTracepoints+")
	}
	if static {
		f = append(f, "StaticTracepoints+", "qXfer:statictrace:read+")
	}
	return f
}

// Running reports whether a trace run is active.
func (e *Engine) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running
}

// FrameSelected reports whether a trace frame is selected (tfind mode):
// register and memory reads must then come from FrameRegisters and
// FrameMemory.
func (e *Engine) FrameSelected() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.frame != nil
}

// Tracepoints returns the tracepoint locations in definition order. The
// pointers are the engine's own: read Num and Addr freely, the rest only
// while no packet or hit can change it.
func (e *Engine) Tracepoints() []*Tracepoint {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*Tracepoint(nil), e.tps...)
}

// TracepointIn reports whether a tracepoint whose address is not except
// lies in [lo, hi). The table is sorted by address: a binary search.
func (e *Engine) TracepointIn(lo, hi, except uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	i, _ := slices.BinarySearchFunc(e.tps, lo, func(tp *Tracepoint, a uint64) int { return cmp.Compare(tp.Addr, a) })
	for ; i < len(e.tps) && e.tps[i].Addr < hi; i++ {
		if e.tps[i].Addr != except {
			return true
		}
	}
	return false
}

// OnDisconnect tells the engine gdb went away: the run goes on when gdb
// asked for disconnected tracing (QTDisconnected:1), otherwise it stops
// with reason tdisconnected. The frame selection is dropped either way.
func (e *Engine) OnDisconnect() {
	e.sync() // what the inferior collected is kept, whatever happens next
	e.mu.Lock()
	e.frame = nil
	var removed []*Tracepoint
	if e.running && !e.disconn {
		removed = e.stopLocked(reasonDisconnected, 0, "")
	}
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
}

// OnInferiorExit stops the run because the inferior is gone (reason
// tstop); the frames stay browsable. Nothing is removed from the dead
// inferior.
func (e *Engine) OnInferiorExit() {
	e.sync() // the hits collected before the end become frames
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running {
		e.stopLocked(reasonStop, 0, "")
	}
	e.setTSVStoreLocked(nil) // the shared memory goes with the process
	for _, tp := range e.tps {
		tp.installed = false
	}
}

// stopLocked ends the run and returns the tracepoints to remove from the
// inferior (outside the lock).
func (e *Engine) stopLocked(reason string, tpnum int, msg string) []*Tracepoint {
	e.endBatchLocked()
	if !e.running {
		return nil
	}
	e.running = false
	e.stopReason, e.stopTP, e.stopError = reason, tpnum, msg
	e.stopTime = e.now().UnixMicro()
	var removed []*Tracepoint
	for _, tp := range e.tps {
		if tp.installed {
			tp.installed = false
			removed = append(removed, tp)
		}
	}
	return removed
}

// removeAll removes tps with inst, ignoring errors (the run is over).
func removeAll(inst Installer, tps []*Tracepoint) {
	if inst == nil {
		return
	}
	for _, tp := range tps {
		_ = inst.Remove(tp)
	}
}

// findTP returns the location num@addr.
func (e *Engine) findTP(num int, addr uint64) *Tracepoint {
	for _, tp := range e.tps {
		if tp.Num == num && tp.Addr == addr {
			return tp
		}
	}
	return nil
}

// firstTP returns the first location of tracepoint num.
func (e *Engine) firstTP(num int) *Tracepoint {
	for _, tp := range e.tps {
		if tp.Num == num {
			return tp
		}
	}
	return nil
}

// findTSV returns trace state variable num.
func (e *Engine) findTSV(num int) *tsv {
	for _, v := range e.tsvs {
		if v.num == num {
			return v
		}
	}
	return nil
}

// tsvValue returns the live value of v.
func (e *Engine) tsvValue(v *tsv) int64 {
	if v.builtin && v.num == timestampTSV {
		return e.now().UnixMicro()
	}
	if e.tsvStore != nil {
		if val, ok := e.tsvStore.LoadTSV(v.num); ok {
			return val
		}
	}
	return v.value
}

// setTSVLocked sets v's value (not a builtin's), in the store when it
// holds v.
func (e *Engine) setTSVLocked(v *tsv, val int64) {
	if v.builtin {
		return
	}
	v.value = val
	if e.tsvStore != nil {
		e.tsvStore.StoreTSV(v.num, val)
	}
}

// StaticDataSource gives the static trace data of a hit at a static
// tracepoint marker (server: SDT probes, package sdt): reg reads the
// hitting thread's registers by GDB number, mem its memory.
type StaticDataSource interface {
	StaticData(addr uint64, reg func(num int) (uint64, bool), mem func(addr uint64, buf []byte) bool) []byte
	// StaticReads says what StaticData reads at a hit at addr, so that
	// a jump pad can record it (the registers and these ranges) and the
	// engine make the data from the record; false: no marker there.
	StaticReads(addr uint64) (StaticReads, bool)
}

// StaticReads is what the static data of a marker reads at a hit,
// besides the general registers.
type StaticReads struct {
	// Memory lists the ranges read, as M actions (BaseReg's value plus
	// Offset, Len bytes).
	Memory []Action
	// MinText is the fewest bytes the data can have, whatever the values.
	MinText int
	// Semaphore is the address of the marker's semaphore (a u16 the
	// program tests before it runs the probe), 0 when it has none.
	Semaphore uint64
}

// StaticReads returns what the static data of a marker at addr reads
// (StaticDataSource.StaticReads); false without a source or a marker.
// The source is set once, before tracing (SetStaticData).
func (e *Engine) StaticReads(addr uint64) (StaticReads, bool) {
	e.mu.Lock()
	s := e.static
	e.mu.Unlock()
	if s == nil {
		return StaticReads{}, false
	}
	return s.StaticReads(addr)
}

// SetStaticData makes s the source of static tracepoint data and has
// the engine announce static tracepoints (qSupported).
func (e *Engine) SetStaticData(s StaticDataSource) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.static = s
}

// TSVStore keeps trace state variables in memory jump pads read and
// update in place (fasttp: an array shared with the inferior, updated
// with atomic instructions), so that counting in a fast tracepoint
// costs no trip to the stub. Numbers a store does not hold stay in the
// engine.
type TSVStore interface {
	// LoadTSV returns variable num's value, false when the store does
	// not hold num.
	LoadTSV(num int) (int64, bool)
	// StoreTSV sets variable num's value; false when the store does not
	// hold num.
	StoreTSV(num int, v int64) bool
}

// SetTSVStore makes s the home of the variables it holds: their values
// move there and are read and written there from now on (qTV, trap
// tracepoints' getv/setv, QTDV). nil brings them back into the engine:
// OnInferiorExit does so, before the process's memory goes.
func (e *Engine) SetTSVStore(s TSVStore) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.setTSVStoreLocked(s)
}

func (e *Engine) setTSVStoreLocked(s TSVStore) {
	for _, v := range e.tsvs {
		if !v.builtin {
			v.value = e.tsvValue(v)
		}
	}
	e.tsvStore = s
	for _, v := range e.tsvs {
		if s != nil && !v.builtin {
			s.StoreTSV(v.num, v.value)
		}
	}
}

// regValue returns register num of a register block, little-endian, its
// low 8 bytes for wider registers.
func (e *Engine) regValue(data []byte, num int) (uint64, bool) {
	i, ok := e.regIndex[num]
	if !ok {
		return 0, false
	}
	r := e.layout.Regs[i]
	size := r.Size
	if size > 8 {
		size = 8
	}
	if r.Offset < 0 || size <= 0 || r.Offset+size > len(data) {
		return 0, false
	}
	var b [8]byte
	copy(b[:], data[r.Offset:r.Offset+size])
	return binary.LittleEndian.Uint64(b[:]), true
}
