package agentexpr

import "fmt"

func ExampleExplain() {
	e, err := Parse(MustAssemble("const32 7; const8 0xfe; ext 8; add; zero_ext 64; reg 6; ref32; zero_ext 32; add; end"))
	if err != nil {
		panic(err)
	}
	fmt.Print(Explain(e))
	// Output:
	// bytecode (20 bytes, 10 instructions):
	//     0  const32  7
	//     5  const8  254 (0xfe)
	//     7  ext  8
	//     9  add
	//    10  zero_ext  64
	//    12  reg  6
	//    15  ref32
	//    16  zero_ext  32
	//    18  add
	//    19  end
	// max stack depth 2, registers [6]
	// optimised (8 bytes, 5 instructions): 2205260006190227
	//     0  const8  5
	//     2  reg  6
	//     5  ref32
	//     6  add
	//     7  end
}
