package frames

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// freshPages maps n bytes of anonymous memory no one has touched yet.
func freshPages(tb testing.TB, n int) []byte {
	tb.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// resident counts b's pages in memory (mincore).
func resident(tb testing.TB, b []byte) int {
	tb.Helper()
	vec := make([]byte, (len(b)+4095)/4096)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		tb.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

func TestPopulate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to int // the part of a fresh 64-page mapping given to populate
	}{
		{"whole pages", 0, 64 * 4096},
		{"unaligned ends", 100, 63*4096 + 7},
		{"one page", 4096, 2 * 4096},
		{"less than a page", 10, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := freshPages(t, 64*4096)
			defer unix.Munmap(m)
			if n := resident(t, m); n != 0 {
				t.Fatalf("%d pages resident before", n)
			}
			populate(m[tc.from:tc.to])
			want := (tc.to-1)/4096 - tc.from/4096 + 1
			if n := resident(t, m); n != want {
				t.Errorf("%d pages resident after populate, want %d", n, want)
			}
		})
	}
}

// BenchmarkNewChunk compares making a MiB of fresh memory present by
// writing each page with populate's way.
func BenchmarkNewChunk(b *testing.B) {
	for _, bc := range []struct {
		name string
		fill func([]byte)
	}{
		{"touch", func(c []byte) {
			for k := 0; k < len(c); k += 4096 {
				c[k] = 0
			}
		}},
		{"populate", populate},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				m := freshPages(b, ringChunk)
				b.StartTimer()
				bc.fill(m)
				b.StopTimer()
				unix.Munmap(m)
				b.StartTimer()
			}
		})
	}
}
