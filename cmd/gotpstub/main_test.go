package main

import (
	"gotpstub/fasttp"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gotpstub/inferior"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args    []string
		want    options
		wantErr string
	}{
		{args: []string{":2345", "./prog", "a", "--b"}, want: options{comm: ":2345", rest: []string{"./prog", "a", "--b"}, disableRandomization: true}},
		{args: []string{"--once", "localhost:2346", "/abs/prog"}, want: options{once: true, comm: "localhost:2346", rest: []string{"/abs/prog"}, disableRandomization: true}},
		// The testsuite puts --attach after COMM.
		{args: []string{"--once", "localhost:2346", "--attach", "123"}, want: options{once: true, attach: true, comm: "localhost:2346", rest: []string{"123"}, disableRandomization: true}},
		{args: []string{"--attach", ":1", "77"}, want: options{attach: true, comm: ":1", rest: []string{"77"}, disableRandomization: true}},
		{args: []string{"--once", "--multi", "--disable-packet=T,Tthread", "localhost:2346"}, want: options{once: true, multi: true, disabled: []string{"T", "Tthread"}, comm: "localhost:2346", rest: []string{}, disableRandomization: true}},
		{args: []string{"--wrapper", "env", "X=1", "--", ":1", "prog"}, want: options{wrapper: []string{"env", "X=1"}, comm: ":1", rest: []string{"prog"}, disableRandomization: true}},
		{args: []string{"--no-disable-randomization", "--remote-debug", "--debug", "--debug-file=/tmp/x", "stdio", "p"}, want: options{remoteDebug: true, debug: true, debugFile: "/tmp/x", comm: "stdio", rest: []string{"p"}}},
		{args: []string{"--timing", ":1", "p"}, want: options{timing: true, disableRandomization: true, comm: ":1", rest: []string{"p"}}},
		{args: []string{"--kill-on-stub-exit", ":1", "p"}, want: options{killOnStubExit: true, comm: ":1", rest: []string{"p"}, disableRandomization: true}},
		{args: []string{"--trace-ring-size=0x100000", ":1", "p"}, want: options{traceRingSize: 1 << 20, comm: ":1", rest: []string{"p"}, disableRandomization: true}},
		{args: []string{"--no-file-access", "--no-run-attach", "--no-tsave", "--tsave-dir=/tmp", "--multi", ":1"}, want: options{noFileAccess: true, noRunAttach: true, noSave: true, saveDir: "/tmp", multi: true, comm: ":1", rest: []string{}, disableRandomization: true}},
		{args: []string{"--ftrace-shapes=plain,int3", ":1", "p"}, want: options{ftraceShapes: map[fasttp.Shape]bool{fasttp.ShapePlain: true, fasttp.ShapeInt3: true}, comm: ":1", rest: []string{"p"}, disableRandomization: true}},
		{args: []string{"--ftrace-shapes=plain,wobbly", ":1", "p"}, wantErr: "unknown jump shape"},
		{args: []string{"--tsave-dir=/nonexistent/dir", ":1", "p"}, wantErr: "not a directory"},
		{args: []string{"--thread-lane-ahead=0", ":1", "p"}, want: options{threadLaneAhead: new(uint64(0)), comm: ":1", rest: []string{"p"}, disableRandomization: true}},
		{args: []string{"--thread-lane-ahead=1048576", ":1", "p"}, want: options{threadLaneAhead: new(uint64(1 << 20)), comm: ":1", rest: []string{"p"}, disableRandomization: true}},
		{args: []string{"--thread-lane-ahead=lots", ":1", "p"}, wantErr: "number of bytes"},
		{args: []string{"--trace-ring-size=100", ":1", "p"}, wantErr: "power of two"},
		{args: []string{"--trace-ring-size=4096", ":1", "p"}, wantErr: "between"},
		{args: []string{"--trace-ring-size=0x30000", ":1", "p"}, wantErr: "power of two"},
		{args: []string{"--live-patch=off", ":1", "p"}, want: options{livePatch: false, comm: ":1", rest: []string{"p"}, disableRandomization: true}},
		{args: []string{"--live-patch", ":1", "p"}, want: options{livePatch: true, comm: ":1", rest: []string{"p"}, disableRandomization: true}},
		{args: []string{"--live-patch=on", ":1", "p"}, want: options{livePatch: true, comm: ":1", rest: []string{"p"}, disableRandomization: true}},
		{args: []string{"--live-patch=maybe", ":1", "p"}, wantErr: "want on or off"},
		{args: []string{":1"}, wantErr: "no program"},
		{args: []string{"--attach", ":1"}, wantErr: "exactly one PID"},
		{args: []string{"--wrapper", "env", ":1", "prog"}, wantErr: "terminating"},
		{args: []string{"--bogus", ":1", "p"}, wantErr: "unknown option"},
		{args: []string{}, wantErr: "no COMM"},
	}
	for _, tc := range tests {
		got, err := parseArgs(tc.args)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if got.rest == nil {
			got.rest = []string{}
		}
		if tc.want.rest == nil {
			tc.want.rest = []string{}
		}
		if !slices.ContainsFunc(tc.args, func(a string) bool { return strings.HasPrefix(a, "--live-patch") }) {
			tc.want.livePatch = inferior.LivePatchByDefault
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.args, *got, tc.want)
		}
	}
}

func TestExplain(t *testing.T) {
	var b strings.Builder
	// reg 0 (rax); const8 3; less_signed; end  ==  $rax < 3
	if err := explainTo(&b, "26000022031427"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"reg  0  ($rax)", "registers [0] ($rax)", "less_signed", "machine code (amd64"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
	if err := explainTo(&b, "01"); err == nil {
		t.Error("explain accepted a float opcode")
	}
	if err := explainTo(&b, "zz"); err == nil {
		t.Error("explain accepted bad hex")
	}
}

func TestCheck(t *testing.T) {
	want := 0
	if inferior.ProbeDebugRegisters("/bin/true") != nil {
		want = 1
	}
	if got := run([]string{"check", "debug-registers"}); got != want {
		t.Errorf("check debug-registers: status %d, want %d", got, want)
	}
	if got := run([]string{"check", "no-such-check"}); got != 2 {
		t.Errorf("check of an unknown name: status %d, want 2", got)
	}
}

func TestUnixSocketIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stub.sock")
	ln, err := listen(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != 0o600 {
		t.Errorf("socket mode %o, want 600", mode)
	}
}
