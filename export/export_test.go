package export

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gotpstub/frames"
	"gotpstub/tdesc"
)

// sampleFile writes a trace file like the stub's QTSave: tracepoint 1
// (fast, at "*0x401000") with registers and memory, tracepoint 2 (at
// "demo.c:30") collecting $trace_timestamp and $n, frames committed out
// of time order (as drains may), the last one without a time.
func sampleFile(t testing.TB, withTimes bool) []byte {
	t.Helper()
	layout := tdesc.AMD64Linux(false)
	b := frames.NewBuffer(1 << 20)
	commit := func(tp int, when int64, build func(f *frames.FrameBuilder)) {
		f := b.NewFrame(tp)
		if withTimes {
			f.SetTime(when)
		}
		build(f)
		if err := b.Commit(f); err != nil {
			t.Fatal(err)
		}
	}
	r := layout.NewRegs()
	_ = r.SetUint64(tdesc.RIP, 0x401000)
	_ = r.SetUint64(tdesc.RDI, 42)
	commit(1, 2000, func(f *frames.FrameBuilder) {
		f.AddRegisters(r.Data)
		f.AddMemory(0x404028, []byte{1, 2, 3, 4})
	})
	commit(2, 1000, func(f *frames.FrameBuilder) {
		f.AddTSV(1, 7) // $trace_timestamp, microseconds
		f.AddTSV(2, -5)
	})
	commit(2, 0, func(f *frames.FrameBuilder) {})
	h := frames.TFileHeader{
		RegBlockSize: layout.Size,
		Status:       "0;tstop::0;tframes:3;tcreated:3;tfree:ff00;tsize:100000",
		TSVs:         []string{"1:0:1:74726163655f74696d657374616d70", "2:0:0:6e"},
		Tracepoints: []string{"T1:401000:E:0:0:F0", "A1:401000:R03", "Z1:401000:at:0:9:2a3078343031303030",
			"T2:401100:E:0:0", "Z2:401100:at:0:9:64656d6f2e633a3330"},
	}
	var file bytes.Buffer
	if err := frames.WriteTFile(&file, h, b); err != nil {
		t.Fatal(err)
	}
	return file.Bytes()
}

func TestWriteJSON(t *testing.T) {
	for _, withTimes := range []bool{true, false} {
		tr, err := Read(bytes.NewReader(sampleFile(t, withTimes)))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := tr.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
		var got []map[string]any
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			got = append(got, m)
		}
		if len(got) != 3 {
			t.Fatalf("%d lines, want 3", len(got))
		}
		f0, f1, f2 := got[0], got[1], got[2]
		regs, _ := f0["registers"].(map[string]any)
		if f0["tracepoint"] != 1.0 || f0["location"] != "*0x401000" || f0["fast"] != true || f0["pc"] != "0x401000" ||
			regs["rdi"] != "0x2a" || regs["rip"] != "0x401000" {
			t.Errorf("frame 0: %v", f0)
		}
		mem, _ := f0["memory"].([]any)
		if len(mem) != 1 || mem[0].(map[string]any)["bytes"] != "01020304" || mem[0].(map[string]any)["addr"] != "0x404028" {
			t.Errorf("frame 0 memory: %v", f0["memory"])
		}
		tsvs, _ := f1["tsvs"].(map[string]any)
		if f1["location"] != "demo.c:30" || f1["pc"] != "0x401100" || tsvs["$n"] != -5.0 || tsvs["$trace_timestamp"] != 7.0 {
			t.Errorf("frame 1: %v", f1)
		}
		// Times: the file's section, else $trace_timestamp (µs), else null.
		want := []any{2000.0, 1000.0, nil}
		if !withTimes {
			want = []any{nil, 7000.0, nil}
		}
		for i, m := range got {
			if m["time_ns"] != want[i] {
				t.Errorf("withTimes=%v frame %d time_ns %v, want %v", withTimes, i, m["time_ns"], want[i])
			}
		}
		if _, ok := f2["registers"]; ok {
			t.Errorf("frame 2 has registers: %v", f2)
		}
	}
}

// The CTF trace reads back with babeltrace2 (when installed): events in
// time order, with their fields.
func TestWriteCTF(t *testing.T) {
	tr, err := Read(bytes.NewReader(sampleFile(t, true)))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ctf")
	if err := tr.WriteCTF(dir); err != nil {
		t.Fatal(err)
	}
	meta, err := os.ReadFile(filepath.Join(dir, "metadata"))
	if err != nil || !strings.HasPrefix(string(meta), "/* CTF 1.8 */") {
		t.Fatalf("metadata: %v %q", err, meta)
	}
	bt, err := exec.LookPath("babeltrace2")
	if err != nil {
		t.Skip("babeltrace2 is not installed (apt install babeltrace2): the stream is not read back")
	}
	out, err := exec.Command(bt, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("babeltrace2: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("babeltrace2 printed %d events, want 3:\n%s", len(lines), out)
	}
	for i, want := range []string{
		"frame: { tracepoint = 2, frame = 2,", // no time: 0, first
		"frame: { tracepoint = 2, frame = 1, pc = 0x401100, location = \"demo.c:30\"",
		"frame_regs: { tracepoint = 1, frame = 0, pc = 0x401000, location = \"*0x401000\", n_memory = 1, memory = [ [0] = { addr = 0x404028, length = 4, bytes = [ [0] = 1, [1] = 2, [2] = 3, [3] = 4 ] } ]",
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("event %d: %s\nwant it to contain %s", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[1], "tsvs = [ [0] = { num = 1, value = 7 }, [1] = { num = 2, value = -5 } ]") ||
		!strings.Contains(lines[2], "rdi = 0x2A") {
		t.Errorf("fields:\n%s", out)
	}
}

func FuzzRead(f *testing.F) {
	f.Add(sampleFile(f, true))
	f.Add([]byte(frames.TFileMagic + "R 10\ntp T1:zz\ntp Z1:401000:at:0:3:6\ntsv 1:0\n\n\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := tr.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
		if err := tr.WriteCTF(filepath.Join(t.TempDir(), "ctf")); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.WritePerfetto(&out); err != nil {
			t.Fatal(err)
		}
	})
}
