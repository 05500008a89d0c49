// Package hostio serves GDB's "vFile:" host I/O packets (GDB manual, "Host
// I/O Packets"): open, pread, pwrite, close, fstat, unlink, readlink and
// setfs on the machine the stub runs on.
//
// Replies are "F<result>" or "F<result>;<attachment>" with numbers in hex,
// and "F-1,<errno>" on failure with GDB's File-I/O errno values (not the
// host's). Open flags and modes use GDB's File-I/O values. Binary
// attachments (pread data, readlink target, fstat's struct stat) are escaped
// with rsp.EscapeBinary and sized so the reply fits in rsp.MaxPacketSize.
//
// File descriptors handed to gdb are the Server's own small numbers (lowest
// free, starting at 3), not the stub's real descriptors, so gdb can only
// reach files it opened itself. A descriptor gdb does not own gets EBADF.
//
// After "vFile:setfs:PID" with a non-zero PID, file names are resolved under
// /proc/PID/root when that exists (the inferior's view of the filesystem),
// otherwise in the stub's own filesystem, which is also what PID 0 selects.
package hostio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"gotpstub/rsp"
)

// GDB File-I/O open flags ("Open Flags" in the manual).
const (
	FileIORdOnly = 0x0
	FileIOWrOnly = 0x1
	FileIORdWr   = 0x2
	FileIOAppend = 0x8
	FileIOCreat  = 0x200
	FileIOTrunc  = 0x400
	FileIOExcl   = 0x800
)

// fileIOFlagsSupported is every open flag bit the protocol defines.
const fileIOFlagsSupported = FileIOWrOnly | FileIORdWr | FileIOAppend | FileIOCreat | FileIOTrunc | FileIOExcl

// GDB File-I/O mode bits ("mode_t Values" in the manual).
const (
	FileIOModeIFREG = 0o100000
	FileIOModeIFDIR = 0o40000
	FileIOModeIFCHR = 0o20000
	FileIOModePerm  = 0o777
)

// fileIOModeSupported is every mode bit the protocol defines.
const fileIOModeSupported = FileIOModeIFREG | FileIOModeIFDIR | FileIOModeIFCHR | FileIOModePerm

// Errno is a GDB File-I/O errno value ("Errno Values" in the manual).
type Errno int

// GDB File-I/O errno values.
const (
	EPERM        Errno = 1
	ENOENT       Errno = 2
	EINTR        Errno = 4
	EIO          Errno = 5
	EBADF        Errno = 9
	EACCES       Errno = 13
	EFAULT       Errno = 14
	EBUSY        Errno = 16
	EEXIST       Errno = 17
	ENODEV       Errno = 19
	ENOTDIR      Errno = 20
	EISDIR       Errno = 21
	EINVAL       Errno = 22
	ENFILE       Errno = 23
	EMFILE       Errno = 24
	EFBIG        Errno = 27
	ENOSPC       Errno = 28
	ESPIPE       Errno = 29
	EROFS        Errno = 30
	ENOSYS       Errno = 88
	ENAMETOOLONG Errno = 91
	EUNKNOWN     Errno = 9999
)

// hostErrnos maps host errno values to GDB's.
var hostErrnos = map[unix.Errno]Errno{
	unix.EPERM:        EPERM,
	unix.ENOENT:       ENOENT,
	unix.EINTR:        EINTR,
	unix.EIO:          EIO,
	unix.EBADF:        EBADF,
	unix.EACCES:       EACCES,
	unix.EFAULT:       EFAULT,
	unix.EBUSY:        EBUSY,
	unix.EEXIST:       EEXIST,
	unix.ENODEV:       ENODEV,
	unix.ENOTDIR:      ENOTDIR,
	unix.EISDIR:       EISDIR,
	unix.EINVAL:       EINVAL,
	unix.ENFILE:       ENFILE,
	unix.EMFILE:       EMFILE,
	unix.EFBIG:        EFBIG,
	unix.ENOSPC:       ENOSPC,
	unix.ESPIPE:       ESPIPE,
	unix.EROFS:        EROFS,
	unix.ENOSYS:       ENOSYS,
	unix.ENAMETOOLONG: ENAMETOOLONG,
}

// ErrnoFromError returns GDB's errno for err: the mapped host errno when err
// wraps one, EUNKNOWN otherwise.
func ErrnoFromError(err error) Errno {
	var hostErr unix.Errno
	if errors.As(err, &hostErr) {
		if e, ok := hostErrnos[hostErr]; ok {
			return e
		}
	}
	return EUNKNOWN
}

// StatSize is the size of GDB's struct stat on the wire.
const StatSize = 64

// firstFD is the first descriptor number handed to gdb.
const firstFD = 3

// Server holds the files gdb opened and the filesystem selected by setfs.
// It is safe for concurrent use.
type Server struct {
	mu    sync.Mutex
	files map[int]int // gdb's descriptor → host descriptor
	fsPid int
	// confineTo, when set (tests only), is prepended to every file name so
	// that no operation can touch files outside it.
	confineTo string
}

// NewServer returns a Server with no open files, using the stub's
// filesystem.
func NewServer() *Server {
	return &Server{files: make(map[int]int)}
}

// CloseAll closes every file gdb left open and selects the stub's
// filesystem again (as at the start of a new gdb connection).
func (s *Server) CloseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for fd, hostFD := range s.files {
		_ = unix.Close(hostFD)
		delete(s.files, fd)
	}
	s.fsPid = 0
}

// Handle answers one "vFile:" packet and returns the reply. Unknown vFile
// operations get the empty reply; malformed ones "F-1,16" (EINVAL).
func (s *Server) Handle(payload []byte) []byte {
	body, ok := strings.CutPrefix(string(payload), "vFile:")
	if !ok {
		return []byte{}
	}
	op, args, _ := strings.Cut(body, ":")
	switch op {
	case "open":
		return s.open(args)
	case "pread":
		return s.pread(args)
	case "pwrite":
		return s.pwrite(args)
	case "close":
		return s.close(args)
	case "fstat":
		return s.fstat(args)
	case "unlink":
		return s.unlink(args)
	case "readlink":
		return s.readlink(args)
	case "setfs":
		return s.setfs(args)
	}
	return []byte{}
}

// reply formats "F<result>".
func reply(result int64) []byte {
	return []byte("F" + formatSigned(result))
}

// formatSigned formats v in hex with a leading '-' when negative.
func formatSigned(v int64) string {
	if v < 0 {
		return "-" + strconv.FormatUint(uint64(-v), 16)
	}
	return strconv.FormatUint(uint64(v), 16)
}

// errorReply formats "F-1,<errno>".
func errorReply(e Errno) []byte {
	return []byte("F-1," + strconv.FormatInt(int64(e), 16))
}

// hostError formats the reply for a failed host call.
func hostError(err error) []byte { return errorReply(ErrnoFromError(err)) }

// replyWithData formats "F<len>;<escaped data>", trimming data so that the
// whole reply fits in rsp.MaxPacketSize. It returns the reply and how many
// bytes of data it carries.
func replyWithData(data []byte) ([]byte, int) {
	n := len(data)
	for {
		header := "F" + strconv.FormatInt(int64(n), 16) + ";"
		budget := rsp.MaxPacketSize - len(header)
		used, fit := 0, 0
		for fit < n {
			cost := 1
			switch data[fit] {
			case '$', '#', '}', '*':
				cost = 2
			}
			if used+cost > budget {
				break
			}
			used += cost
			fit++
		}
		if fit == n {
			out := append([]byte(header), rsp.EscapeBinary(data[:n])...)
			return out, n
		}
		n = fit // a shorter count gives a header no longer than before
	}
}

// parseArgs splits the comma-separated arguments, expecting exactly n; the
// last one may contain commas only when lastIsData is set.
func parseArgs(args string, n int, lastIsData bool) ([]string, error) {
	var parts []string
	if lastIsData {
		parts = strings.SplitN(args, ",", n)
	} else {
		parts = strings.Split(args, ",")
	}
	if len(parts) != n {
		return nil, fmt.Errorf("hostio: want %d arguments, got %d in %q", n, len(parts), args)
	}
	return parts, nil
}

// parseInt parses a non-negative hex number that fits in an int64.
func parseInt(s string) (int64, error) {
	v, err := rsp.ParseHexUint(s)
	if err != nil {
		return 0, fmt.Errorf("hostio: bad number: %w", err)
	}
	if v > 1<<62 {
		return 0, fmt.Errorf("hostio: number %q too large", s)
	}
	return int64(v), nil
}

// parseFilename decodes a hex-encoded file name.
func parseFilename(s string) (string, error) {
	b, err := rsp.DecodeHex(s)
	if err != nil {
		return "", fmt.Errorf("hostio: bad file name: %w", err)
	}
	if len(b) == 0 {
		return "", errors.New("hostio: empty file name")
	}
	return string(b), nil
}

// resolve maps a file name gdb sent to a host path according to setfs.
func (s *Server) resolve(name string) string {
	s.mu.Lock()
	pid, confineTo := s.fsPid, s.confineTo
	s.mu.Unlock()
	if confineTo != "" {
		return confineTo + path.Clean("/"+name)
	}
	if pid == 0 {
		return name
	}
	root := "/proc/" + strconv.Itoa(pid) + "/root"
	if _, err := os.Stat(root); err != nil {
		return name
	}
	return root + path.Clean("/"+name)
}

// hostOpenFlags converts GDB open flags to host flags.
func hostOpenFlags(flags int64) (int, error) {
	if flags&^fileIOFlagsSupported != 0 {
		return 0, fmt.Errorf("hostio: unsupported open flags %#x", flags)
	}
	var host int
	switch flags & (FileIOWrOnly | FileIORdWr) {
	case FileIORdOnly:
		host = unix.O_RDONLY
	case FileIOWrOnly:
		host = unix.O_WRONLY
	case FileIORdWr:
		host = unix.O_RDWR
	default:
		return 0, fmt.Errorf("hostio: open flags %#x set both O_WRONLY and O_RDWR", flags)
	}
	if flags&FileIOAppend != 0 {
		host |= unix.O_APPEND
	}
	if flags&FileIOCreat != 0 {
		host |= unix.O_CREAT
	}
	if flags&FileIOTrunc != 0 {
		host |= unix.O_TRUNC
	}
	if flags&FileIOExcl != 0 {
		host |= unix.O_EXCL
	}
	return host | unix.O_CLOEXEC, nil
}

// open handles "vFile:open:filename,flags,mode".
func (s *Server) open(args string) []byte {
	parts, err := parseArgs(args, 3, false)
	if err != nil {
		return errorReply(EINVAL)
	}
	name, err := parseFilename(parts[0])
	if err != nil {
		return errorReply(EINVAL)
	}
	flags, err := parseInt(parts[1])
	if err != nil {
		return errorReply(EINVAL)
	}
	mode, err := parseInt(parts[2])
	if err != nil || mode&^fileIOModeSupported != 0 {
		return errorReply(EINVAL)
	}
	hostFlags, err := hostOpenFlags(flags)
	if err != nil {
		return errorReply(EINVAL)
	}
	hostFD, err := unix.Open(s.resolve(name), hostFlags, uint32(mode&FileIOModePerm))
	if err != nil {
		return hostError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fd := firstFD
	for {
		if _, used := s.files[fd]; !used {
			break
		}
		fd++
	}
	s.files[fd] = hostFD
	return reply(int64(fd))
}

// lookup returns the host descriptor for gdb's descriptor string.
func (s *Server) lookup(fdStr string) (int, Errno) {
	fd, err := parseInt(fdStr)
	if err != nil {
		return -1, EINVAL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	hostFD, ok := s.files[int(fd)]
	if !ok || fd > 1<<31 {
		return -1, EBADF
	}
	return hostFD, 0
}

// pread handles "vFile:pread:fd,count,offset".
func (s *Server) pread(args string) []byte {
	parts, err := parseArgs(args, 3, false)
	if err != nil {
		return errorReply(EINVAL)
	}
	hostFD, errno := s.lookup(parts[0])
	if errno != 0 {
		return errorReply(errno)
	}
	count, err := parseInt(parts[1])
	if err != nil {
		return errorReply(EINVAL)
	}
	offset, err := parseInt(parts[2])
	if err != nil {
		return errorReply(EINVAL)
	}
	if count > rsp.MaxPacketSize {
		count = rsp.MaxPacketSize
	}
	buf := make([]byte, count)
	n, err := unix.Pread(hostFD, buf, offset)
	if err != nil {
		return hostError(err)
	}
	out, _ := replyWithData(buf[:n])
	return out
}

// pwrite handles "vFile:pwrite:fd,offset,data".
func (s *Server) pwrite(args string) []byte {
	parts, err := parseArgs(args, 3, true)
	if err != nil {
		return errorReply(EINVAL)
	}
	hostFD, errno := s.lookup(parts[0])
	if errno != 0 {
		return errorReply(errno)
	}
	offset, err := parseInt(parts[1])
	if err != nil {
		return errorReply(EINVAL)
	}
	data, err := rsp.UnescapeBinary([]byte(parts[2]))
	if err != nil {
		return errorReply(EINVAL)
	}
	n, err := unix.Pwrite(hostFD, data, offset)
	if err != nil {
		return hostError(err)
	}
	return reply(int64(n))
}

// close handles "vFile:close:fd".
func (s *Server) close(args string) []byte {
	fd, err := parseInt(args)
	if err != nil {
		return errorReply(EINVAL)
	}
	s.mu.Lock()
	hostFD, ok := s.files[int(fd)]
	if ok && fd <= 1<<31 {
		delete(s.files, int(fd))
	}
	s.mu.Unlock()
	if !ok || fd > 1<<31 {
		return errorReply(EBADF)
	}
	if err := unix.Close(hostFD); err != nil {
		return hostError(err)
	}
	return reply(0)
}

// EncodeStat packs st in GDB's big-endian struct stat layout: dev, ino,
// mode, nlink, uid, gid, rdev as 32 bits; size, blksize, blocks as 64 bits;
// atime, mtime, ctime as 32 bits. Mode keeps only the file types and
// permission bits the protocol defines.
func EncodeStat(st *unix.Stat_t) []byte {
	out := make([]byte, 0, StatSize)
	be := binary.BigEndian
	mode := st.Mode & FileIOModePerm
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		mode |= FileIOModeIFREG
	case unix.S_IFDIR:
		mode |= FileIOModeIFDIR
	case unix.S_IFCHR:
		mode |= FileIOModeIFCHR
	}
	out = be.AppendUint32(out, uint32(st.Dev))
	out = be.AppendUint32(out, uint32(st.Ino))
	out = be.AppendUint32(out, mode)
	out = be.AppendUint32(out, uint32(st.Nlink))
	out = be.AppendUint32(out, st.Uid)
	out = be.AppendUint32(out, st.Gid)
	out = be.AppendUint32(out, uint32(st.Rdev))
	out = be.AppendUint64(out, uint64(st.Size))
	out = be.AppendUint64(out, uint64(st.Blksize))
	out = be.AppendUint64(out, uint64(st.Blocks))
	out = be.AppendUint32(out, uint32(st.Atim.Sec))
	out = be.AppendUint32(out, uint32(st.Mtim.Sec))
	out = be.AppendUint32(out, uint32(st.Ctim.Sec))
	return out
}

// fstat handles "vFile:fstat:fd".
func (s *Server) fstat(args string) []byte {
	hostFD, errno := s.lookup(args)
	if errno != 0 {
		return errorReply(errno)
	}
	var st unix.Stat_t
	if err := unix.Fstat(hostFD, &st); err != nil {
		return hostError(err)
	}
	out, _ := replyWithData(EncodeStat(&st))
	return out
}

// unlink handles "vFile:unlink:filename".
func (s *Server) unlink(args string) []byte {
	name, err := parseFilename(args)
	if err != nil {
		return errorReply(EINVAL)
	}
	if err := unix.Unlink(s.resolve(name)); err != nil {
		return hostError(err)
	}
	return reply(0)
}

// readlink handles "vFile:readlink:filename".
func (s *Server) readlink(args string) []byte {
	name, err := parseFilename(args)
	if err != nil {
		return errorReply(EINVAL)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink(s.resolve(name), buf)
	if err != nil {
		return hostError(err)
	}
	out, sent := replyWithData(buf[:n])
	if sent < n {
		return errorReply(ENAMETOOLONG)
	}
	return out
}

// setfs handles "vFile:setfs:pid".
func (s *Server) setfs(args string) []byte {
	pid, err := parseInt(args)
	if err != nil || pid > 1<<31 {
		return errorReply(EINVAL)
	}
	s.mu.Lock()
	s.fsPid = int(pid)
	s.mu.Unlock()
	return reply(0)
}
