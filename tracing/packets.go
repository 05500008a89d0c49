package tracing

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"gotpstub/frames"
)

var (
	replyOK    = []byte("OK")
	replyError = []byte("E01")
)

// errorReply is "E.<message>": the message gdb shows to the user.
func errorReply(err error) []byte {
	msg := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '#' || r == '$' || r == '}' || r == '*' {
			return ' '
		}
		return r
	}, err.Error())
	return []byte("E." + msg)
}

// HandlePacket answers a trace packet. handled is false for a packet that
// is not the engine's (the server then answers it or replies empty).
func (e *Engine) HandlePacket(payload []byte) (reply []byte, handled bool) {
	p := string(payload)
	if isTracePacket(p) {
		// Hits collected inside the inferior reach the engine now.
		e.sync()
	}
	switch {
	case p == "QTinit":
		return e.qtInit(), true
	case strings.HasPrefix(p, "QTDPsrc:"):
		return e.qtDPsrc(p[len("QTDPsrc:"):]), true
	case strings.HasPrefix(p, "QTDP:"):
		return e.qtDP(p[len("QTDP:"):]), true
	case strings.HasPrefix(p, "QTDV:"):
		return e.qtDV(p[len("QTDV:"):]), true
	case p == "QTStart":
		return e.qtStart(), true
	case p == "QTStop":
		return e.qtStop(), true
	case p == "qTStatus":
		e.mu.Lock()
		defer e.mu.Unlock()
		return []byte("T" + e.statusLocked()), true
	case strings.HasPrefix(p, "QTFrame:"):
		return e.qtFrame(p[len("QTFrame:"):]), true
	case p == "qTfP":
		return e.qtfP(), true
	case p == "qTsP":
		return e.qtsP(), true
	case p == "qTfV":
		return e.qtfV(), true
	case p == "qTsV":
		return e.qtsV(), true
	case strings.HasPrefix(p, "qTV:"):
		return e.qtV(p[len("qTV:"):]), true
	case strings.HasPrefix(p, "qTP:"):
		return e.qtP(p[len("qTP:"):]), true
	case strings.HasPrefix(p, "QTEnable:"):
		return e.qtEnable(p[len("QTEnable:"):], true), true
	case strings.HasPrefix(p, "QTDisable:"):
		return e.qtEnable(p[len("QTDisable:"):], false), true
	case strings.HasPrefix(p, "QTBuffer:size:"):
		return e.qtBufferSize(p[len("QTBuffer:size:"):]), true
	case strings.HasPrefix(p, "QTBuffer:circular:"):
		return e.qtBufferCircular(p[len("QTBuffer:circular:"):]), true
	case strings.HasPrefix(p, "qTBuffer:"):
		return e.qtBuffer(p[len("qTBuffer:"):]), true
	case strings.HasPrefix(p, "QTNotes:"):
		return e.qtNotes(p[len("QTNotes:"):]), true
	case p == "QTro" || strings.HasPrefix(p, "QTro:"):
		return e.qtRO(p[len("QTro"):]), true
	case strings.HasPrefix(p, "QTDisconnected:"):
		return e.qtDisconnected(p[len("QTDisconnected:"):]), true
	case p == "qTMinFTPILen":
		// Any instruction will do: a location the Installer cannot
		// jump from falls back to a trap.
		return []byte("1"), true
	case strings.HasPrefix(p, "QTSave:"):
		return e.qtSave(p[len("QTSave:"):]), true
	case strings.HasPrefix(p, "qXfer:statictrace:read:"):
		return e.qXferStaticTrace(p[len("qXfer:statictrace:read:"):]), true
	case strings.HasPrefix(p, "qXfer:traceframe-info:read:"):
		return e.qXferTraceframeInfo(p[len("qXfer:traceframe-info:read:"):]), true
	}
	return nil, false
}

// isTracePacket reports whether p is one of the packets HandlePacket
// answers (their names start with qT, QT or qXfer:traceframe-info).
func isTracePacket(p string) bool {
	return strings.HasPrefix(p, "qT") || strings.HasPrefix(p, "QT") ||
		strings.HasPrefix(p, "qXfer:traceframe-info:") || strings.HasPrefix(p, "qXfer:statictrace:")
}

// qtInit clears the experiment: tracepoints, non-builtin variables,
// read-only ranges, frames, selection.
func (e *Engine) qtInit() []byte {
	e.mu.Lock()
	removed := e.stopLocked(reasonStop, 0, "")
	for _, tp := range e.tps {
		if tp.installed {
			tp.installed = false
			removed = append(removed, tp)
		}
	}
	e.tps = nil
	kept := e.tsvs[:0]
	for _, v := range e.tsvs {
		if v.builtin {
			kept = append(kept, v)
		}
	}
	e.tsvs = kept
	e.ro = nil
	e.frame = nil
	e.buf.Clear()
	e.uploadTPs, e.uploadTSVs = nil, nil
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
	return replyOK
}

// qtDP defines a tracepoint location or adds actions to one.
func (e *Engine) qtDP(s string) []byte {
	if strings.HasPrefix(s, "-") {
		return e.qtDPActions(s[1:])
	}
	h, err := e.parseTPDefinition(s)
	if err != nil {
		return errorReply(fmt.Errorf("QTDP: %w", err))
	}
	if h.num <= 0 || h.num > 0xffff {
		return errorReply(fmt.Errorf("QTDP: tracepoint number %d cannot be recorded in a trace frame", h.num))
	}
	e.mu.Lock()
	tp := e.findTP(h.num, h.addr)
	if tp == nil {
		// Keep the table sorted by address, a new location after the
		// others at its address, like gdbserver (the upload order).
		tp = &Tracepoint{Num: h.num, Addr: h.addr}
		i := len(e.tps)
		for i > 0 && e.tps[i-1].Addr > h.addr {
			i--
		}
		e.tps = slices.Insert(e.tps, i, tp)
	}
	// A known location is redefined in place: gdb downloads a running
	// experiment's locations again when it re-sets breakpoints (a shared
	// library loaded). gdbserver answers E01 there, which makes gdb fail
	// the command that loaded the library.
	tp.Enabled, tp.StepCount, tp.PassCount = h.enabled, h.stepCount, h.passCount
	tp.Fast, tp.FastLen, tp.Static, tp.Cond = h.fast, h.fastLen, h.static, h.cond
	tp.Actions, tp.StepActions, tp.Sources, tp.stepping = nil, nil, nil, false
	install := e.running && !h.more && tp.Enabled && !tp.installed
	remove := !tp.Enabled && tp.installed
	if remove {
		tp.installed = false
	}
	inst := e.installer
	e.mu.Unlock()
	if pr, ok := inst.(Preparer); ok && tp.Fast && !install {
		pr.Prepare(tp.Addr)
	}
	switch {
	case install:
		return e.installDuringRun(tp)
	case remove && inst != nil:
		if err := inst.Remove(tp); err != nil {
			return errorReply(fmt.Errorf("QTDP: removing disabled tracepoint %d at %#x: %w", tp.Num, tp.Addr, err))
		}
	}
	return replyOK
}

// qtDPActions handles "-n:addr:[S]actions[-]".
func (e *Engine) qtDPActions(s string) []byte {
	c := &cursor{s: s}
	num, addr, err := c.location()
	if err == nil {
		err = c.expect(':')
	}
	if err != nil {
		return errorReply(fmt.Errorf("QTDP actions: %w", err))
	}
	acts, stepping, more, err := e.parseActions(c.rest())
	if err != nil {
		return errorReply(fmt.Errorf("QTDP actions for tracepoint %d: %w", num, err))
	}
	e.mu.Lock()
	tp := e.findTP(num, addr)
	if tp == nil {
		e.mu.Unlock()
		return errorReply(fmt.Errorf("QTDP actions: no tracepoint %d at %#x", num, addr))
	}
	if stepping {
		tp.stepping = true
	}
	if tp.stepping {
		tp.StepActions = append(tp.StepActions, acts...)
	} else {
		tp.Actions = append(tp.Actions, acts...)
	}
	tp.regRuns, tp.stepRegRuns = regRuns{}, regRuns{}
	install := e.running && !more && tp.Enabled && !tp.installed
	e.mu.Unlock()
	if install {
		return e.installDuringRun(tp)
	}
	return replyOK
}

// installDuringRun installs a tracepoint defined while tracing
// (InstallInTrace); on failure the definition is dropped, like gdbserver.
func (e *Engine) installDuringRun(tp *Tracepoint) []byte {
	e.mu.Lock()
	inst := e.installer
	e.mu.Unlock()
	if inst == nil {
		return e.dropTP(tp, errors.New("no way to install tracepoints"))
	}
	if err := inst.Install(tp); err != nil {
		return e.dropTP(tp, err)
	}
	e.mu.Lock()
	running := e.running
	tp.installed = running
	e.mu.Unlock()
	if !running {
		// The run stopped meanwhile: take it out again.
		_ = inst.Remove(tp)
	}
	return replyOK
}

func (e *Engine) dropTP(tp *Tracepoint, err error) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, t := range e.tps {
		if t == tp {
			e.tps = append(e.tps[:i], e.tps[i+1:]...)
			break
		}
	}
	return errorReply(fmt.Errorf("installing tracepoint %d at %#x: %w", tp.Num, tp.Addr, err))
}

// qtDPsrc records "n:addr:type:start:len:hex".
func (e *Engine) qtDPsrc(s string) []byte {
	c := &cursor{s: s}
	num, addr, err := c.location()
	if err == nil {
		err = c.expect(':')
	}
	if err != nil {
		return errorReply(fmt.Errorf("QTDPsrc: %w", err))
	}
	var src Source
	src.Type = c.upTo(':')
	if src.Type == "" || strings.ContainsAny(src.Type, ";") {
		return errorReply(fmt.Errorf("QTDPsrc: %w: source type %q", errSyntax, src.Type))
	}
	if src.Start, err = c.hex(); err == nil {
		err = c.expect(':')
	}
	if err == nil {
		if src.Len, err = c.hex(); err == nil {
			err = c.expect(':')
		}
	}
	if err == nil {
		src.Text, err = hexText(c.rest())
	}
	if err != nil {
		return errorReply(fmt.Errorf("QTDPsrc: %w", err))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	tp := e.findTP(num, addr)
	if tp == nil {
		return errorReply(fmt.Errorf("QTDPsrc: no tracepoint %d at %#x", num, addr))
	}
	tp.Sources = append(tp.Sources, src)
	return replyOK
}

// qtDV defines "n:value:builtin:name(hex)".
func (e *Engine) qtDV(s string) []byte {
	c := &cursor{s: s}
	num, err := c.hexInt()
	if err == nil {
		err = c.expect(':')
	}
	var val, builtin uint64
	if err == nil {
		if val, err = c.hex(); err == nil {
			err = c.expect(':')
		}
	}
	if err == nil {
		if builtin, err = c.hex(); err == nil {
			err = c.expect(':')
		}
	}
	var name string
	if err == nil {
		name, err = hexText(c.rest())
	}
	if err != nil {
		return errorReply(fmt.Errorf("QTDV: %w", err))
	}
	_ = builtin // gdb echoes what we uploaded; only the stub defines builtins
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.findTSV(num)
	if v == nil {
		v = &tsv{num: num}
		e.tsvs = append(e.tsvs, v)
	}
	v.initial, v.name = int64(val), name
	e.setTSVLocked(v, int64(val))
	return replyOK
}

// reserveBytes bounds the trace buffer memory QTStart makes ready
// (frames.Buffer.Reserve), after the installation; a larger buffer grows
// as frames arrive. First touches of memory cost 5-15 µs per page on the
// virtual machines this was measured on: 16 MiB is 25-45 ms of background
// work. Done while gdb downloads the definitions (from QTinit), it made
// that download slower than the work it saved: tstart of 100 fast
// tracepoints took 38-42 ms instead of 19-23 on a two-CPU VM
// (scripts/bench-insert.sh, 2026-11-29).
const reserveBytes = 16 << 20

// qtStart installs every enabled tracepoint and starts the run.
func (e *Engine) qtStart() []byte {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return errorReply(errors.New("QTStart: a trace run is already active"))
	}
	inst := e.installer
	var want []*Tracepoint
	for _, tp := range e.tps {
		tp.Hits, tp.BytesUsed = 0, 0
		if tp.Enabled {
			want = append(want, tp)
		}
	}
	e.mu.Unlock()
	if len(want) > 0 && inst == nil {
		return errorReply(errors.New("QTStart: no way to install tracepoints"))
	}
	var done []*Tracepoint
	var err error
	batch(inst, func() { done, err = e.installRun(inst, want) })
	if err != nil {
		return errorReply(err)
	}
	// The frames' memory is made ready now, after the installation (on
	// two CPUs it took one from the installation's threads: QTStart of
	// 100 fast tracepoints 5 → 11-13 ms) and not in the reply's way.
	// Frames that come first (in non-stop mode) have their piece made
	// when they need it.
	go e.buf.Reserve(reserveBytes)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, tp := range done {
		tp.installed = true
	}
	e.running = true
	e.frame = nil
	e.stopReason, e.stopTP, e.stopError = "", 0, ""
	e.startTime, e.stopTime = e.now().UnixMicro(), 0
	return replyOK
}

// installRun starts a run of the installer's and installs want; on an
// error it removes what it installed.
func (e *Engine) installRun(inst Installer, want []*Tracepoint) ([]*Tracepoint, error) {
	if rs, ok := inst.(RunStarter); ok {
		rs.StartRun()
	}
	e.mu.Lock()
	e.fastDropped = 0
	clear(e.asTraps)
	e.mu.Unlock()
	var done []*Tracepoint
	for _, tp := range want {
		if err := inst.Install(tp); err != nil {
			removeAll(inst, done)
			return nil, fmt.Errorf("QTStart: tracepoint %d at %#x: %w", tp.Num, tp.Addr, err)
		}
		done = append(done, tp)
	}
	return done, nil
}

// qtStop stops the run.
func (e *Engine) qtStop() []byte {
	e.mu.Lock()
	removed := e.stopLocked(reasonStop, 0, "")
	inst := e.installer
	e.mu.Unlock()
	batch(inst, func() { removeAll(inst, removed) })
	return replyOK
}

// statusLocked is the qTStatus reply after the 'T'.
func (e *Engine) statusLocked() string {
	var b strings.Builder
	if e.running {
		b.WriteString("1;")
	} else {
		b.WriteString("0;")
	}
	switch e.stopReason {
	case "":
		b.WriteString("tnotrun:0")
	case reasonStop:
		fmt.Fprintf(&b, "tstop:%s:0", hex.EncodeToString([]byte(e.stopNote)))
	case reasonError:
		fmt.Fprintf(&b, "terror:%s:%x", hex.EncodeToString([]byte(e.stopError)), e.stopTP)
	default:
		fmt.Fprintf(&b, "%s:%x", e.stopReason, e.stopTP)
	}
	circ, disc := 0, 0
	if e.buf.Circular() {
		circ = 1
	}
	if e.disconn {
		disc = 1
	}
	fmt.Fprintf(&b, ";tframes:%x;tcreated:%x;tfree:%x;tsize:%x;circular:%d;disconn:%d;starttime:%x;stoptime:%x;username:%s;notes:%s",
		e.buf.Count(), e.buf.Created(), e.buf.Free(), e.buf.Size(), circ, disc,
		uint64(e.startTime), uint64(e.stopTime),
		hex.EncodeToString([]byte(e.user)), hex.EncodeToString([]byte(e.notesLocked())))
	return b.String()
}

// notesLocked is the trace notes gdb set, with what the user of fast
// tracepoints should know: the hits the Installer dropped, and the fast
// tracepoints that run as traps.
func (e *Engine) notesLocked() string {
	var parts []string
	if e.notes != "" {
		parts = append(parts, e.notes)
	}
	if e.fastDropped != 0 {
		parts = append(parts, fmt.Sprintf("gotpstub: %d fast tracepoint hits dropped (the stub fell behind)", e.fastDropped))
	}
	for _, tp := range e.tps {
		if why := e.asTraps[tp.Num]; why != "" {
			parts = append(parts, fmt.Sprintf("gotpstub: fast tracepoint %d runs as a trap tracepoint (each hit stops its thread): %s", tp.Num, why))
		}
	}
	return strings.Join(parts, "; ")
}

// qtFrame selects a trace frame: "n", "pc:a", "tdp:n", "range:lo:hi",
// "outside:lo:hi"; "-1" leaves tfind mode.
func (e *Engine) qtFrame(s string) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	after := -1
	if e.frame != nil {
		after = e.frame.Num
	}
	var (
		f     *frames.Frame
		found bool
	)
	c := &cursor{s: s}
	switch {
	case strings.HasPrefix(s, "pc:"):
		c.pos = len("pc:")
		pc, err := c.hex()
		if err != nil || !c.done() {
			return errorReply(fmt.Errorf("QTFrame:pc: %w", errSyntax))
		}
		f, found = e.buf.FindPC(after, pc, e.pcOffset)
	case strings.HasPrefix(s, "tdp:"):
		c.pos = len("tdp:")
		n, err := c.hex()
		if err != nil || !c.done() {
			return errorReply(fmt.Errorf("QTFrame:tdp: %w", errSyntax))
		}
		// gdb sends "tfind tracepoint -1" as ffffffff: no such tracepoint.
		if n <= 0xffff {
			f, found = e.buf.FindTracepoint(after, int(n))
		}
	case strings.HasPrefix(s, "range:"), strings.HasPrefix(s, "outside:"):
		inside := strings.HasPrefix(s, "range:")
		c.pos = strings.IndexByte(s, ':') + 1
		lo, err := c.hex()
		if err == nil {
			err = c.expect(':')
		}
		var hi uint64
		if err == nil {
			hi, err = c.hex()
		}
		if err != nil || !c.done() {
			return errorReply(fmt.Errorf("QTFrame range: %w", errSyntax))
		}
		f, found = e.buf.FindRange(after, lo, hi, inside, e.pcOffset)
	case s == "-1" || s == "ffffffff":
		e.frame = nil
		return replyOK
	default:
		n, err := c.hex()
		if err != nil || !c.done() {
			return errorReply(fmt.Errorf("QTFrame: %w: %q", errSyntax, s))
		}
		if n < 1<<31 {
			f, found = e.buf.Frame(int(n))
		}
	}
	if !found {
		return []byte("F-1")
	}
	e.frame = f
	return fmt.Appendf(nil, "F%xT%x", f.Num, f.TPNum)
}

// qtV answers "V<value>" or "U" for trace state variable n.
func (e *Engine) qtV(s string) []byte {
	c := &cursor{s: s}
	num, err := c.hexInt()
	if err != nil || !c.done() {
		return errorReply(fmt.Errorf("qTV: %w", errSyntax))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.frame != nil {
		v, ok := e.frame.TSV(num)
		if !ok {
			return []byte("U")
		}
		return fmt.Appendf(nil, "V%x", uint64(v))
	}
	v := e.findTSV(num)
	if v == nil || (!e.running && e.stopReason == reasonNotRun) {
		return []byte("U")
	}
	return fmt.Appendf(nil, "V%x", uint64(e.tsvValue(v)))
}

// qtP answers "V<hits>:<bytes>" (hex) for location "n:addr".
func (e *Engine) qtP(s string) []byte {
	c := &cursor{s: s}
	num, addr, err := c.location()
	if err != nil {
		return errorReply(fmt.Errorf("qTP: %w", err))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	tp := e.findTP(num, addr)
	if tp == nil {
		return errorReply(fmt.Errorf("qTP: no tracepoint %d at %#x", num, addr))
	}
	return fmt.Appendf(nil, "V%x:%x", tp.Hits, tp.BytesUsed)
}

// qtEnable enables or disables location "n:addr", installing or removing
// it when a run is active.
func (e *Engine) qtEnable(s string, enable bool) []byte {
	c := &cursor{s: s}
	num, addr, err := c.location()
	if err != nil {
		return errorReply(fmt.Errorf("QTEnable/QTDisable: %w", err))
	}
	e.mu.Lock()
	tp := e.findTP(num, addr)
	if tp == nil {
		e.mu.Unlock()
		return errorReply(fmt.Errorf("no tracepoint %d at %#x", num, addr))
	}
	if tp.Enabled == enable {
		e.mu.Unlock()
		return replyOK
	}
	tp.Enabled = enable
	inst := e.installer
	install := enable && e.running && !tp.installed
	remove := !enable && tp.installed
	if remove {
		tp.installed = false
	}
	e.mu.Unlock()
	switch {
	case install && inst != nil:
		if err := inst.Install(tp); err != nil {
			e.mu.Lock()
			tp.Enabled = false
			e.mu.Unlock()
			return errorReply(fmt.Errorf("enabling tracepoint %d at %#x: %w", num, addr, err))
		}
		e.mu.Lock()
		tp.installed = e.running
		running := e.running
		e.mu.Unlock()
		if !running {
			_ = inst.Remove(tp)
		}
	case remove && inst != nil:
		if err := inst.Remove(tp); err != nil {
			return errorReply(fmt.Errorf("disabling tracepoint %d at %#x: %w", num, addr, err))
		}
	}
	return replyOK
}

// qtBufferSize sets the buffer size: hex bytes or -1 for the default.
func (e *Engine) qtBufferSize(s string) []byte {
	size := frames.DefaultSize
	if s != "-1" {
		c := &cursor{s: s}
		v, err := c.hex()
		if err != nil || !c.done() {
			return errorReply(fmt.Errorf("QTBuffer:size: %w", errSyntax))
		}
		if v > frames.MaxSize {
			return errorReply(fmt.Errorf("QTBuffer:size: %d bytes is too large", v))
		}
		size = int(v)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running {
		return errorReply(errors.New("cannot change the trace buffer size while tracing"))
	}
	if err := e.buf.SetSize(size); err != nil {
		return errorReply(fmt.Errorf("QTBuffer:size: %w", err))
	}
	e.frame = nil
	return replyOK
}

// qtBufferCircular sets circular (1) or linear (0).
func (e *Engine) qtBufferCircular(s string) []byte {
	c := &cursor{s: s}
	v, err := c.hex()
	if err != nil || !c.done() {
		return errorReply(fmt.Errorf("QTBuffer:circular: %w", errSyntax))
	}
	e.buf.SetCircular(v != 0)
	return replyOK
}

// qtBuffer serves "offset,len" of the raw frames as hex, "l" at the end.
func (e *Engine) qtBuffer(s string) []byte {
	c := &cursor{s: s}
	off, err := c.hex()
	if err == nil {
		err = c.expect(',')
	}
	var n uint64
	if err == nil {
		n, err = c.hex()
	}
	if err != nil || !c.done() {
		return errorReply(fmt.Errorf("qTBuffer: %w", errSyntax))
	}
	if off > math.MaxInt32 || n == 0 {
		return replyError
	}
	data, err := e.buf.ReadTraceData(int(off), int(min(n, maxReplyBytes)))
	switch {
	case errors.Is(err, io.EOF):
		return []byte("l")
	case err != nil:
		return replyError
	}
	return []byte(hex.EncodeToString(data))
}

// qtNotes sets "user:hex;notes:hex;tstop:hex;".
func (e *Engine) qtNotes(s string) []byte {
	type field struct {
		key string
		dst *string
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	fields := []field{{"user:", &e.user}, {"notes:", &e.notes}, {"tstop:", &e.stopNote}}
	for s != "" {
		var f *field
		for i := range fields {
			if strings.HasPrefix(s, fields[i].key) {
				f = &fields[i]
			}
		}
		if f == nil {
			break // unknown note: ignore the rest, like gdbserver
		}
		s = s[len(f.key):]
		val, rest, _ := strings.Cut(s, ";")
		text, err := hexText(val)
		if err != nil {
			return errorReply(fmt.Errorf("QTNotes: %w", err))
		}
		*f.dst, s = text, rest
	}
	return replyOK
}

// qtRO replaces the read-only ranges: ":start,end" repeated.
func (e *Engine) qtRO(s string) []byte {
	c := &cursor{s: s}
	var ro []roRange
	for c.accept(':') {
		start, err := c.hex()
		if err == nil {
			err = c.expect(',')
		}
		var end uint64
		if err == nil {
			end, err = c.hex()
		}
		if err != nil {
			return errorReply(fmt.Errorf("QTro: %w", err))
		}
		ro = append(ro, roRange{start, end})
	}
	if !c.done() {
		return errorReply(fmt.Errorf("QTro: %w: trailing %q", errSyntax, c.rest()))
	}
	e.mu.Lock()
	e.ro = ro
	e.mu.Unlock()
	return replyOK
}

// qtDisconnected sets whether a run survives gdb's disconnection.
func (e *Engine) qtDisconnected(s string) []byte {
	c := &cursor{s: s}
	v, err := c.hex()
	if err != nil || !c.done() {
		return errorReply(fmt.Errorf("QTDisconnected: %w", errSyntax))
	}
	e.mu.Lock()
	e.disconn = v != 0
	e.mu.Unlock()
	return replyOK
}

// savePath returns where QTSave writes name: with a save directory
// (--tsave-dir), name relative to it, and only inside it.
func (e *Engine) savePath(name string) (string, error) {
	if e.saveDir == "" {
		return name, nil
	}
	p := name
	if !filepath.IsAbs(p) {
		p = filepath.Join(e.saveDir, p)
	}
	p = filepath.Clean(p)
	rel, err := filepath.Rel(filepath.Clean(e.saveDir), p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("refused: %q is outside the save directory %s (--tsave-dir)", name, e.saveDir)
	}
	return p, nil
}

// qtSave writes the trace to a tfile on the stub's machine (tsave -r).
func (e *Engine) qtSave(s string) []byte {
	name, err := hexText(s)
	if err != nil || name == "" {
		return errorReply(fmt.Errorf("QTSave: %w: file name", errSyntax))
	}
	if e.noSave {
		return errorReply(errors.New("QTSave: refused: the stub runs with --no-tsave"))
	}
	if name, err = e.savePath(name); err != nil {
		return errorReply(fmt.Errorf("QTSave: %w", err))
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return errorReply(fmt.Errorf("QTSave: %w", err))
	}
	if err := e.WriteTFile(f); err != nil {
		f.Close()
		return errorReply(fmt.Errorf("QTSave: %w", err))
	}
	if err := f.Close(); err != nil {
		return errorReply(fmt.Errorf("QTSave: %w", err))
	}
	return replyOK
}

// qXferTraceframeInfo serves "<annex>:offset,length" of the selected
// frame's traceframe-info document.
func (e *Engine) qXferTraceframeInfo(s string) []byte {
	return e.qXferFrameObject("traceframe-info", s, func(f *frames.Frame) []byte {
		return frames.TraceframeInfoXML(f, e.regBlockSize())
	})
}

// qXferStaticTrace serves ":offset,length" of the selected frame's static
// tracepoint data ($_sdata): its 'S' block.
func (e *Engine) qXferStaticTrace(s string) []byte {
	return e.qXferFrameObject("statictrace", s, (*frames.Frame).Static)
}

// qXferFrameObject serves ":offset,length" (an empty annex) of the object
// doc makes from the selected frame: "m" and a part, "l" and the rest.
func (e *Engine) qXferFrameObject(name, s string, doc func(*frames.Frame) []byte) []byte {
	annex, rest, ok := strings.Cut(s, ":")
	offStr, lenStr, ok2 := strings.Cut(rest, ",")
	off, err1 := strconv.ParseUint(offStr, 16, 32)
	n, err2 := strconv.ParseUint(lenStr, 16, 32)
	if !ok || !ok2 || annex != "" || err1 != nil || err2 != nil {
		return errorReply(fmt.Errorf("qXfer:%s: %w: %q", name, errSyntax, s))
	}
	e.mu.Lock()
	f := e.frame
	e.mu.Unlock()
	if f == nil {
		return replyError
	}
	data := doc(f)
	if off >= uint64(len(data)) {
		return []byte("l")
	}
	data = data[off:]
	n = min(n, maxReplyBytes)
	if uint64(len(data)) <= n {
		return append([]byte("l"), data...)
	}
	return append([]byte("m"), data[:n]...)
}

// regBlockSize is the size of an R block.
func (e *Engine) regBlockSize() int {
	if e.layout == nil {
		return 0
	}
	return e.layout.Size
}
