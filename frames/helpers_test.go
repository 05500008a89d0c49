package frames

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
)

// repliesHeader reads a file of captured target replies (lines "status
// BODY", "tsv BODY", "tp BODY", "qtp NUM:ADDR REPLY") into a TFileHeader.
func repliesHeader(t testing.TB, path string, regSize int) TFileHeader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open replies: %v", err)
	}
	defer f.Close()
	h := TFileHeader{RegBlockSize: regSize}
	qtp := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kind, body, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "status":
			h.Status = body
		case "tsv":
			h.TSVs = append(h.TSVs, body)
		case "tp":
			h.Tracepoints = append(h.Tracepoints, body)
		case "qtp":
			key, reply, _ := strings.Cut(body, " ")
			qtp[key] = reply
		default:
			t.Fatalf("bad replies line %q", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read replies: %v", err)
	}
	h.TracepointStatus = func(num int, addr uint64) string {
		return qtp[fmt.Sprintf("%x:%x", num, addr)]
	}
	return h
}

// rebuild commits copies of frames into a new buffer, re-creating every
// block through the FrameBuilder (so the bytes are ours, not copied).
func rebuild(t testing.TB, frames []*Frame, size int) *Buffer {
	t.Helper()
	b := NewBuffer(size)
	for _, fr := range frames {
		fb := b.NewFrame(fr.TPNum)
		err := fr.walk(func(bl block) bool {
			switch bl.kind {
			case BlockRegisters:
				fb.AddRegisters(bl.body)
			case BlockMemory:
				fb.AddMemory(binary.LittleEndian.Uint64(bl.body), bl.body[10:])
			case BlockTSV:
				fb.AddTSV(int(int32(binary.LittleEndian.Uint32(bl.body))), int64(binary.LittleEndian.Uint64(bl.body[4:])))
			default:
				t.Fatalf("frame %d: block %q not supported by the builder", fr.Num, bl.kind)
			}
			return true
		})
		if err != nil {
			t.Fatalf("walk frame %d: %v", fr.Num, err)
		}
		if err := b.Commit(fb); err != nil {
			t.Fatalf("commit frame %d: %v", fr.Num, err)
		}
	}
	return b
}

// regs returns a register block of n bytes with the u64 at pcOffset set
// to pc and the other bytes a pattern derived from seed.
func regs(n, pcOffset int, pc uint64, seed byte) []byte {
	r := make([]byte, n)
	for i := range r {
		r[i] = seed + byte(i)
	}
	if pcOffset >= 0 && pcOffset+8 <= n {
		binary.LittleEndian.PutUint64(r[pcOffset:], pc)
	}
	return r
}
