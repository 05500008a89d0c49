package frames

import (
	"encoding/binary"
	"fmt"
)

// Block types inside a frame.
const (
	BlockRegisters = 'R' // register block, g-packet layout
	BlockMemory    = 'M' // u64 address, u16 length, bytes
	BlockTSV       = 'V' // u32 variable number, i64 value
	BlockStatic    = 'S' // u16 length, bytes (static tracepoint data)
)

// StaticBlockHeader is the bytes of an 'S' block before its data.
const StaticBlockHeader = 3

// Frame is a read-only view of one stored trace frame.
type Frame struct {
	// Num is the frame's number: its position among the frames present
	// when it was looked up, 0 being the oldest.
	Num int
	// TPNum is the number of the tracepoint that collected the frame.
	TPNum int
	// Raw is the whole frame: 6-byte header and blocks. For a Frame from
	// a Buffer it is a copy: it stays valid whatever is committed later.
	Raw []byte
	// RegBlockSize is the size of an 'R' block's body. Walking the blocks
	// of a frame needs it; when it is 0 the walk stops at an 'R' block.
	RegBlockSize int
	// RegsFrom says which registers the R block holds (RegsAll unless
	// its builder said otherwise; tfiles do not keep it).
	RegsFrom RegsSource
	// Time is when the frame was taken, in nanoseconds since the Unix
	// epoch; 0 when unknown (a tfile written by gdb's own tsave).
	Time int64

	fallbackPC  uint64
	hasFallback bool
}

// RegsSource says which registers of a frame's R block were collected:
// readers present the others as unavailable rather than as zeros.
type RegsSource uint8

// Register sources.
const (
	// RegsAll: every register of the block (a trap hit reads the
	// thread's whole register file).
	RegsAll RegsSource = iota
	// RegsGeneral: the general registers, rip, eflags, the segment
	// selectors and fs_base only (a jump pad's register block).
	RegsGeneral
	// RegsGeneralVector: RegsGeneral and the x87/SSE/AVX state.
	RegsGeneralVector
)

// MemBlock is one 'M' block: Len(Data) bytes collected at Addr.
type MemBlock struct {
	Addr uint64
	Data []byte
}

// TSVBlock is one 'V' block: the value of trace state variable Num.
type TSVBlock struct {
	Num   int
	Value int64
}

// block is one parsed block: its type and body (without the type byte).
type block struct {
	kind byte
	body []byte
}

// data returns the frame's block bytes, bounded by both the header's size
// and the length of Raw.
func (f *Frame) data() []byte {
	if f == nil || len(f.Raw) < HeaderSize {
		return nil
	}
	size := uint64(binary.LittleEndian.Uint32(f.Raw[2:6]))
	d := f.Raw[HeaderSize:]
	if uint64(len(d)) > size {
		d = d[:size]
	}
	return d
}

// walk calls fn for each block in order until fn returns false. It stops
// silently at an unknown block type or a truncated block; the error says
// why it stopped early (nil when every block was walked).
func (f *Frame) walk(fn func(block) bool) error {
	d := f.data()
	for off := 0; off < len(d); {
		kind := d[off]
		rest := d[off+1:]
		var n int
		switch kind {
		case BlockRegisters:
			if f.RegBlockSize <= 0 {
				return fmt.Errorf("frame %d: register block at offset %d of unknown size", f.Num, off)
			}
			n = f.RegBlockSize
		case BlockMemory:
			if len(rest) < 10 {
				return fmt.Errorf("frame %d: truncated memory block header at offset %d", f.Num, off)
			}
			n = 10 + int(binary.LittleEndian.Uint16(rest[8:10]))
		case BlockTSV:
			n = 12
		case BlockRegisterRuns:
			if len(rest) < 2 {
				return fmt.Errorf("frame %d: truncated register runs header at offset %d", f.Num, off)
			}
			n = 2 + int(binary.LittleEndian.Uint16(rest[0:2]))
			if len(rest) >= n {
				if err := eachRun(rest[2:n], func(int, []byte) {}); err != nil {
					return fmt.Errorf("frame %d: register runs at offset %d: %w", f.Num, off, err)
				}
			}
		case BlockStatic:
			if len(rest) < 2 {
				return fmt.Errorf("frame %d: truncated static data block header at offset %d", f.Num, off)
			}
			n = 2 + int(binary.LittleEndian.Uint16(rest[0:2]))
		default:
			return fmt.Errorf("frame %d: unknown block type 0x%02x at offset %d", f.Num, kind, off)
		}
		if len(rest) < n {
			return fmt.Errorf("frame %d: truncated block %q at offset %d: need %d bytes, have %d",
				f.Num, kind, off, n, len(rest))
		}
		if !fn(block{kind: kind, body: rest[:n]}) {
			return nil
		}
		off += 1 + n
	}
	return nil
}

// Static returns the data of the frame's first 'S' block (static
// tracepoint data), nil when it has none.
func (f *Frame) Static() []byte {
	var out []byte
	_ = f.walk(func(bl block) bool {
		if bl.kind == BlockStatic {
			out = bl.body[2:]
			return false
		}
		return true
	})
	return out
}

// Validate reports the first structural problem in the frame's bytes: a
// short header, a size field disagreeing with len(Raw), an unknown block
// type or a truncated block.
func (f *Frame) Validate() error {
	if f == nil || len(f.Raw) < HeaderSize {
		return fmt.Errorf("trace frame shorter than its %d-byte header", HeaderSize)
	}
	size := uint64(binary.LittleEndian.Uint32(f.Raw[2:6]))
	if size != uint64(len(f.Raw)-HeaderSize) {
		return fmt.Errorf("trace frame %d: header says %d data bytes, frame has %d", f.Num, size, len(f.Raw)-HeaderSize)
	}
	if err := f.walk(func(block) bool { return true }); err != nil {
		return fmt.Errorf("walk trace frame blocks: %w", err)
	}
	return nil
}

// Registers returns the body of the frame's first 'R' block, or its
// first 'r' block expanded to a whole register block (zeros outside its
// runs: RegisterCollected tells them), or nil when it has neither.
func (f *Frame) Registers() []byte {
	var regs []byte
	_ = f.walk(func(bl block) bool {
		switch bl.kind {
		case BlockRegisters:
			regs = bl.body
			return false
		case BlockRegisterRuns:
			if f.RegBlockSize > 0 {
				regs = expandRuns(bl.body[2:], f.RegBlockSize)
			}
			return false
		}
		return true
	})
	return regs
}

// Memory returns the frame's 'M' blocks in order. The Data slices share
// the frame's bytes.
func (f *Frame) Memory() []MemBlock {
	var out []MemBlock
	_ = f.walk(func(bl block) bool {
		if bl.kind == BlockMemory {
			out = append(out, MemBlock{
				Addr: binary.LittleEndian.Uint64(bl.body[0:8]),
				Data: bl.body[10:],
			})
		}
		return true
	})
	return out
}

// TSVs returns the frame's 'V' blocks in order.
func (f *Frame) TSVs() []TSVBlock {
	var out []TSVBlock
	_ = f.walk(func(bl block) bool {
		if bl.kind == BlockTSV {
			out = append(out, TSVBlock{
				Num:   int(int32(binary.LittleEndian.Uint32(bl.body[0:4]))),
				Value: int64(binary.LittleEndian.Uint64(bl.body[4:12])),
			})
		}
		return true
	})
	return out
}

// TSV returns the value of trace state variable num recorded in the frame
// (the last one when recorded more than once, like gdbserver).
func (f *Frame) TSV(num int) (int64, bool) {
	var val int64
	found := false
	for _, v := range f.TSVs() {
		if v.Num == num {
			val, found = v.Value, true
		}
	}
	return val, found
}

// ReadMemory copies collected memory at addr into buf, gdbserver style:
// from the first 'M' block containing addr, as many bytes as that block
// holds (the caller asks again for the rest). It returns the number of
// bytes copied, 0 when no block contains addr.
func (f *Frame) ReadMemory(addr uint64, buf []byte) int {
	n := 0
	_ = f.walk(func(bl block) bool {
		if bl.kind != BlockMemory {
			return true
		}
		start := binary.LittleEndian.Uint64(bl.body[0:8])
		data := bl.body[10:]
		if addr >= start && addr-start < uint64(len(data)) {
			n = copy(buf, data[addr-start:])
			return false
		}
		return true
	})
	return n
}

// PC returns the frame's address: the little-endian u64 at pcOffset in its
// register block, or the fallback address (FrameBuilder.SetFallbackPC)
// when the frame has no register block or the PC there is 0. ok is false
// when neither is known.
func (f *Frame) PC(pcOffset int) (pc uint64, ok bool) {
	regs := f.Registers()
	if regs != nil && pcOffset >= 0 && pcOffset <= len(regs)-8 {
		pc = binary.LittleEndian.Uint64(regs[pcOffset:])
		if pc != 0 {
			return pc, true
		}
	}
	if f.hasFallback {
		return f.fallbackPC, true
	}
	if regs != nil && pcOffset >= 0 && pcOffset <= len(regs)-8 {
		return 0, true
	}
	return 0, false
}
