package frames

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestStatusLine(t *testing.T) {
	tests := []struct {
		body string
		want string
	}{
		{ // captured from gdbserver and gdb's tsave
			"0;tstop::0;tframes:6;tcreated:6;tfree:4fee91;tsize:500000;circular:0;disconn:0;starttime:1080308c5;stoptime:108031fb8;username:;notes::",
			"status 0;tstop::0;tframes:6;tcreated:6;tfree:4fee91;tsize:500000;starttime:1080308c5;stoptime:108031fb8;notes:;username:",
		},
		{
			"1;tnotrun:0;tframes:0;tcreated:0;tfree:500000;tsize:500000;circular:1;disconn:1",
			"status 1;tnotrun:0;tframes:0;tcreated:0;tfree:500000;tsize:500000;disconn:1;circular:1",
		},
		{"0;tpasscount:3;tframes:2", "status 0;tpasscount:3;tframes:2"},
		{"0;terror:6f6f70:2", "status 0;terror:6f6f70:2"},
		{"0;tstop:6869:0", "status 0;tstop:6869:0"},
		{"0;tstop:0", "status 0;tstop::0"}, // old style, no description
		{"0;tfull:0;tframes:ffffffff", "status 0;tfull:0"},
		{"0;tdisconnected:0;tframes:3", "status 0;tdisconnected:0;tframes:3"},
		{"0", "status 0;tunknown:0"},
		{"0;foo:1;tframes:3", "status 0;tunknown:0;tframes:3"},
		{"0;notes:6869;username:6a6f65", "status 0;tunknown:0;notes:6869;username:6a6f65"},
		{"0;notes:68006a", "status 0;tunknown:0;notes:68"}, // C string: cut at NUL
		// gdb steps over one junk byte as if it were the ';', then sees
		// the key ";tcreated", which it does not know: the rest is lost.
		{"0;tframes:3x;tcreated:4", "status 0;tunknown:0;tframes:3"},
		{"0;zz:1;tcreated:4", "status 0;tunknown:0;tcreated:4"},
	}
	for _, tc := range tests {
		ts, err := parseTraceStatus(tc.body)
		if err != nil {
			t.Errorf("parseTraceStatus(%q): %v", tc.body, err)
			continue
		}
		if got := ts.statusLine(); got != tc.want {
			t.Errorf("status %q\n got %q\nwant %q", tc.body, got, tc.want)
		}
	}
	for _, bad := range []string{"", "0;tframes", "0;notes:zz", "0;terror:6f6f"} {
		if _, err := parseTraceStatus(bad); err == nil {
			t.Errorf("parseTraceStatus(%q) succeeded, want an error", bad)
		}
	}
}

func TestTSVLines(t *testing.T) {
	tests := []struct {
		name    string
		replies []string
		want    []string
	}{
		{"gdbserver order reversed", []string{"2:7:0:68697473", "1:0:1:74"},
			[]string{"tsv 1:0:1:74", "tsv 2:7:0:68697473"}},
		{"negative initial value", []string{"3:fffffffffffffffe:0:"},
			[]string{"tsv 3:fffffffffffffffe:0:"}},
		{"duplicate merges in place", []string{"1:5:0:61", "2:0:0:", "1:6:0:62"},
			[]string{"tsv 2:0:0:", "tsv 1:6:0:62"}},
		{"leading zeros dropped", []string{"01:0000000000000007:0:41"},
			[]string{"tsv 1:7:0:41"}},
		{"list ends at l", []string{"1:0:0:", "l", "2:0:0:"},
			[]string{"tsv 1:0:0:"}},
	}
	for _, tc := range tests {
		list, err := parseTSVs(tc.replies)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, v := range list {
			got = append(got, v.line())
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestTracepointLines(t *testing.T) {
	tests := []struct {
		name    string
		replies []string
		status  string
		want    []string
	}{
		{
			name:    "fast with condition, gdb drops the original size",
			replies: []string{"T1:400000:E:1:2:F5:X3,220001"},
			status:  "V3:10",
			want:    []string{"tp T1:400000:E:1:2:F0:X3,220001", "tp V1:400000:3:10"},
		},
		{
			name:    "static and disabled",
			replies: []string{"T6:30:D:0:0:S"},
			want:    []string{"tp T6:30:D:0:0", "tp V6:30:0:0"},
		},
		{
			name:    "action without a T piece",
			replies: []string{"A5:20:R01"},
			status:  "E01",
			want:    []string{"tp T5:20:D:0:0", "tp A5:20:R01", "tp V5:20:0:0"},
		},
		{
			name: "sources reordered at, cond, cmd; step actions after actions",
			replies: []string{
				"T2:10:E:3:0",
				"S2:10:M0,8",
				"Z2:10:cmd:0:3:616263",
				"A2:10:R01",
				"Z2:10:cond:0:1:78",
				"Z2:10:at:0:1:66",
			},
			status: "V1:2",
			want: []string{
				"tp T2:10:E:3:0",
				"tp A2:10:R01",
				"tp S2:10:M0,8",
				"tp Z2:10:at:0:1:66",
				"tp Z2:10:cond:0:1:78",
				"tp Z2:10:cmd:0:3:616263",
				"tp V2:10:1:2",
			},
		},
		{
			name:    "two tracepoints listed newest first",
			replies: []string{"T1:10:E:0:0", "T2:20:E:0:0", "V1:10:5:5"},
			want:    []string{"tp T2:20:E:0:0", "tp V2:20:0:0", "tp T1:10:E:0:0", "tp V1:10:0:0"},
		},
	}
	for _, tc := range tests {
		list, err := parseTracepoints(tc.replies)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, tp := range list {
			tp.setStatus(tc.status)
			lines, err := tp.lines()
			if err != nil {
				t.Fatalf("%s: lines: %v", tc.name, err)
			}
			got = append(got, lines...)
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
	// A source too long for gdb's 2000-byte buffer makes tsave fail.
	long := "Z1:10:cmd:0:3e8:" + strings.Repeat("41", 1000)
	list, err := parseTracepoints([]string{long})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := list[0].lines(); err == nil {
		t.Error("1000-byte source string accepted; gdb's encode_source_string refuses it")
	}
}

func TestTDescLines(t *testing.T) {
	tests := []struct{ xml, want string }{
		{"", ""},
		{"<a/>", "tdesc <a/>\n"},
		{"<a>\n</a>\n", "tdesc <a>\ntdesc </a>\n"},
		{"a\n\nb", "tdesc a\ntdesc \ntdesc b\n"},
	}
	for _, tc := range tests {
		var buf bytes.Buffer
		writeTDescLines(&buf, tc.xml)
		if buf.String() != tc.want {
			t.Errorf("tdesc %q: got %q, want %q", tc.xml, buf.String(), tc.want)
		}
	}
}

func TestWriteReadTFileRoundTrip(t *testing.T) {
	b := NewBuffer(1 << 20)
	for i := 0; i < 20; i++ {
		f := b.NewFrame(1 + i%3)
		if i%2 == 0 {
			f.AddRegisters(regs(64, 16, uint64(0x400000+i), byte(i)))
		}
		f.AddMemory(uint64(0x600000+i*8), bytes.Repeat([]byte{byte(i)}, 8+i))
		f.AddTSV(2, int64(i*i))
		if i > 0 { // the first frame's time unknown
			f.SetTime(1_795_000_000_000_000_000 + int64(i)*1000)
		}
		if err := b.Commit(f); err != nil {
			t.Fatal(err)
		}
	}
	h := TFileHeader{
		RegBlockSize: 64,
		TDesc:        "<?xml version=\"1.0\"?>\n<target>\n</target>\n",
		Status:       "0;tstop::0;tframes:14;tcreated:14;tfree:ff00;tsize:100000",
		TSVs:         []string{"2:0:0:78"},
		Tracepoints:  []string{"T1:400000:E:0:0", "A1:400000:R01", "T2:400010:E:0:0", "T3:400020:D:0:0"},
	}
	var file bytes.Buffer
	if err := WriteTFile(&file, h, b); err != nil {
		t.Fatalf("WriteTFile: %v", err)
	}
	tf, err := ReadTFile(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatalf("ReadTFile: %v", err)
	}
	if tf.RegBlockSize != 64 || tf.TDesc != h.TDesc || len(tf.Unknown) != 0 {
		t.Errorf("header: regsize %d tdesc %q unknown %q", tf.RegBlockSize, tf.TDesc, tf.Unknown)
	}
	if want := "0;tstop::0;tframes:14;tcreated:14;tfree:ff00;tsize:100000"; tf.Status != want {
		t.Errorf("status %q, want %q", tf.Status, want)
	}
	if len(tf.TSVs) != 1 || tf.TSVs[0] != "2:0:0:78" {
		t.Errorf("tsvs %q", tf.TSVs)
	}
	if len(tf.Tracepoints) != 7 || tf.Tracepoints[0] != "T3:400020:D:0:0" {
		t.Errorf("tracepoints %q", tf.Tracepoints)
	}
	if len(tf.Frames) != b.Count() {
		t.Fatalf("read %d frames, buffer has %d", len(tf.Frames), b.Count())
	}
	for i, got := range tf.Frames {
		want, _ := b.Frame(i)
		if got.Num != i || got.TPNum != want.TPNum || !bytes.Equal(got.Raw, want.Raw) || got.Time != want.Time {
			t.Errorf("frame %d differs: num %d tp %d/%d time %d/%d", i, got.Num, got.TPNum, want.TPNum, got.Time, want.Time)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("frame %d: %v", i, err)
		}
		gpc, gok := got.PC(16)
		wpc, wok := want.PC(16)
		if gpc != wpc || gok != wok {
			t.Errorf("frame %d: PC %#x,%v want %#x,%v", i, gpc, gok, wpc, wok)
		}
	}
}

func TestReadTFileErrors(t *testing.T) {
	valid := TFileMagic + "R 10\n\n" + "\x01\x00\x00\x00\x00\x00" + "\x00\x00\x00\x00"
	if tf, err := ReadTFile(strings.NewReader(valid)); err != nil || len(tf.Frames) != 1 {
		t.Fatalf("valid file: %v", err)
	}
	for _, line := range []string{"R 10", "R 0x10", "R  10", "R 10zz"} {
		tf, err := ReadTFile(strings.NewReader(TFileMagic + line + "\n\n\x00\x00"))
		if err != nil || tf.RegBlockSize != 16 {
			t.Errorf("%q: register block size %v, %v; want 16", line, tf, err)
		}
	}
	tests := []struct {
		name string
		data string
	}{
		{"empty", ""},
		{"register size not hex", TFileMagic + "R zz\n\n\x00\x00"},
		{"bad magic", "\x7fTRACE1\nR 10\n\n\x00\x00"},
		{"no register size", TFileMagic + "status 0\n\n\x00\x00"},
		{"unterminated definitions", TFileMagic + "R 10\n"},
		{"long line", TFileMagic + "tp " + strings.Repeat("x", 1000) + "\nR 10\n\n\x00\x00"},
		{"no end marker", TFileMagic + "R 10\n\n"},
		{"truncated header", TFileMagic + "R 10\n\n\x01\x00\x05"},
		{"truncated data", TFileMagic + "R 10\n\n\x01\x00\x05\x00\x00\x00ab"},
		{"lying size", TFileMagic + "R 10\n\n\x01\x00\xff\xff\xff\xffab"},
	}
	for _, tc := range tests {
		if _, err := ReadTFile(strings.NewReader(tc.data)); err == nil {
			t.Errorf("%s: ReadTFile succeeded", tc.name)
		}
	}
	_, err := ReadTFile(strings.NewReader(TFileMagic + "R 10\n\n\x01\x00\x05\x00\x00\x00ab"))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated frame: err = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestWriteTFileErrors(t *testing.T) {
	b := NewBuffer(1024)
	var sink bytes.Buffer
	if err := WriteTFile(&sink, TFileHeader{RegBlockSize: 8, Status: ""}, b); err == nil {
		t.Error("empty status accepted")
	}
	if err := WriteTFile(&sink, TFileHeader{RegBlockSize: 8, Status: "0"}, nil); err == nil {
		t.Error("nil buffer accepted")
	}
	if err := WriteTFile(failWriter{}, TFileHeader{RegBlockSize: 8, Status: "0"}, b); err == nil {
		t.Error("write error not reported")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// The frame-times section is read only when it matches the frames; gdb's
// own files (none) and damaged sections leave the times unknown.
func TestReadTFileTimes(t *testing.T) {
	b := NewBuffer(1 << 16)
	for i := range 3 {
		f := b.NewFrame(1)
		f.SetTime(int64(100 + i))
		if err := b.Commit(f); err != nil {
			t.Fatal(err)
		}
	}
	var file bytes.Buffer
	if err := WriteTFile(&file, TFileHeader{RegBlockSize: 8, Status: "0"}, b); err != nil {
		t.Fatal(err)
	}
	whole := file.Bytes()
	cut := bytes.Index(whole, []byte(TimesMagic))
	if cut < 0 {
		t.Fatal("no frame-times section")
	}
	cases := []struct {
		name string
		data []byte
		want []int64
	}{
		{"whole", whole, []int64{100, 101, 102}},
		{"without the section", whole[:cut], []int64{0, 0, 0}},
		{"truncated section", whole[:len(whole)-1], []int64{0, 0, 0}},
		{"wrong count", append(append([]byte(nil), whole[:cut+len(TimesMagic)]...), append([]byte{2, 0, 0, 0}, whole[cut+len(TimesMagic)+4:]...)...), []int64{0, 0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tf, err := ReadTFile(bytes.NewReader(c.data))
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, f := range tf.Frames {
				got = append(got, f.Time)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("times %v, want %v", got, c.want)
			}
		})
	}
}
