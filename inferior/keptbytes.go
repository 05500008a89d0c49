package inferior

import "golang.org/x/sys/unix"

// keptBytes holds the data of kept writes (deferWrite) in memory mapped
// outside Go's heap, made present a chunk at a time with one system call
// (MADV_POPULATE_WRITE) and reused from batch to batch. The pads of a
// tstart placing a thousand fast tracepoints are a megabyte: copied into
// fresh heap memory they cost a page fault per 4 KiB (5-15 µs each on
// the virtual machines this was measured on, a fifth of QTStart's time).
type keptBytes struct {
	chunks [][]byte // mapped and present
	used   int      // chunks in use, the last one up to off
	off    int
}

// keptChunk is the size of keptBytes' chunks; data larger than a
// quarter of one goes to Go's heap.
const keptChunk = 256 << 10

// copyOf returns a copy of data that stays valid until reset.
func (k *keptBytes) copyOf(data []byte) []byte {
	if len(data) > keptChunk/4 {
		return append([]byte(nil), data...)
	}
	if k.used == 0 || k.off+len(data) > keptChunk {
		if k.used == len(k.chunks) && !k.grow() {
			return append([]byte(nil), data...)
		}
		k.used++
		k.off = 0
	}
	c := k.chunks[k.used-1][k.off : k.off+len(data) : k.off+len(data)]
	copy(c, data)
	k.off += len(data)
	return c
}

// grow maps one more chunk.
func (k *keptBytes) grow() bool {
	c, err := unix.Mmap(-1, 0, keptChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return false
	}
	// Before Linux 5.14 this fails and the pages fault in one by one.
	_ = unix.Madvise(c, unix.MADV_POPULATE_WRITE)
	k.chunks = append(k.chunks, c)
	return true
}

// reset makes the chunks free for new copies: the earlier ones must no
// longer be used.
func (k *keptBytes) reset() { k.used, k.off = 0, 0 }

// release unmaps the chunks.
func (k *keptBytes) release() {
	for _, c := range k.chunks {
		_ = unix.Munmap(c)
	}
	*k = keptBytes{}
}
