package inferior

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
)

// Writes combined while the process is stopped (Exclusive).
//
// Inside Exclusive every thread stays stopped unless the package resumes
// one, so the memory writes of a tstart placing a thousand jumps (each
// a pwrite of /proc/PID/mem, about 5 µs) are kept and made at its end a
// page at a time: the writes applied in order, the changed span written
// once (the page read first only where the writes leave gaps in that
// span: flushPage). Reads see the kept writes (readRaw applies
// them), and anything that lets a thread run — a resumption, a detach,
// an injected system call — makes them first (flushWrites).

// pendingWrites are writes kept for later, in order, indexed by page.
type pendingWrites struct {
	writes []memWrite
	pages  map[uint64][]int // page address → indexes in writes
}

// memSpan is the range of addresses [lo, hi).
type memSpan struct{ lo, hi uint64 }

// memWrite is one kept write.
type memWrite struct {
	addr uint64
	data []byte
}

// deferWrite keeps a write for flushWrites; false when writes are not
// being kept now.
func (p *Process) deferWrite(addr uint64, data []byte) bool {
	if p.writeBatch == 0 || p.anyRunning() {
		return false
	}
	pw := &p.kept
	if pw.pages == nil {
		pw.pages = map[uint64][]int{}
	}
	data = p.keptData.copyOf(data)
	i := len(pw.writes)
	pw.writes = append(pw.writes, memWrite{addr, data})
	for page := addr &^ (pageSize - 1); page < addr+uint64(len(data)); page += pageSize {
		pw.pages[page] = append(pw.pages[page], i)
	}
	return true
}

// overlayPending applies the kept writes to buf, read from addr.
func (p *Process) overlayPending(addr uint64, buf []byte) {
	pw := &p.kept
	if len(pw.writes) == 0 || len(buf) == 0 {
		return
	}
	var idx []int
	for page := addr &^ (pageSize - 1); page < addr+uint64(len(buf)); page += pageSize {
		idx = append(idx, pw.pages[page]...)
	}
	sort.Ints(idx) // in the order they were made
	prev := -1
	for _, i := range idx {
		if i == prev {
			continue // a write over two pages is listed twice
		}
		prev = i
		applyWrite(addr, buf, pw.writes[i])
	}
}

// applyWrite copies the part of w that falls in buf (memory from addr).
func applyWrite(addr uint64, buf []byte, w memWrite) {
	lo, hi := max(addr, w.addr), min(addr+uint64(len(buf)), w.addr+uint64(len(w.data)))
	if lo < hi {
		copy(buf[lo-addr:hi-addr], w.data[lo-w.addr:hi-w.addr])
	}
}

// flushWrites makes the kept writes: each page touched is read, the
// writes applied, and the span they changed written in one go; a page
// that cannot be read whole gets its writes one by one.
func (p *Process) flushWrites() error {
	pw := p.kept
	p.kept = pendingWrites{}
	if len(pw.writes) == 0 {
		return nil
	}
	defer p.keptData.reset() // after the writes, which use it
	pages := make([]uint64, 0, len(pw.pages))
	for page := range pw.pages {
		pages = append(pages, page)
	}
	sort.Slice(pages, func(i, j int) bool { return pages[i] < pages[j] })
	var first error
	for _, page := range pages {
		if err := p.flushPage(page, pw.writes, pw.pages[page]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// flushPage writes the writes idx (in order) that touch page. When they
// cover the span they change without a gap (a pad, a jump) the span is
// built from them alone; otherwise the page is read first, for the
// bytes between them. Reading a fresh pad page first would also map the
// zero page in, for the write to copy at once.
func (p *Process) flushPage(page uint64, writes []memWrite, idx []int) error {
	if p.pageBuf == nil {
		p.pageBuf = make([]byte, pageSize)
	}
	buf := p.pageBuf
	lo, hi, whole := p.gaplessSpan(page, writes, idx)
	if !whole {
		if n, err := p.readRaw(page, buf); err != nil || n != len(buf) {
			return p.flushPageWriteByWrite(page, writes, idx)
		}
	}
	for _, i := range idx {
		applyWrite(page, buf, writes[i])
	}
	if err := p.writeNow(lo, buf[lo-page:hi-page]); err != nil {
		return fmt.Errorf("writing the kept writes at %#x: %w", lo, err)
	}
	return nil
}

// flushPageWriteByWrite makes the writes idx on page one by one (a page
// that cannot be read whole).
func (p *Process) flushPageWriteByWrite(page uint64, writes []memWrite, idx []int) error {
	for _, i := range idx {
		lo, hi := clipToPage(page, writes[i])
		if err := p.writeNow(lo, writes[i].data[lo-writes[i].addr:hi-writes[i].addr]); err != nil {
			return err
		}
	}
	return nil
}

// clipToPage returns the part of w on page, [lo, hi).
func clipToPage(page uint64, w memWrite) (lo, hi uint64) {
	return max(page, w.addr), min(page+pageSize, w.addr+uint64(len(w.data)))
}

// gaplessSpan returns the span [lo, hi) of page the writes idx change,
// and whether they cover all of it.
func (p *Process) gaplessSpan(page uint64, writes []memWrite, idx []int) (lo, hi uint64, whole bool) {
	spans := p.spanBuf[:0]
	for _, i := range idx {
		l, h := clipToPage(page, writes[i])
		spans = append(spans, memSpan{l, h})
	}
	p.spanBuf = spans
	return unionSpan(spans)
}

// unionSpan sorts spans (non-empty) and returns the least range holding
// them all, and whether their union is that whole range.
func unionSpan(spans []memSpan) (lo, hi uint64, whole bool) {
	slices.SortFunc(spans, func(a, b memSpan) int { return cmp.Compare(a.lo, b.lo) })
	lo, hi, whole = spans[0].lo, spans[0].hi, true
	for _, s := range spans[1:] {
		if s.lo > hi {
			whole = false
		}
		hi = max(hi, s.hi)
	}
	return lo, hi, whole
}

// flushBeforeResume makes the kept writes before t runs: all of them,
// or, while an injected system call that reads none of the process's
// memory runs (p.injectingNoMemory: an anonymous mmap, say), only those
// on the pages of the instruction t is at — the one it runs. The rest
// stay kept, so that a tstart mapping pads between its jumps writes each
// code page once, not once per mapping.
func (p *Process) flushBeforeResume(t *thread) error {
	if !p.injectingNoMemory || len(p.kept.writes) == 0 {
		return p.flushWrites()
	}
	pc, err := getPC(t.tid)
	if err != nil {
		return p.flushWrites()
	}
	return p.flushWritesOn(pc&^(pageSize-1), (pc+maxInsnLen-1)&^(pageSize-1))
}

// maxInsnLen bounds an instruction's length on every ISA (x86's 15).
const maxInsnLen = 15

// flushWritesOn makes the kept writes touching the pages from first to
// last (page addresses); the others stay kept.
func (p *Process) flushWritesOn(first, last uint64) error {
	pw := &p.kept
	var err error
	for page := first; page <= last; page += pageSize {
		idx, ok := pw.pages[page]
		if !ok {
			continue
		}
		// Out of the index first: flushPage's read must not see them.
		delete(pw.pages, page)
		if ferr := p.flushPage(page, pw.writes, idx); ferr != nil && err == nil {
			err = ferr
		}
	}
	if len(pw.pages) == 0 {
		p.kept = pendingWrites{}
		p.keptData.reset()
	}
	return err
}
