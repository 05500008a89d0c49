package tracing

import (
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	"gotpstub/frames"
	"gotpstub/tdesc"
)

// definitionLinesLocked returns the qTfP/qTsP replies: per location a T
// line, its A and S action lines and its Z source lines, in the syntax
// gdb's parse_tracepoint_definition reads.
func (e *Engine) definitionLinesLocked() []string {
	var lines []string
	for _, tp := range e.tps {
		ed := 'D'
		if tp.Enabled {
			ed = 'E'
		}
		t := fmt.Sprintf("T%x:%x:%c:%x:%x", tp.Num, tp.Addr, ed, tp.StepCount, tp.PassCount)
		if tp.Fast {
			t += fmt.Sprintf(":F%x", tp.FastLen)
		} else if tp.Static {
			t += ":S"
		}
		if tp.Cond != nil {
			t += fmt.Sprintf(":X%x,%s", len(tp.Cond.Code), hex.EncodeToString(tp.Cond.Code))
		}
		lines = append(lines, t)
		for _, a := range tp.Actions {
			lines = append(lines, fmt.Sprintf("A%x:%x:%s", tp.Num, tp.Addr, a.Text))
		}
		for _, a := range tp.StepActions {
			lines = append(lines, fmt.Sprintf("S%x:%x:%s", tp.Num, tp.Addr, a.Text))
		}
		for _, s := range tp.Sources {
			lines = append(lines, fmt.Sprintf("Z%x:%x:%s:%x:%x:%s", tp.Num, tp.Addr, s.Type, s.Start, s.Len, hex.EncodeToString([]byte(s.Text))))
		}
	}
	return lines
}

// tsvLinesLocked returns the qTfV/qTsV replies "n:initial:builtin:name",
// newest variable first like gdbserver (gdb reverses the list it uploads,
// so it then creates them in definition order).
func (e *Engine) tsvLinesLocked() []string {
	var lines []string
	for _, v := range slices.Backward(e.tsvs) {
		builtin := 0
		if v.builtin {
			builtin = 1
		}
		lines = append(lines, fmt.Sprintf("%x:%x:%x:%s", v.num, uint64(v.initial), builtin, hex.EncodeToString([]byte(v.name))))
	}
	return lines
}

// nextUpload pops the next reply of an upload sequence, "l" at the end.
func nextUpload(lines *[]string) []byte {
	if len(*lines) == 0 {
		return []byte("l")
	}
	s := (*lines)[0]
	*lines = (*lines)[1:]
	return []byte(s)
}

func (e *Engine) qtfP() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.uploadTPs = e.definitionLinesLocked()
	return nextUpload(&e.uploadTPs)
}

func (e *Engine) qtsP() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return nextUpload(&e.uploadTPs)
}

func (e *Engine) qtfV() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.uploadTSVs = e.tsvLinesLocked()
	return nextUpload(&e.uploadTSVs)
}

func (e *Engine) qtsV() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return nextUpload(&e.uploadTSVs)
}

// WriteTFile writes the experiment as a trace file (what QTSave writes):
// status, variables, tracepoint definitions and every frame.
func (e *Engine) WriteTFile(w io.Writer) error {
	e.mu.Lock()
	h := frames.TFileHeader{
		RegBlockSize: e.regBlockSize(),
		TDesc:        e.tfileTDesc(),
		Status:       e.statusLocked(),
		TSVs:         e.tsvLinesLocked(),
		Tracepoints:  e.definitionLinesLocked(),
	}
	usage := map[[2]uint64]string{}
	for _, tp := range e.tps {
		usage[[2]uint64{uint64(tp.Num), tp.Addr}] = fmt.Sprintf("V%x:%x", tp.Hits, tp.BytesUsed)
	}
	e.mu.Unlock()
	h.TracepointStatus = func(num int, addr uint64) string { return usage[[2]uint64{uint64(num), addr}] }
	if err := frames.WriteTFile(w, h, e.buf); err != nil {
		return fmt.Errorf("writing the trace file: %w", err)
	}
	return nil
}

// FrameRegisters returns the selected frame's registers. Without an R
// block only the PC is known: the address of the frame's tracepoint (its
// first location), like gdbserver. ok is false when no frame is selected.
func (e *Engine) FrameRegisters() (*tdesc.Regs, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.frame == nil || e.layout == nil {
		return nil, false
	}
	regs := &tdesc.Regs{
		Layout: e.layout,
		Data:   make([]byte, e.layout.Size),
		Valid:  make([]bool, len(e.layout.Regs)),
	}
	if block := e.frame.Registers(); block != nil {
		copy(regs.Data, block)
		for i, r := range e.layout.Regs {
			regs.Valid[i] = collected(e.frame.RegsFrom, r.Num, regs) && e.frame.RegisterCollected(r.Offset, r.Size)
		}
		return regs, true
	}
	if tp := e.firstTP(e.frame.TPNum); tp != nil && e.pcReg >= 0 {
		i := e.regIndex[e.pcReg]
		r := e.layout.Regs[i]
		var pc [8]byte
		putLE(pc[:], tp.Addr)
		copy(regs.Data[r.Offset:r.Offset+min(r.Size, 8)], pc[:])
		regs.Valid[i] = true
	}
	return regs, true
}

// collected reports whether register num of a frame's register block
// holds a collected value, given what the block holds (from); regs is the
// block. A jump pad saves the general registers, rip, eflags and the
// segment selectors, the thread pointer (fs_base) when it could read it,
// and with XSAVE the x87/SSE/AVX state; never orig_rax or gs_base. An
// arm64 pad saves x0-x30, sp, pc, cpsr, and v0-v31, fpsr, fpcr with its
// vector state; never the SVE predicates, ffr, vg or pauth masks.
func collected(from frames.RegsSource, num int, regs *tdesc.Regs) bool {
	if regs.Layout.Arch == "aarch64" {
		switch {
		case from == frames.RegsAll || num <= tdesc.AArch64CPSR:
			return true
		case num <= tdesc.AArch64FPCR:
			return from == frames.RegsGeneralVector
		}
		return false
	}
	switch {
	case from == frames.RegsAll || num <= tdesc.GS:
		return true
	case num == tdesc.FSBASE:
		return regs.Uint64(num) != 0
	case num == tdesc.ORIGRAX || num == tdesc.GSBASE:
		return false
	default: // x87, SSE, AVX
		return from == frames.RegsGeneralVector
	}
}

// FrameMemory reads memory in the selected frame: the bytes collected,
// and inside QTro ranges, or the program's code when Live knows it
// (CodeSpanner), the live memory. It returns how many bytes from
// addr on are known; an error when none are.
func (e *Engine) FrameMemory(addr uint64, buf []byte) (int, error) {
	e.mu.Lock()
	f, ro, live := e.frame, e.ro, e.live
	e.mu.Unlock()
	if f == nil {
		return 0, fmt.Errorf("reading %#x: no trace frame selected", addr)
	}
	done := 0
	for done < len(buf) {
		a := addr + uint64(done)
		if n := f.ReadMemory(a, buf[done:]); n > 0 {
			done += n
			continue
		}
		if live == nil {
			break
		}
		n := readOnlySpan(ro, a, len(buf)-done)
		if c, ok := live.(CodeSpanner); ok && n == 0 {
			n = c.CodeSpan(a, len(buf)-done)
		}
		if n == 0 {
			break
		}
		got, _ := live.ReadMemory(a, buf[done:done+n])
		done += got
		if got < n {
			break
		}
	}
	if done == 0 {
		return 0, fmt.Errorf("memory at %#x was not collected in trace frame %d", addr, f.Num)
	}
	return done, nil
}

// CodeSpanner is a MemoryReader that knows where the program's code is:
// memory nothing but the stub writes, transparent in a trace frame as
// QTro ranges are. gdb's QTro ranges are the executable's unrelocated
// section addresses, which miss a PIE program's code; on aarch64 gdb
// cannot unwind a trace frame whose pc it cannot read (its stub unwinder
// claims it), so the code must be readable there.
type CodeSpanner interface {
	// CodeSpan returns how many of the n bytes at addr are code (0: addr
	// is not).
	CodeSpan(addr uint64, n int) int
}

// readOnlySpan returns how many of the n bytes at addr lie in one QTro
// range (0 if addr is in none).
func readOnlySpan(ro []roRange, addr uint64, n int) int {
	for _, r := range ro {
		if addr >= r.start && addr < r.end {
			return int(min(uint64(n), r.end-addr))
		}
	}
	return 0
}

func putLE(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
}

// maxXIncludeDepth bounds nested xi:includes, like gdb's.
const maxXIncludeDepth = 20

// tfileTDesc returns the target description as gdb's tsave writes it:
// target.xml as the stub serves it with its xi:includes expanded the way
// gdb's xml_process_xincludes does. Empty when the layout has none.
func (e *Engine) tfileTDesc() string {
	if e.layout == nil {
		return ""
	}
	out, err := expandXIncludes(e.layout.XML, "target.xml", 0)
	if err != nil {
		return ""
	}
	return out
}

// expandXIncludes returns document annex from fetch as gdb's XInclude
// processing rewrites it: the XML declaration dropped, the DOCTYPE dropped
// from included documents, and every <xi:include href="..."/> replaced by
// the processed included document. Everything else is kept verbatim.
func expandXIncludes(fetch func(annex string) ([]byte, bool), annex string, depth int) (string, error) {
	if depth > maxXIncludeDepth {
		return "", fmt.Errorf("xi:include depth exceeds %d at %q", maxXIncludeDepth, annex)
	}
	raw, ok := fetch(annex)
	if !ok {
		return "", fmt.Errorf("no target description document %q", annex)
	}
	doc := string(raw)
	if strings.HasPrefix(doc, "<?xml") {
		if end := strings.Index(doc, "?>"); end >= 0 {
			doc = doc[end+2:]
		}
	}
	if depth > 0 {
		if i := strings.Index(doc, "<!DOCTYPE"); i >= 0 {
			if end := strings.IndexByte(doc[i:], '>'); end >= 0 {
				doc = doc[:i] + doc[i+end+1:]
			}
		}
	}
	var b strings.Builder
	for {
		i := strings.Index(doc, "<xi:include")
		if i < 0 {
			b.WriteString(doc)
			return b.String(), nil
		}
		end := strings.Index(doc[i:], "/>")
		if end < 0 {
			return "", fmt.Errorf("unterminated xi:include in %q", annex)
		}
		elem := doc[i : i+end]
		_, href, ok := strings.Cut(elem, `href="`)
		href, _, ok2 := strings.Cut(href, `"`)
		if !ok || !ok2 {
			return "", fmt.Errorf("xi:include without href in %q", annex)
		}
		inc, err := expandXIncludes(fetch, href, depth+1)
		if err != nil {
			return "", err
		}
		b.WriteString(doc[:i])
		b.WriteString(inc)
		doc = doc[i+end+2:]
	}
}
