package export

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"gotpstub/frames"
)

// jsonFrame is one line of WriteJSON's output.
type jsonFrame struct {
	Frame      int               `json:"frame"`
	Tracepoint int               `json:"tracepoint"`
	Location   string            `json:"location,omitempty"`
	Fast       bool              `json:"fast"`
	TimeNS     *int64            `json:"time_ns"`
	PC         string            `json:"pc"`
	Registers  map[string]string `json:"registers,omitempty"`
	Memory     []jsonMemory      `json:"memory,omitempty"`
	TSVs       map[string]int64  `json:"tsvs,omitempty"`
}

type jsonMemory struct {
	Addr  string `json:"addr"`
	Bytes string `json:"bytes"` // hex
}

// WriteJSON writes one JSON object per frame, in frame order (JSON
// Lines). Registers up to 8 bytes are hex numbers ("0x1f"), wider ones
// hex bytes in memory order; trace state variables are keyed by name
// ("$name") or number.
func (t *Trace) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, f := range t.File.Frames {
		if err := enc.Encode(t.jsonFrame(f)); err != nil {
			return fmt.Errorf("export frame %d: %w", f.Num, err)
		}
	}
	return bw.Flush()
}

func (t *Trace) jsonFrame(f *frames.Frame) jsonFrame {
	j := jsonFrame{Frame: f.Num, Tracepoint: f.TPNum, PC: fmt.Sprintf("%#x", t.pc(f))}
	if tp := t.Tracepoints[f.TPNum]; tp != nil {
		j.Location, j.Fast = tp.Location, tp.Fast
	}
	if ns, ok := timeOf(f); ok {
		j.TimeNS = &ns
	}
	if regs := f.Registers(); regs != nil && t.Layout != nil && len(regs) == t.Layout.Size {
		j.Registers = map[string]string{}
		for _, r := range t.Layout.Regs {
			b := regs[r.Offset : r.Offset+r.Size]
			if r.Size <= 8 {
				var v [8]byte
				copy(v[:], b)
				j.Registers[r.Name] = fmt.Sprintf("%#x", binary.LittleEndian.Uint64(v[:]))
			} else {
				j.Registers[r.Name] = hex.EncodeToString(b)
			}
		}
	}
	for _, m := range f.Memory() {
		j.Memory = append(j.Memory, jsonMemory{Addr: fmt.Sprintf("%#x", m.Addr), Bytes: hex.EncodeToString(m.Data)})
	}
	for _, v := range f.TSVs() {
		if j.TSVs == nil {
			j.TSVs = map[string]int64{}
		}
		key := fmt.Sprint(v.Num)
		if name := t.TSVNames[v.Num]; name != "" {
			key = "$" + name
		}
		j.TSVs[key] = v.Value
	}
	return j
}
