package tdesc

import (
	"encoding/binary"
	"os"
	"sync"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

// Host returns the layout of processes on this machine: aarch64
// GNU/Linux with SVE (at this process's vector length, which programs
// it starts inherit) and pointer authentication when the CPU has them,
// as gdbserver describes them. gdb 13 needs the sve feature on an SVE
// machine: without it, it loops for ever reading the SVE record of a
// signal frame.
func Host() *Layout { return AArch64(hostFeatures()) }

var hostFeatures = sync.OnceValue(func() AArch64Features {
	var f AArch64Features
	if cpu.ARM64.HasSVE {
		if vl, err := unix.PrctlRetInt(unix.PR_SVE_GET_VL, 0, 0, 0, 0); err == nil {
			f.VQ = (vl & unix.PR_SVE_VL_LEN_MASK) / 16
		}
	}
	f.PAuth = hwcap()&hwcapPACA != 0
	return f
})

// Auxiliary vector key and AT_HWCAP bit for pointer authentication.
const (
	atHWCap   = 16
	hwcapPACA = 1 << 30 // address authentication
)

// hwcap returns this process's AT_HWCAP (0 if unknown).
func hwcap() uint64 {
	auxv, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 0
	}
	for i := 0; i+16 <= len(auxv); i += 16 {
		if binary.LittleEndian.Uint64(auxv[i:]) == atHWCap {
			return binary.LittleEndian.Uint64(auxv[i+8:])
		}
	}
	return 0
}
