package hostio

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gotpstub/rsp"
)

// hexName hex-encodes a file name as gdb does.
func hexName(name string) string { return rsp.EncodeHex([]byte(name)) }

// do sends one packet and returns the reply as a string.
func do(t *testing.T, s *Server, packet string) string {
	t.Helper()
	return string(s.Handle([]byte(packet)))
}

// parseResult splits "F<result>[,errno][;data]" into its parts and
// unescapes the data.
func parseResult(t *testing.T, reply string) (result int64, errno int64, data []byte) {
	t.Helper()
	if !strings.HasPrefix(reply, "F") {
		t.Fatalf("reply %q does not start with F", reply)
	}
	head, attachment, hasData := strings.Cut(reply[1:], ";")
	resStr, errStr, hasErrno := strings.Cut(head, ",")
	r, err := strconv.ParseInt(resStr, 16, 64)
	if err != nil {
		t.Fatalf("reply %q: bad result: %v", reply, err)
	}
	if hasErrno {
		errno, err = strconv.ParseInt(errStr, 16, 64)
		if err != nil {
			t.Fatalf("reply %q: bad errno: %v", reply, err)
		}
	}
	if hasData {
		data, err = rsp.UnescapeBinary([]byte(attachment))
		if err != nil {
			t.Fatalf("reply %q: bad data: %v", reply, err)
		}
	}
	return r, errno, data
}

// openFile opens name with flags and mode and returns the descriptor.
func openFile(t *testing.T, s *Server, name string, flags, mode int) int64 {
	t.Helper()
	reply := do(t, s, "vFile:open:"+hexName(name)+","+strconv.FormatInt(int64(flags), 16)+","+strconv.FormatInt(int64(mode), 16))
	fd, errno, _ := parseResult(t, reply)
	if fd < 0 {
		t.Fatalf("open %s: reply %q (errno %d)", name, reply, errno)
	}
	return fd
}

func TestReadWriteStatClose(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "data")
	s := NewServer()
	defer s.CloseAll()

	fd := openFile(t, s, name, FileIOCreat|FileIORdWr|FileIOTrunc, 0o640)
	fdHex := strconv.FormatInt(fd, 16)
	payload := []byte("ab$#}*\x00\xffcd")
	reply := do(t, s, "vFile:pwrite:"+fdHex+",2,"+string(rsp.EscapeBinary(payload)))
	if n, _, _ := parseResult(t, reply); n != int64(len(payload)) {
		t.Fatalf("pwrite reply %q, want %d bytes written", reply, len(payload))
	}
	onDisk, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]byte{0, 0}, payload...); !bytes.Equal(onDisk, want) {
		t.Fatalf("file holds %q, want %q", onDisk, want)
	}
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640&^currentUmask() {
		t.Errorf("file mode %v, want %o", fi.Mode().Perm(), 0o640&^currentUmask())
	}

	tests := []struct {
		count, offset int
		want          []byte
	}{
		{4, 2, payload[:4]},
		{100, 0, onDisk},
		{3, 9, onDisk[9:12]},
		{10, 100, []byte{}},
		{0, 0, []byte{}},
	}
	for _, tt := range tests {
		reply := do(t, s, "vFile:pread:"+fdHex+","+strconv.FormatInt(int64(tt.count), 16)+","+strconv.FormatInt(int64(tt.offset), 16))
		n, _, data := parseResult(t, reply)
		if n != int64(len(tt.want)) || !bytes.Equal(data, tt.want) {
			t.Errorf("pread(%d, %d) reply %q: got %d %q, want %q", tt.count, tt.offset, reply, n, data, tt.want)
		}
	}

	reply = do(t, s, "vFile:fstat:"+fdHex)
	n, _, st := parseResult(t, reply)
	if n != StatSize || len(st) != StatSize {
		t.Fatalf("fstat reply %q: %d bytes of stat", reply, len(st))
	}
	be := binary.BigEndian
	if mode := be.Uint32(st[8:]); mode != FileIOModeIFREG|uint32(fi.Mode().Perm()) {
		t.Errorf("fstat mode %o, want %o", mode, FileIOModeIFREG|uint32(fi.Mode().Perm()))
	}
	if size := be.Uint64(st[28:]); size != uint64(len(onDisk)) {
		t.Errorf("fstat size %d, want %d", size, len(onDisk))
	}
	if mtime := be.Uint32(st[56:]); int64(mtime) != fi.ModTime().Unix() {
		t.Errorf("fstat mtime %d, want %d", mtime, fi.ModTime().Unix())
	}

	if got := do(t, s, "vFile:close:"+fdHex); got != "F0" {
		t.Fatalf("close reply %q, want F0", got)
	}
	if got := do(t, s, "vFile:close:"+fdHex); got != "F-1,9" {
		t.Fatalf("second close reply %q, want F-1,9 (EBADF)", got)
	}
	if got := do(t, s, "vFile:pread:"+fdHex+",1,0"); got != "F-1,9" {
		t.Fatalf("pread after close reply %q, want F-1,9", got)
	}
}

// currentUmask returns the process umask without changing it for long.
func currentUmask() os.FileMode {
	dir, err := os.MkdirTemp("", "umask")
	if err != nil {
		return 0o022
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o777); err != nil {
		return 0o022
	}
	fi, err := os.Stat(f)
	if err != nil {
		return 0o022
	}
	return 0o777 &^ fi.Mode().Perm()
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	if err := os.WriteFile(existing, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewServer()
	defer s.CloseAll()
	tests := []struct {
		name, packet, want string
	}{
		{"missing file", "vFile:open:" + hexName(filepath.Join(dir, "nope")) + ",0,0", "F-1,2"},
		{"exclusive create of existing", "vFile:open:" + hexName(existing) + ",a01,1a4", "F-1,11"},
		{"open a directory for writing", "vFile:open:" + hexName(dir) + ",1,0", "F-1,15"},
		{"unsupported open flag", "vFile:open:" + hexName(existing) + ",1000,0", "F-1,16"},
		{"both write flags", "vFile:open:" + hexName(existing) + ",3,0", "F-1,16"},
		{"unsupported mode bits", "vFile:open:" + hexName(existing) + ",0,1000000", "F-1,16"},
		{"bad hex name", "vFile:open:zz,0,0", "F-1,16"},
		{"missing argument", "vFile:open:" + hexName(existing) + ",0", "F-1,16"},
		{"unknown fd", "vFile:pread:63,1,0", "F-1,9"},
		{"pread bad count on unknown fd", "vFile:pread:3,x,0", "F-1,9"},
		{"pwrite missing data", "vFile:pwrite:3", "F-1,16"},
		{"close garbage", "vFile:close:", "F-1,16"},
		{"unlink missing", "vFile:unlink:" + hexName(filepath.Join(dir, "nope")), "F-1,2"},
		{"readlink of regular file", "vFile:readlink:" + hexName(existing), "F-1,16"},
		{"setfs garbage", "vFile:setfs:-1", "F-1,16"},
		{"unknown operation", "vFile:frobnicate:1", ""},
		{"name with NUL", "vFile:unlink:" + hexName("a\x00b"), "F-1,16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := do(t, s, tt.packet); got != tt.want {
				t.Errorf("%s: reply %q, want %q", tt.packet, got, tt.want)
			}
		})
	}
}

func TestUnlinkReadlink(t *testing.T) {
	dir := t.TempDir()
	target := "some/target with spaces"
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	s := NewServer()
	reply := do(t, s, "vFile:readlink:"+hexName(link))
	n, _, data := parseResult(t, reply)
	if n != int64(len(target)) || string(data) != target {
		t.Fatalf("readlink reply %q, want %q", reply, target)
	}
	if got := do(t, s, "vFile:unlink:"+hexName(link)); got != "F0" {
		t.Fatalf("unlink reply %q, want F0", got)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("link still exists after unlink: %v", err)
	}
}

func TestLargePreadFitsInPacket(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "big")
	// Every other byte needs escaping.
	content := bytes.Repeat([]byte("a$"), 3*rsp.MaxPacketSize)
	if err := os.WriteFile(name, content, 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewServer()
	defer s.CloseAll()
	fd := openFile(t, s, name, FileIORdOnly, 0)
	reply := do(t, s, "vFile:pread:"+strconv.FormatInt(fd, 16)+",100000,1")
	if len(reply) > rsp.MaxPacketSize {
		t.Fatalf("reply of %d bytes exceeds %d", len(reply), rsp.MaxPacketSize)
	}
	n, _, data := parseResult(t, reply)
	if n <= 0 || n != int64(len(data)) || !bytes.Equal(data, content[1:1+n]) {
		t.Fatalf("pread returned %d bytes, data %d bytes, mismatch", n, len(data))
	}
	if n < rsp.MaxPacketSize/3 {
		t.Fatalf("pread returned only %d bytes", n)
	}
}

func TestSetfs(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	if err := os.WriteFile(name, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewServer()
	defer s.CloseAll()
	tests := []struct {
		pid  int
		want string
	}{
		{os.Getpid(), "F0"}, // resolved through /proc/PID/root
		{0x7ffffff0, "F0"},  // no such process: the stub's filesystem
		{0, "F0"},           // the stub's filesystem
	}
	for _, tt := range tests {
		if got := do(t, s, "vFile:setfs:"+strconv.FormatInt(int64(tt.pid), 16)); got != tt.want {
			t.Fatalf("setfs %d reply %q, want %q", tt.pid, got, tt.want)
		}
		if tt.pid == os.Getpid() {
			if got, want := s.resolve(name), "/proc/"+strconv.Itoa(tt.pid)+"/root"+name; got != want {
				t.Errorf("resolve under setfs %d = %q, want %q", tt.pid, got, want)
			}
		} else if got := s.resolve(name); got != name {
			t.Errorf("resolve under setfs %d = %q, want %q", tt.pid, got, name)
		}
		fd := openFile(t, s, name, FileIORdOnly, 0)
		reply := do(t, s, "vFile:pread:"+strconv.FormatInt(fd, 16)+",10,0")
		if _, _, data := parseResult(t, reply); string(data) != "hello" {
			t.Errorf("setfs %d: pread reply %q", tt.pid, reply)
		}
		do(t, s, "vFile:close:"+strconv.FormatInt(fd, 16))
	}
}

func TestDescriptorNumbering(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	if err := os.WriteFile(name, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewServer()
	a := openFile(t, s, name, FileIORdOnly, 0)
	b := openFile(t, s, name, FileIORdOnly, 0)
	if a != firstFD || b != firstFD+1 {
		t.Fatalf("descriptors %d, %d; want %d, %d", a, b, firstFD, firstFD+1)
	}
	do(t, s, "vFile:close:"+strconv.FormatInt(a, 16))
	if c := openFile(t, s, name, FileIORdOnly, 0); c != a {
		t.Fatalf("reused descriptor %d, want lowest free %d", c, a)
	}
	s.CloseAll()
	if got := do(t, s, "vFile:fstat:"+strconv.FormatInt(b, 16)); got != "F-1,9" {
		t.Fatalf("fstat after CloseAll reply %q, want F-1,9", got)
	}
}

// FuzzHandle feeds arbitrary packets to a Server confined to a temporary
// directory and checks that replies are well formed.
func FuzzHandle(f *testing.F) {
	f.Add([]byte("vFile:open:" + hexName("x") + ",202,1a4"))
	f.Add([]byte("vFile:pwrite:3,0,}]}\x03abc"))
	f.Add([]byte("vFile:pread:3,10,0"))
	f.Add([]byte("vFile:fstat:3"))
	f.Add([]byte("vFile:close:3"))
	f.Add([]byte("vFile:readlink:" + hexName("x")))
	f.Add([]byte("vFile:unlink:" + hexName("x")))
	f.Add([]byte("vFile:setfs:0"))
	f.Add([]byte("vFile:pread:3,ffffffffffffffff,ffffffffffffffff"))
	dir := f.TempDir()
	s := NewServer()
	s.confineTo = dir
	f.Cleanup(s.CloseAll)
	f.Fuzz(func(t *testing.T, packet []byte) {
		reply := s.Handle(packet)
		if len(reply) > rsp.MaxPacketSize {
			t.Fatalf("reply of %d bytes", len(reply))
		}
		if len(reply) == 0 {
			return
		}
		if reply[0] != 'F' {
			t.Fatalf("reply %q does not start with F", reply)
		}
		if bytes.ContainsAny(reply, "$#") {
			t.Fatalf("reply %q contains unescaped framing characters", reply)
		}
	})
}
