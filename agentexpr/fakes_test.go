package agentexpr

import (
	"errors"
	"fmt"
	"sort"
)

var errFault = errors.New("fault")

// fakeMemory is readable only inside its regions.
type fakeMemory struct {
	regions map[uint64][]byte // start address → contents
}

func (m *fakeMemory) ReadMemory(addr uint64, buf []byte) error {
	for start, data := range m.regions {
		if addr >= start && addr-start <= uint64(len(data)) && uint64(len(buf)) <= uint64(len(data))-(addr-start) {
			copy(buf, data[addr-start:])
			return nil
		}
	}
	return fmt.Errorf("read %d bytes at %#x: %w", len(buf), addr, errFault)
}

type fakeRegisters map[int]uint64

func (r fakeRegisters) Register(num int) (uint64, error) {
	v, ok := r[num]
	if !ok {
		return 0, fmt.Errorf("no register %d", num)
	}
	return v, nil
}

type fakeTSVs map[int]int64

func (t fakeTSVs) GetTSV(num int) (int64, bool) { v, ok := t[num]; return v, ok }
func (t fakeTSVs) SetTSV(num int, v int64)      { t[num] = v }

// block is one collected memory range or TSV.
type block struct {
	Addr, Size uint64
	TSV        int // -1 for memory
}

type recorder struct {
	blocks  []block
	printfs []string
}

func (r *recorder) CollectMemory(addr, size uint64) error {
	r.blocks = append(r.blocks, block{Addr: addr, Size: size, TSV: -1})
	return nil
}

func (r *recorder) CollectTSV(num int) error {
	r.blocks = append(r.blocks, block{TSV: num})
	return nil
}

func (r *recorder) Printf(format string, args []uint64) error {
	r.printfs = append(r.printfs, fmt.Sprintf("%q %v", format, args))
	return nil
}

func sortedTSVs(t fakeTSVs) []string {
	var out []string
	for k, v := range t {
		out = append(out, fmt.Sprintf("%d=%d", k, v))
	}
	sort.Strings(out)
	return out
}
