package a64

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/arch/arm64/arm64asm"
)

var relTarget = regexp.MustCompile(`\.\+0x([0-9a-f]+)`)

// dis1 disassembles one word at pc in GNU syntax with pc-relative
// operands made absolute ("b 0x1234"); words arm64asm does not know are
// shown as ".word 0x...".
func dis1(w uint32, pc uint64) string {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], w)
	in, err := arm64asm.Decode(b[:])
	if err != nil {
		return fmt.Sprintf(".word %#08x", w)
	}
	if in.Op == arm64asm.ADRP {
		pc &^= 0xfff
	}
	return relTarget.ReplaceAllStringFunc(arm64asm.GNUSyntax(in), func(s string) string {
		d, _ := strconv.ParseUint(s[4:], 16, 64)
		return fmt.Sprintf("%#x", pc+d)
	})
}

// disasm disassembles code placed at at, one instruction per "; ".
func disasm(code []uint32, at uint64) string {
	s := make([]string, len(code))
	for i, w := range code {
		s[i] = dis1(w, at+4*uint64(i))
	}
	return strings.Join(s, "; ")
}
