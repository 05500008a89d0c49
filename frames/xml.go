package frames

import (
	"fmt"
	"strings"
)

// TraceframeInfoXML returns the qXfer:traceframe-info:read object for f in
// gdbserver's format: one <memory start= length=/> per 'M' block and one
// <tvar id=/> per 'V' block, in frame order. regblockSize is the size of an
// 'R' block's body (0: use f.RegBlockSize).
func TraceframeInfoXML(f *Frame, regblockSize int) []byte {
	var sb strings.Builder
	sb.WriteString("<traceframe-info>\n")
	if f != nil {
		view := *f
		if regblockSize > 0 {
			view.RegBlockSize = regblockSize
		}
		_ = view.walk(func(bl block) bool {
			switch bl.kind {
			case BlockMemory:
				m := MemBlock{Addr: leU64(bl.body[0:8]), Data: bl.body[10:]}
				fmt.Fprintf(&sb, "<memory start=\"0x%x\" length=\"0x%x\"/>\n", m.Addr, len(m.Data))
			case BlockTSV:
				fmt.Fprintf(&sb, "<tvar id=\"%d\"/>\n", int32(leU32(bl.body[0:4])))
			}
			return true
		})
	}
	sb.WriteString("</traceframe-info>\n")
	return []byte(sb.String())
}
