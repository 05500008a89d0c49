package tdesc

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestLayoutOffsets(t *testing.T) {
	tests := []struct {
		avx      bool
		numRegs  int
		size     int
		lastName string
	}{
		{avx: false, numRegs: NumNoAVX, size: 560, lastName: "gs_base"},
		{avx: true, numRegs: NumAVX, size: 816, lastName: "ymm15h"},
	}
	for _, tt := range tests {
		l := AMD64Linux(tt.avx)
		if len(l.Regs) != tt.numRegs {
			t.Errorf("avx=%v: %d registers, want %d", tt.avx, len(l.Regs), tt.numRegs)
		}
		if l.HasAVX != tt.avx {
			t.Errorf("avx=%v: HasAVX=%v", tt.avx, l.HasAVX)
		}
		off := 0
		seen := map[string]bool{}
		for i, r := range l.Regs {
			if r.Num != i {
				t.Errorf("avx=%v: register %s has number %d at index %d", tt.avx, r.Name, r.Num, i)
			}
			if r.Offset != off {
				t.Errorf("avx=%v: register %s at offset %d, want %d", tt.avx, r.Name, r.Offset, off)
			}
			if seen[r.Name] {
				t.Errorf("avx=%v: duplicate register name %s", tt.avx, r.Name)
			}
			seen[r.Name] = true
			off += r.Size
		}
		if off != l.Size || l.Size != tt.size {
			t.Errorf("avx=%v: sizes sum to %d, Layout.Size %d, want %d", tt.avx, off, l.Size, tt.size)
		}
		if got := l.Regs[len(l.Regs)-1].Name; got != tt.lastName {
			t.Errorf("avx=%v: last register %s, want %s", tt.avx, got, tt.lastName)
		}
	}
}

func TestNamedNumbers(t *testing.T) {
	l := AMD64Linux(true)
	tests := []struct {
		name string
		num  int
		size int
	}{
		{"rax", RAX, 8}, {"rsp", RSP, 8}, {"rip", RIP, 8}, {"eflags", EFLAGS, 4},
		{"cs", CS, 4}, {"gs", GS, 4}, {"st0", ST0, 10}, {"fctrl", FCTRL, 4},
		{"fop", FOP, 4}, {"xmm0", XMM0, 16}, {"mxcsr", MXCSR, 4},
		{"orig_rax", ORIGRAX, 8}, {"fs_base", FSBASE, 8}, {"gs_base", GSBASE, 8},
		{"ymm0h", YMM0H, 16}, {"r15", R15, 8},
	}
	for _, tt := range tests {
		r, ok := l.Find(tt.name)
		if !ok {
			t.Errorf("Find(%q) failed", tt.name)
			continue
		}
		if r.Num != tt.num || r.Size != tt.size {
			t.Errorf("%s: num %d size %d, want %d %d", tt.name, r.Num, r.Size, tt.num, tt.size)
		}
	}
	if _, ok := l.Find("ymm0h"); !ok {
		t.Error("AVX layout lacks ymm0h")
	}
	if _, ok := AMD64Linux(false).Find("ymm0h"); ok {
		t.Error("non-AVX layout has ymm0h")
	}
	if _, ok := l.Find("nosuchreg"); ok {
		t.Error("Find of an unknown name succeeded")
	}
	manual := &Layout{Regs: []Reg{{Name: "pc", Num: 0, Size: 8}}, Size: 8}
	if r, ok := manual.Find("pc"); !ok || r.Size != 8 {
		t.Errorf("Find in a hand-built layout: %+v %v", r, ok)
	}
	if _, ok := manual.Find("sp"); ok {
		t.Error("Find of a missing name in a hand-built layout succeeded")
	}
}

func TestRegsAccess(t *testing.T) {
	l := AMD64Linux(false)
	r := l.NewRegs()
	if err := r.SetUint64(RIP, 0x401000); err != nil {
		t.Fatal(err)
	}
	if got := r.Uint64(RIP); got != 0x401000 {
		t.Errorf("rip = %#x", got)
	}
	if !r.Valid[RIP] || r.Valid[RAX] {
		t.Errorf("validity: rip %v rax %v", r.Valid[RIP], r.Valid[RAX])
	}
	if got := r.Data[128:136]; !bytes.Equal(got, []byte{0, 0x10, 0x40, 0, 0, 0, 0, 0}) {
		t.Errorf("rip bytes at offset 128: % x", got)
	}
	if err := r.SetUint64(EFLAGS, 0x1_0000_0246); err != nil {
		t.Fatal(err)
	}
	if got := r.Uint64(EFLAGS); got != 0x246 {
		t.Errorf("eflags truncated to %#x, want 0x246", got)
	}
	errCases := []struct {
		num int
		v   []byte
	}{
		{-1, make([]byte, 8)}, {NumNoAVX, make([]byte, 16)}, {RAX, make([]byte, 4)}, {XMM0, make([]byte, 8)},
	}
	for _, c := range errCases {
		if err := r.Set(c.num, c.v); err == nil {
			t.Errorf("Set(%d, %d bytes) succeeded", c.num, len(c.v))
		}
	}
	if r.Get(1000) != nil || r.Get(-3) != nil {
		t.Error("Get of a bad number returned bytes")
	}
	if r.Uint64(XMM0) != 0 {
		t.Error("Uint64 of a 16-byte register not zero")
	}
	c := r.Clone()
	c.Get(RAX)[0] = 7
	if r.Get(RAX)[0] == 7 {
		t.Error("Clone shares data")
	}
}

// xmlNode is a generic element tree for checking documents.
type xmlNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []xmlNode  `xml:",any"`
	Text    string     `xml:",chardata"`
}

func (n xmlNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func TestXMLWellFormed(t *testing.T) {
	for _, avx := range []bool{false, true} {
		l := AMD64Linux(avx)
		target, ok := l.XML("target.xml")
		if !ok {
			t.Fatal("no target.xml")
		}
		var root xmlNode
		if err := xml.Unmarshal(target, &root); err != nil {
			t.Fatalf("target.xml: %v", err)
		}
		if root.XMLName.Local != "target" {
			t.Fatalf("root element %q", root.XMLName.Local)
		}
		var arch, osabi string
		var includes []string
		for _, n := range root.Nodes {
			switch n.XMLName.Local {
			case "architecture":
				arch = n.Text
			case "osabi":
				osabi = n.Text
			case "include":
				includes = append(includes, n.attr("href"))
			}
		}
		if arch != "i386:x86-64" || osabi != "GNU/Linux" {
			t.Errorf("architecture %q osabi %q", arch, osabi)
		}
		// Every register appears exactly once across the features, in
		// order, with its size in bits.
		var regs []xmlNode
		for _, inc := range includes {
			doc, ok := l.XML(inc)
			if !ok {
				t.Fatalf("included %q not served", inc)
			}
			var f xmlNode
			if err := xml.Unmarshal(doc, &f); err != nil {
				t.Fatalf("%s: %v", inc, err)
			}
			for _, n := range f.Nodes {
				if n.XMLName.Local == "reg" {
					regs = append(regs, n)
				}
			}
		}
		if len(regs) != len(l.Regs) {
			t.Fatalf("avx=%v: %d reg elements, %d registers", avx, len(regs), len(l.Regs))
		}
		for i, n := range regs {
			r := l.Regs[i]
			if n.attr("name") != r.Name || n.attr("bitsize") != strconv.Itoa(8*r.Size) || n.attr("type") != r.Type {
				t.Errorf("reg %d: xml %v, layout %+v", i, n.Attrs, r)
			}
			if rn := n.attr("regnum"); rn != "" && rn != strconv.Itoa(i) {
				t.Errorf("reg %s: regnum %s, want %d", r.Name, rn, i)
			}
		}
		if _, ok := l.XML("64bit-avx.xml"); ok != avx {
			t.Errorf("avx=%v: 64bit-avx.xml served: %v", avx, ok)
		}
		if _, ok := l.XML("nonsense.xml"); ok {
			t.Error("unknown annex served")
		}
		if docs := XML(avx); len(docs) != len(includes)+1 {
			t.Errorf("XML(%v) has %d documents, want %d", avx, len(docs), len(includes)+1)
		}
	}
}

// gdbRegister is one line of "maint print remote-registers".
type gdbRegister struct {
	name           string
	size           int
	remote, offset int
}

// gdbRemoteRegisters runs gdb in batch mode with the given commands and
// parses the remote-registers table it prints.
func gdbRemoteRegisters(t *testing.T, args ...string) []gdbRegister {
	t.Helper()
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		t.Skip("gdb not installed")
	}
	cmd := exec.Command(gdb, append([]string{"-nx", "-batch"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("gdb: %v", err)
		}
	}
	var regs []gdbRegister
	sc := bufio.NewScanner(bytes.NewReader(out))
	header := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "Name" {
			header = true
			continue
		}
		if !header || len(f) != 8 {
			continue
		}
		size, err1 := strconv.Atoi(f[4])
		rnum, err2 := strconv.Atoi(f[6])
		off, err3 := strconv.Atoi(f[7])
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		regs = append(regs, gdbRegister{name: f[0], size: size, remote: rnum, offset: off})
	}
	if len(regs) == 0 {
		t.Fatalf("no register table in gdb output:\n%s", out)
	}
	return regs
}

func compareWithGDB(t *testing.T, l *Layout, got []gdbRegister) {
	t.Helper()
	// A CPU with more features (AVX-512, PKU) adds registers after ours;
	// only the ones numbered inside our layout must match.
	var ours []gdbRegister
	for _, g := range got {
		if g.remote < len(l.Regs) {
			ours = append(ours, g)
		}
	}
	if len(ours) != len(l.Regs) {
		t.Errorf("gdb has %d remote registers numbered below %d, layout %d", len(ours), len(l.Regs), len(l.Regs))
	}
	for _, g := range ours {
		r, ok := l.Find(g.name)
		if !ok {
			t.Errorf("gdb register %s missing from layout", g.name)
			continue
		}
		if r.Num != g.remote || r.Offset != g.offset || r.Size != g.size {
			t.Errorf("%s: layout num %d off %d size %d; gdb num %d off %d size %d",
				g.name, r.Num, r.Offset, r.Size, g.remote, g.offset, g.size)
		}
	}
}

func FuzzRegsSet(f *testing.F) {
	f.Add(RIP, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(XMM0, make([]byte, 16))
	f.Add(-1, []byte{})
	f.Add(1000, []byte{1})
	f.Fuzz(func(t *testing.T, num int, v []byte) {
		for _, avx := range []bool{false, true} {
			r := AMD64Linux(avx).NewRegs()
			err := r.Set(num, v)
			if err == nil && !bytes.Equal(r.Get(num), v) {
				t.Fatalf("Set(%d) then Get differ", num)
			}
			_ = r.Uint64(num)
		}
	})
}
