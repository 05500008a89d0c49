package tracing

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Syncer is implemented by an Installer whose tracepoints collect without
// the engine's help (jump pads running inside the inferior, package
// fasttp): before the engine answers a trace packet it calls Sync, which
// hands every hit collected since the last call to FastHit or
// FastHitError, so counts, status and frames are current.
type Syncer interface {
	Sync()
}

// HitSyncer is a Syncer that can also drain while a trap tracepoint is
// being hit, through the hitting thread's memory access (the ptrace
// thread runs the hit and cannot wait for itself). Hit calls SyncHit
// first, so frames stay in the order the hits happened even when trap
// and fast tracepoints mix.
type HitSyncer interface {
	Syncer
	SyncHit(mem MemoryAccess)
}

// MemoryAccess reads and writes inferior memory.
type MemoryAccess interface {
	ReadMemory(addr uint64, buf []byte) (int, error)
	WriteMemory(addr uint64, data []byte) error
}

// syncHit runs the Installer's SyncHit when ctx can write memory. It must
// be called without e.mu held.
func (e *Engine) syncHit(ctx HitContext) {
	e.mu.Lock()
	inst := e.installer
	e.mu.Unlock()
	hs, ok := inst.(HitSyncer)
	if !ok {
		return
	}
	if mem, ok := ctx.(MemoryAccess); ok {
		hs.SyncHit(mem)
	}
}

// SetFastTracepoints makes Features announce FastTracepoints (gdb then
// downloads ftrace locations with their F flag). Only set it when the
// Installer really places fast tracepoints.
func (e *Engine) SetFastTracepoints(on bool) {
	e.mu.Lock()
	e.fastTracepoints = on
	e.mu.Unlock()
}

// sync runs the Installer's Sync, if it has one. It must be called
// without e.mu held.
func (e *Engine) sync() {
	e.mu.Lock()
	inst := e.installer
	e.mu.Unlock()
	if s, ok := inst.(Syncer); ok {
		s.Sync()
	}
}

// FastHit records a hit of tp whose condition was true, collected by the
// Installer: regs holds register values by GDB register number (regs[n]
// is register n, truncated to its size in the layout; registers beyond
// regs read as zero) and blocks are the collected 'M' and
// 'V' blocks in jit's format ('M' addr:u64 len:u16 bytes, 'V' num:u32
// value:i64, little-endian). The hit counts towards tp's passcount and the
// frame is stored like a trap tracepoint's, with an R block when tp
// collects registers. Hits arriving after the run stopped are dropped.
func (e *Engine) FastHit(tp *Tracepoint, regs []uint64, blocks []byte) error {
	e.mu.Lock()
	if !e.running || !tp.installed {
		e.mu.Unlock()
		return nil
	}
	removed, err := e.fastHitLocked(tp, regs, blocks)
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
	return err
}

func (e *Engine) fastHitLocked(tp *Tracepoint, regs []uint64, blocks []byte) ([]*Tracepoint, error) {
	h := &e.hit
	h.overflow = false
	tp.Hits++
	h.frame = e.buf.NewFrame(tp.Num)
	h.frame.SetFallbackPC(tp.Addr)
	if tp.collectsRegisters() {
		block := h.regBlock(nil, 0, false)
		for num, v := range regs {
			idx, ok := e.regIndex[num]
			if !ok {
				continue
			}
			r := e.layout.Regs[idx]
			var le [8]byte
			binary.LittleEndian.PutUint64(le[:], v)
			if size := r.Size; size <= 8 && r.Offset+size <= len(block) {
				copy(block[r.Offset:r.Offset+size], le[:size])
			}
		}
		h.frame.AddRegisters(block)
	}
	if err := addBlocks(h, blocks); err != nil {
		h.frame = nil
		return e.stopLocked(reasonError, tp.Num, fmt.Sprintf("fast tracepoint frame: %v", err)), err
	}
	removed := e.commitLocked(tp)
	h.frame = nil
	if removed != nil {
		return removed, nil
	}
	if tp.PassCount > 0 && tp.Hits >= uint64(tp.PassCount) {
		return e.stopLocked(reasonPassCount, tp.Num, ""), nil
	}
	return nil, nil
}

// FastHitError stops the run with terror: evaluating tp's condition or
// a collection failed inside the inferior (what names the failure).
func (e *Engine) FastHitError(tp *Tracepoint, what string) {
	e.mu.Lock()
	var removed []*Tracepoint
	if e.running {
		removed = e.stopLocked(reasonError, tp.Num, what)
	}
	inst := e.installer
	e.mu.Unlock()
	removeAll(inst, removed)
}

// collectsRegisters reports whether tp's actions collect the register
// block (an R action).
func (tp *Tracepoint) collectsRegisters() bool {
	for _, a := range tp.Actions {
		if a.Kind == ActionRegisters {
			return true
		}
	}
	return false
}

// addBlocks adds jit-format collection blocks to h.frame.
func addBlocks(h *hitState, b []byte) error {
	for len(b) > 0 {
		switch b[0] {
		case 'M':
			if len(b) < 11 {
				return errors.New("truncated M block header")
			}
			addr := binary.LittleEndian.Uint64(b[1:9])
			n := int(binary.LittleEndian.Uint16(b[9:11]))
			if len(b) < 11+n {
				return fmt.Errorf("M block at %#x: %d bytes announced, %d present", addr, n, len(b)-11)
			}
			if uint64(h.frame.Size())+uint64(n) > uint64(h.e.buf.Size()) {
				h.overflow = true
				return nil
			}
			h.frame.AddMemory(addr, b[11:11+n])
			b = b[11+n:]
		case 'V':
			if len(b) < 13 {
				return errors.New("truncated V block")
			}
			h.frame.AddTSV(int(binary.LittleEndian.Uint32(b[1:5])), int64(binary.LittleEndian.Uint64(b[5:13])))
			b = b[13:]
		default:
			return fmt.Errorf("unknown block type %#x", b[0])
		}
	}
	return nil
}
