// Code generated from gdbsupport/ax.def (gdb 13.1) facts; edit with care.

package agentexpr

// Op is one agent-expression opcode byte.
type Op byte

// The opcodes of GDB's agent expression bytecode (gdbsupport/ax.def).
const (
	OpFloat         Op = 0x01
	OpAdd           Op = 0x02
	OpSub           Op = 0x03
	OpMul           Op = 0x04
	OpDivSigned     Op = 0x05
	OpDivUnsigned   Op = 0x06
	OpRemSigned     Op = 0x07
	OpRemUnsigned   Op = 0x08
	OpLsh           Op = 0x09
	OpRshSigned     Op = 0x0a
	OpRshUnsigned   Op = 0x0b
	OpTrace         Op = 0x0c
	OpTraceQuick    Op = 0x0d
	OpLogNot        Op = 0x0e
	OpBitAnd        Op = 0x0f
	OpBitOr         Op = 0x10
	OpBitXor        Op = 0x11
	OpBitNot        Op = 0x12
	OpEqual         Op = 0x13
	OpLessSigned    Op = 0x14
	OpLessUnsigned  Op = 0x15
	OpExt           Op = 0x16
	OpRef8          Op = 0x17
	OpRef16         Op = 0x18
	OpRef32         Op = 0x19
	OpRef64         Op = 0x1a
	OpRefFloat      Op = 0x1b
	OpRefDouble     Op = 0x1c
	OpRefLongDouble Op = 0x1d
	OpLToD          Op = 0x1e
	OpDToL          Op = 0x1f
	OpIfGoto        Op = 0x20
	OpGoto          Op = 0x21
	OpConst8        Op = 0x22
	OpConst16       Op = 0x23
	OpConst32       Op = 0x24
	OpConst64       Op = 0x25
	OpReg           Op = 0x26
	OpEnd           Op = 0x27
	OpDup           Op = 0x28
	OpPop           Op = 0x29
	OpZeroExt       Op = 0x2a
	OpSwap          Op = 0x2b
	OpGetv          Op = 0x2c
	OpSetv          Op = 0x2d
	OpTracev        Op = 0x2e
	OpTracenz       Op = 0x2f
	OpTrace16       Op = 0x30
	OpInvalid2      Op = 0x31
	OpPick          Op = 0x32
	OpRot           Op = 0x33
	OpPrintf        Op = 0x34
)

// OpInfo describes one opcode as ax.def does.
type OpInfo struct {
	Name     string // name as GDB prints it (e.g. "if_goto")
	ImmBytes int    // bytes of immediate operand following the opcode
	DataSize int    // for ref/const ops: data width in bits, else 0
	Consumed int    // stack entries popped (printf: dynamic, see Validate)
	Produced int    // stack entries pushed
}

// OpTable maps every defined opcode to its description; undefined bytes are absent.
var OpTable = map[Op]OpInfo{
	OpFloat:         {"float", 0, 0, 0, 0},
	OpAdd:           {"add", 0, 0, 2, 1},
	OpSub:           {"sub", 0, 0, 2, 1},
	OpMul:           {"mul", 0, 0, 2, 1},
	OpDivSigned:     {"div_signed", 0, 0, 2, 1},
	OpDivUnsigned:   {"div_unsigned", 0, 0, 2, 1},
	OpRemSigned:     {"rem_signed", 0, 0, 2, 1},
	OpRemUnsigned:   {"rem_unsigned", 0, 0, 2, 1},
	OpLsh:           {"lsh", 0, 0, 2, 1},
	OpRshSigned:     {"rsh_signed", 0, 0, 2, 1},
	OpRshUnsigned:   {"rsh_unsigned", 0, 0, 2, 1},
	OpTrace:         {"trace", 0, 0, 2, 0},
	OpTraceQuick:    {"trace_quick", 1, 0, 1, 1},
	OpLogNot:        {"log_not", 0, 0, 1, 1},
	OpBitAnd:        {"bit_and", 0, 0, 2, 1},
	OpBitOr:         {"bit_or", 0, 0, 2, 1},
	OpBitXor:        {"bit_xor", 0, 0, 2, 1},
	OpBitNot:        {"bit_not", 0, 0, 1, 1},
	OpEqual:         {"equal", 0, 0, 2, 1},
	OpLessSigned:    {"less_signed", 0, 0, 2, 1},
	OpLessUnsigned:  {"less_unsigned", 0, 0, 2, 1},
	OpExt:           {"ext", 1, 0, 1, 1},
	OpRef8:          {"ref8", 0, 8, 1, 1},
	OpRef16:         {"ref16", 0, 16, 1, 1},
	OpRef32:         {"ref32", 0, 32, 1, 1},
	OpRef64:         {"ref64", 0, 64, 1, 1},
	OpRefFloat:      {"ref_float", 0, 0, 1, 1},
	OpRefDouble:     {"ref_double", 0, 0, 1, 1},
	OpRefLongDouble: {"ref_long_double", 0, 0, 1, 1},
	OpLToD:          {"l_to_d", 0, 0, 1, 1},
	OpDToL:          {"d_to_l", 0, 0, 1, 1},
	OpIfGoto:        {"if_goto", 2, 0, 1, 0},
	OpGoto:          {"goto", 2, 0, 0, 0},
	OpConst8:        {"const8", 1, 8, 0, 1},
	OpConst16:       {"const16", 2, 16, 0, 1},
	OpConst32:       {"const32", 4, 32, 0, 1},
	OpConst64:       {"const64", 8, 64, 0, 1},
	OpReg:           {"reg", 2, 0, 0, 1},
	OpEnd:           {"end", 0, 0, 0, 0},
	OpDup:           {"dup", 0, 0, 1, 2},
	OpPop:           {"pop", 0, 0, 1, 0},
	OpZeroExt:       {"zero_ext", 1, 0, 1, 1},
	OpSwap:          {"swap", 0, 0, 2, 2},
	OpGetv:          {"getv", 2, 0, 0, 1},
	OpSetv:          {"setv", 2, 0, 1, 1},
	OpTracev:        {"tracev", 2, 0, 0, 1},
	OpTracenz:       {"tracenz", 0, 0, 2, 0},
	OpTrace16:       {"trace16", 2, 0, 1, 1},
	OpInvalid2:      {"invalid2", 0, 0, 0, 0},
	OpPick:          {"pick", 1, 0, 0, 1},
	OpRot:           {"rot", 0, 0, 3, 3},
	OpPrintf:        {"printf", 0, 0, 0, 0},
}

// String returns the GDB name of the opcode, or a hex form for undefined bytes.
func (o Op) String() string {
	if i, ok := OpTable[o]; ok {
		return i.Name
	}
	return "op_0x" + hexByte(byte(o))
}

func hexByte(b byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}
