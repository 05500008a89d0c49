package agentexpr

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "re-capture testdata/golden with gdb and gdbserver")

// goldenCase is one expression GDB compiles against testdata/prog.c,
// stopped at the start of f(5, -2).
type goldenCase struct {
	Name    string
	Binary  string   // "O0" or "O2"
	Setup   []string // gdb commands to run first (e.g. tvariable)
	Command string   // "maint agent ..." or "maint agent-eval ..." or "maint agent-printf ..."
	// Value is a gdb expression whose value (as a 64-bit long) Eval must
	// return; empty when the result is not meaningful (collection code).
	Value string
	// Blocks are gdb expressions "address, size" of the memory blocks the
	// expression must collect, in order.
	Blocks []string
	// TSVCollects is how many times tracev must record the variable the
	// expression assigns (its number is whatever gdb and gdbserver chose).
	TSVCollects int
	// Printf is a gdb printf argument list whose output the expression's
	// printf must produce.
	Printf string
}

var goldenCases = []goldenCase{
	{Name: "sum_positive_cond", Binary: "O0", Command: "maint agent-eval 2*a+3*b > 0", Value: "2*a+3*b > 0"},
	{Name: "sum_positive_collect", Binary: "O0", Command: "maint agent 2*a+3*b > 0", Blocks: []string{"&a, sizeof(a)", "&b, sizeof(b)"}},
	{Name: "struct_field", Binary: "O0", Command: "maint agent origin.y", Blocks: []string{"&origin.y, sizeof(origin.y)"}},
	{Name: "struct_field_eval", Binary: "O0", Command: "maint agent-eval origin.y", Value: "origin.y"},
	{Name: "array_element", Binary: "O0", Command: "maint agent table[a&7]", Blocks: []string{"&a, sizeof(a)", "&table[a&7], sizeof(table[0])"}},
	{Name: "array_element_eval", Binary: "O0", Command: "maint agent-eval table[a&7]", Value: "table[a&7]"},
	{Name: "pointer_chase", Binary: "O0", Command: "maint agent head.next->value", Blocks: []string{"&head.next, sizeof(head.next)", "&head.next->value, sizeof(head.next->value)"}},
	{Name: "pointer_chase_eval", Binary: "O0", Command: "maint agent-eval head.next->value", Value: "head.next->value"},
	{Name: "rip", Binary: "O0", Command: "maint agent-eval $rip", Value: "$rip"},
	{Name: "string_tracenz", Binary: "O0", Command: "maint agent /s greeting", Blocks: []string{"&greeting, sizeof(greeting)", "greeting, sizeof(\"hello, tracepoint\")"}},
	{Name: "tsv_increment", Binary: "O0", Setup: []string{"tvariable $count"}, Command: "maint agent $count = $count + 1", TSVCollects: 2},
	{Name: "tsv_increment_eval", Binary: "O0", Setup: []string{"tvariable $count"}, Command: "maint agent-eval $count = $count + 1"},
	{Name: "printf", Binary: "O0", Command: `maint agent-printf "%d %s\n", a, greeting`, Printf: `"%d %s\n", a, greeting`},
	{Name: "register_local_O2", Binary: "O2", Command: "maint agent-eval a + b", Value: "a + b"},
	{Name: "register_local_O2_cond", Binary: "O2", Command: "maint agent-eval b < 0 && a > 4", Value: "b < 0 && a > 4"},
}

// goldenTSVStart is the value the fake environment gives $count (TSV 1).
const goldenTSVStart = 41

// golden is one parsed golden file.
type golden struct {
	Name, Binary, Command string
	Value                 *uint64
	Blocks                []block
	Printf                *string
	Listing               string
}

// memRegion is one captured memory range.
type memRegion struct {
	Addr uint64
	Data []byte
}

// goldenEnv is the target state captured at the stop in f.
type goldenEnv struct {
	Regs fakeRegisters
	Mem  []memRegion
}

func TestGoldenCapture(t *testing.T) {
	if !*update {
		t.Skip("run with -update to re-capture golden files from gdb")
	}
	for _, tool := range []string{"gdb", "gdbserver", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	dir := t.TempDir()
	for _, bin := range []string{"O0", "O2"} {
		exe := filepath.Join(dir, "prog_"+bin)
		out, err := exec.Command("gcc", "-g", "-"+bin, "-o", exe, "testdata/prog.c").CombinedOutput()
		if err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
		var cases []goldenCase
		for _, c := range goldenCases {
			if c.Binary == bin {
				cases = append(cases, c)
			}
		}
		captureBinary(t, exe, bin, dir, cases)
		if bin == "O0" {
			captureWire(t, exe, dir)
		}
	}
}

// wireTracepoint is the tracepoint whose QTDP packets TestGoldenWire checks:
// its condition and collect actions are the golden expressions named in
// wireExpressions, in the order gdb sends them.
const wireTracepoint = `tvariable $count
trace f if 2*a+3*b > 0
actions
collect origin.y, table[a&7], head.next->value, $count = $count + 1
end
`

var wireExpressions = []string{"sum_positive_cond", "struct_field", "array_element", "pointer_chase", "tsv_increment"}

// captureWire records the QTDP packets gdb sends for wireTracepoint.
func captureWire(t *testing.T, exe, dir string) {
	script := "set pagination off\nset confirm off\nset sysroot /\n" +
		"target remote | gdbserver - " + exe + "\nbreak main\ncontinue\n" + wireTracepoint +
		"set debug remote 1\ntstart\ntstop\nset debug remote 0\nkill\nquit\n"
	file := filepath.Join(dir, "wire.gdb")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("gdb", "-batch", "-nx", "-x", file, exe).CombinedOutput()
	if err != nil {
		t.Logf("gdb exited with %v", err)
	}
	var golden strings.Builder
	golden.WriteString("# QTDP packets gdb sent for this tracepoint, captured by TestGoldenCapture -update.\n")
	for _, line := range strings.Split(wireTracepoint, "\n") {
		if line != "" {
			golden.WriteString("# " + line + "\n")
		}
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		_, pkt, ok := strings.Cut(line, "Sending packet: $")
		if !ok || !strings.HasPrefix(pkt, "QTDP:") {
			continue
		}
		if i := strings.LastIndexByte(pkt, '#'); i >= 0 {
			pkt = pkt[:i]
		}
		golden.WriteString(pkt + "\n")
		n++
	}
	if n == 0 {
		t.Fatalf("no QTDP packets in gdb output:\n%s", out)
	}
	if err := os.WriteFile(filepath.Join("testdata", "golden", "wire_O0.txt"), []byte(golden.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGoldenWire checks that the bytecode rebuilt from gdb's "maint agent"
// listings is byte for byte what gdb sends in QTDP packets.
func TestGoldenWire(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "golden", "wire_O0.txt"))
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenCapture -update)", err)
	}
	var wire [][]byte
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "QTDP:") {
			continue
		}
		// Every "X<len>,<hex>" in the packet is one expression.
		for _, part := range strings.Split(line, "X")[1:] {
			lenText, rest, ok := strings.Cut(part, ",")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(lenText, 16, 32)
			if err != nil || uint64(len(rest)) < 2*n {
				t.Fatalf("bad X field %q", part)
			}
			e, err := DecodeHex(rest[:2*n])
			if err != nil {
				t.Fatalf("X field %q: %v", part, err)
			}
			if err := Validate(e, Limits{NumRegs: 80}); err != nil {
				t.Fatalf("wire expression %x: %v", e.Code, err)
			}
			wire = append(wire, e.Code)
		}
	}
	if len(wire) != len(wireExpressions) {
		t.Fatalf("%d X expressions on the wire, want %d", len(wire), len(wireExpressions))
	}
	for i, name := range wireExpressions {
		_, e := loadGolden(t, name)
		if !bytes.Equal(e.Code, wire[i]) {
			t.Errorf("%s: listing gives %x, gdb sent %x", name, e.Code, wire[i])
		}
	}
}

// gdbRegNames are amd64 registers in GDB's numbering 0..17.
var gdbRegNames = []string{"rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip", "eflags"}

func captureBinary(t *testing.T, exe, bin, dir string, cases []goldenCase) {
	var s strings.Builder
	s.WriteString("set pagination off\nset confirm off\nset sysroot /\n")
	fmt.Fprintf(&s, "target remote | gdbserver - %s\nbreak f\ncontinue\n", exe)
	setupDone := map[string]bool{}
	for _, c := range cases {
		for _, cmd := range c.Setup {
			if !setupDone[cmd] {
				s.WriteString(cmd + "\n")
				setupDone[cmd] = true
			}
		}
		fmt.Fprintf(&s, "echo @@CASE %s\\n\n%s\necho @@END\\n\n", c.Name, c.Command)
		if c.Value != "" {
			fmt.Fprintf(&s, "printf \"@@VALUE %%lx\\n\", (long)(%s)\n", c.Value)
		}
		for _, b := range c.Blocks {
			addr, size, _ := strings.Cut(b, ", ")
			fmt.Fprintf(&s, "printf \"@@BLOCK %%lx %%lx\\n\", (unsigned long)(%s), (unsigned long)(%s)\n", addr, size)
		}
		if c.Printf != "" {
			fmt.Fprintf(&s, "echo @@TEXT\\n\nprintf %s\necho @@ENDTEXT\\n\n", c.Printf)
		}
	}
	for i, r := range gdbRegNames {
		fmt.Fprintf(&s, "printf \"@@REG %d %%lx\\n\", $%s\n", i, r)
	}
	// Memory regions as gdb expressions without spaces (dump splits on them).
	regions := []struct{ start, end string }{
		{"(char*)$sp-256", "(char*)$sp+512"},
		{"(char*)&origin", "(char*)&origin+sizeof(origin)"},
		{"(char*)&table", "(char*)&table+sizeof(table)"},
		{"(char*)&tail", "(char*)&tail+sizeof(tail)"},
		{"(char*)&head", "(char*)&head+sizeof(head)"},
		{"(char*)&greeting", "(char*)&greeting+sizeof(greeting)"},
		{"(char*)greeting", "(char*)greeting+32"},
	}
	for i, r := range regions {
		file := filepath.Join(dir, fmt.Sprintf("%s_mem%d.bin", bin, i))
		fmt.Fprintf(&s, "printf \"@@MEM %%lx %s\\n\", (unsigned long)(%s)\n", file, r.start)
		fmt.Fprintf(&s, "dump binary memory %s %s %s\n", file, r.start, r.end)
	}
	s.WriteString("kill\nquit\n")
	script := filepath.Join(dir, bin+".gdb")
	if err := os.WriteFile(script, []byte(s.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("gdb", "-batch", "-nx", "-x", script, exe).CombinedOutput()
	if err != nil {
		t.Logf("gdb exited with %v", err)
	}
	lines := strings.Split(string(out), "\n")
	var envText strings.Builder
	fmt.Fprintf(&envText, "# Target state at the breakpoint on f in prog.c built with -%s,\n# captured by TestGoldenCapture -update.\n", bin)
	type captured struct{ meta, listing strings.Builder }
	byName := map[string]*captured{}
	var cur *captured
	inListing, inText := false, false
	var text strings.Builder
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "@@CASE "):
			name := strings.TrimPrefix(line, "@@CASE ")
			cur = &captured{}
			byName[name] = cur
			var c goldenCase
			for _, gc := range cases {
				if gc.Name == name {
					c = gc
				}
			}
			fmt.Fprintf(&cur.meta, "# Captured from gdb and gdbserver by TestGoldenCapture -update; do not edit.\nname: %s\nbinary: %s\ncommand: %s\n", name, bin, c.Command)
			inListing = true
		case line == "@@END":
			inListing = false
		case inListing:
			cur.listing.WriteString(line + "\n")
		case strings.HasPrefix(line, "@@VALUE "):
			fmt.Fprintf(&cur.meta, "value: 0x%s\n", strings.TrimPrefix(line, "@@VALUE "))
		case strings.HasPrefix(line, "@@BLOCK "):
			f := strings.Fields(line)
			fmt.Fprintf(&cur.meta, "block: 0x%s 0x%s\n", f[1], f[2])
		case line == "@@TEXT":
			inText = true
			text.Reset()
		case line == "@@ENDTEXT":
			inText = false
			fmt.Fprintf(&cur.meta, "printf: %q\n", text.String())
		case inText:
			text.WriteString(line + "\n")
		case strings.HasPrefix(line, "@@REG "):
			f := strings.Fields(line)
			fmt.Fprintf(&envText, "reg %s 0x%s\n", f[1], f[2])
		case strings.HasPrefix(line, "@@MEM "):
			f := strings.Fields(line)
			data, err := os.ReadFile(f[2])
			if err != nil {
				t.Fatalf("memory dump: %v\ngdb output:\n%s", err, out)
			}
			fmt.Fprintf(&envText, "mem 0x%s %x\n", f[1], data)
		}
	}
	for _, c := range cases {
		b, ok := byName[c.Name]
		if !ok || !strings.Contains(b.listing.String(), "  end") {
			t.Fatalf("no listing for %s in gdb output:\n%s", c.Name, out)
		}
		text := b.meta.String() + "listing:\n" + b.listing.String()
		if err := os.WriteFile(filepath.Join("testdata", "golden", c.Name+".txt"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join("testdata", "golden", "env_"+bin+".txt"), []byte(envText.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readGolden parses testdata/golden/<name>.txt.
func readGolden(t testing.TB, name string) golden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden", name+".txt"))
	if err != nil {
		t.Fatalf("golden file: %v (run go test -run TestGoldenCapture -update)", err)
	}
	var g golden
	head, listing, ok := strings.Cut(string(data), "listing:\n")
	if !ok {
		t.Fatalf("%s: no listing", name)
	}
	g.Listing = listing
	for _, line := range strings.Split(head, "\n") {
		key, val, ok := strings.Cut(line, ": ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch key {
		case "name":
			g.Name = val
		case "binary":
			g.Binary = val
		case "command":
			g.Command = val
		case "value":
			v, err := strconv.ParseUint(val, 0, 64)
			if err != nil {
				t.Fatalf("%s: value: %v", name, err)
			}
			g.Value = &v
		case "block":
			f := strings.Fields(val)
			a, err1 := strconv.ParseUint(f[0], 0, 64)
			s, err2 := strconv.ParseUint(f[1], 0, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: bad block %q", name, val)
			}
			g.Blocks = append(g.Blocks, block{Addr: a, Size: s, TSV: -1})
		case "printf":
			s, err := strconv.Unquote(val)
			if err != nil {
				t.Fatalf("%s: printf: %v", name, err)
			}
			g.Printf = &s
		}
	}
	return g
}

// readGoldenEnv parses testdata/golden/env_<bin>.txt.
func readGoldenEnv(t testing.TB, bin string) goldenEnv {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "golden", "env_"+bin+".txt"))
	if err != nil {
		t.Fatalf("golden env: %v", err)
	}
	defer f.Close()
	env := goldenEnv{Regs: fakeRegisters{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue
		}
		switch fields[0] {
		case "reg":
			n, err1 := strconv.Atoi(fields[1])
			v, err2 := strconv.ParseUint(fields[2], 0, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("bad reg line %q", sc.Text())
			}
			env.Regs[n] = v
		case "mem":
			a, err1 := strconv.ParseUint(fields[1], 0, 64)
			d, err2 := hex.DecodeString(fields[2])
			if err1 != nil || err2 != nil {
				t.Fatalf("bad mem line %q", sc.Text())
			}
			env.Mem = append(env.Mem, memRegion{Addr: a, Data: d})
		}
	}
	return env
}

func (g goldenEnv) memory() *fakeMemory {
	m := &fakeMemory{regions: map[uint64][]byte{}}
	for _, r := range g.Mem {
		m.regions[r.Addr] = r.Data
	}
	return m
}

// loadGolden parses and validates one golden expression.
func loadGolden(t testing.TB, name string) (golden, *Expr) {
	t.Helper()
	g := readGolden(t, name)
	code, err := ParseGDBListing(g.Listing)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	e, err := Parse(code)
	if err != nil {
		t.Fatalf("%s: Parse: %v", name, err)
	}
	if err := Validate(e, Limits{NumRegs: 80}); err != nil {
		t.Fatalf("%s: Validate: %v\n%s", name, err, Disassemble(e))
	}
	return g, e
}

func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.Name, func(t *testing.T) {
			g, e := loadGolden(t, c.Name)
			if g.Command != c.Command || g.Binary != c.Binary {
				t.Fatalf("golden file is for %q (%s), the case is %q (%s): re-capture", g.Command, g.Binary, c.Command, c.Binary)
			}
			// Our disassembly lists the same offsets and opcodes as gdb's.
			checkDisassemblyMatches(t, e, g.Listing)
			genv := readGoldenEnv(t, g.Binary)
			rec := &recorder{}
			tsv := fakeTSVs{}
			for _, n := range e.TSVsRead {
				tsv[n] = goldenTSVStart
			}
			for range c.TSVCollects {
				g.Blocks = append(g.Blocks, block{TSV: e.TSVsWritten[0]})
			}
			var text strings.Builder
			env := &Env{Mem: genv.memory(), Regs: genv.Regs, TSV: tsv, Collect: rec,
				Out: WriterOutput{W: &text, Mem: genv.memory()}}
			got, err := Eval(e, env)
			if err != nil {
				t.Fatalf("Eval: %v\n%s", err, Disassemble(e))
			}
			if g.Value != nil && got != *g.Value {
				t.Errorf("Eval = %#x, gdb says %#x\n%s", got, *g.Value, Disassemble(e))
			}
			if len(g.Blocks) > 0 || len(rec.blocks) > 0 {
				if !reflect.DeepEqual(rec.blocks, g.Blocks) {
					t.Errorf("collected %v, want %v", rec.blocks, g.Blocks)
				}
			}
			if g.Printf != nil && text.String() != *g.Printf {
				t.Errorf("printf output %q, gdb printed %q", text.String(), *g.Printf)
			}
			if len(e.TSVsWritten) > 0 {
				n := e.TSVsWritten[0]
				if tsv[n] != goldenTSVStart+1 || got != 0 && got != goldenTSVStart+1 {
					t.Errorf("$count = %d, result %d; want %d", tsv[n], got, goldenTSVStart+1)
				}
			}
			// The optimised form behaves the same.
			o, err := Optimize(e)
			if err != nil {
				t.Fatalf("Optimize: %v", err)
			}
			rec2 := &recorder{}
			tsv2 := fakeTSVs{}
			for _, n := range e.TSVsRead {
				tsv2[n] = goldenTSVStart
			}
			env2 := &Env{Mem: genv.memory(), Regs: genv.Regs, TSV: tsv2, Collect: rec2,
				Out: WriterOutput{W: &strings.Builder{}, Mem: genv.memory()}}
			got2, err := Eval(o, env2)
			if err != nil || got2 != got || !reflect.DeepEqual(rec2.blocks, rec.blocks) {
				t.Errorf("optimised: %#x %v %v, original %#x %v\n%s", got2, err, rec2.blocks, got, rec.blocks, Explain(e))
			}
		})
	}
}

// checkDisassemblyMatches compares offsets and names with gdb's listing.
func checkDisassemblyMatches(t *testing.T, e *Expr, listing string) {
	t.Helper()
	var gdbLines []string
	for _, l := range strings.Split(listing, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] == "Scope:" || f[0] == "Reg" {
			continue
		}
		gdbLines = append(gdbLines, f[0]+" "+f[1])
	}
	var ours []string
	for _, l := range strings.Split(strings.TrimSpace(Disassemble(e)), "\n") {
		f := strings.Fields(l)
		ours = append(ours, f[0]+" "+f[1])
	}
	if !reflect.DeepEqual(ours, gdbLines) {
		t.Errorf("disassembly %v, gdb listing %v", ours, gdbLines)
	}
}

func BenchmarkEval(b *testing.B) {
	for _, c := range goldenCases {
		b.Run(c.Name, func(b *testing.B) {
			_, e := loadGolden(b, c.Name)
			genv := readGoldenEnv(b, c.Binary)
			tsv := fakeTSVs{}
			for _, n := range e.TSVsRead {
				tsv[n] = goldenTSVStart
			}
			env := &Env{Mem: genv.memory(), Regs: genv.Regs, TSV: tsv,
				Collect: &discardCollector{}, Out: discardOutput{}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Eval(e, env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type discardCollector struct{}

func (discardCollector) CollectMemory(addr, size uint64) error { return nil }
func (discardCollector) CollectTSV(num int) error              { return nil }

type discardOutput struct{}

func (discardOutput) Printf(format string, args []uint64) error { return nil }
