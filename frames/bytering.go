package frames

// ringChunk is the size of one piece of a byteRing.
const ringChunk = 1 << 20

// byteRing holds the trace buffer's frame bytes: a ring of size bytes
// (the budget) at logical offsets 0 .. size-1, stored in pieces of
// ringChunk bytes (the last one shorter when size is not a multiple)
// that are allocated as the writer reaches them, or ahead of it (grow),
// and never moved or copied once there. An arena that doubles copies
// every stored byte under the buffer's lock and touches twice as much
// fresh memory, which took seconds at hundreds of MB on the virtual
// machines measured; a piece costs only its own first touch.
type byteRing struct {
	size   int
	chunks [][]byte // chunks[i] holds offsets i*ringChunk ...; a prefix of them
}

// chunkLen is the length of piece i of a ring of size bytes.
func chunkLen(size, i int) int { return min(ringChunk, size-i*ringChunk) }

// newChunk returns piece i of a ring of size bytes, its pages touched:
// make's pages are untouched until written, and the first touch is what
// costs on the virtual machines measured.
func newChunk(size, i int) []byte {
	c := make([]byte, chunkLen(size, i))
	populate(c)
	return c
}

// allocated returns how many bytes from offset 0 have storage.
func (r *byteRing) allocated() int {
	if len(r.chunks) == 0 {
		return 0
	}
	return min(r.size, len(r.chunks)*ringChunk)
}

// resize makes the ring size bytes, keeping the pieces that fit as they
// are (their bytes are not kept: the caller forgets every frame).
func (r *byteRing) resize(size int) {
	keep := 0
	for keep < len(r.chunks) && keep*ringChunk < size && len(r.chunks[keep]) == chunkLen(size, keep) {
		keep++
	}
	clear(r.chunks[keep:])
	r.chunks = r.chunks[:keep]
	r.size = size
}

// ensure gives storage to offsets [0, end).
func (r *byteRing) ensure(end int) {
	for r.allocated() < min(end, r.size) {
		r.chunks = append(r.chunks, newChunk(r.size, len(r.chunks)))
	}
}

// attach adds pieces made by newChunk for indexes from onwards, those
// still missing and of the right length (the ring may have grown or
// changed size since they were made).
func (r *byteRing) attach(from int, pieces [][]byte) {
	for k, c := range pieces {
		i := from + k
		if i == len(r.chunks) && i*ringChunk < r.size && len(c) == chunkLen(r.size, i) {
			r.chunks = append(r.chunks, c)
		}
	}
}

// write stores p at offset w, wrapping at the end of the ring, and
// returns the offset after it. The bytes must have storage.
func (r *byteRing) write(w int, p []byte) int {
	for len(p) > 0 {
		c := r.chunks[w/ringChunk]
		k := copy(c[w%ringChunk:], p)
		p, w = p[k:], w+k
		if w == r.size {
			w = 0
		}
	}
	return w
}

// appendTo appends the n bytes at offset p (wrapping at the end of the
// ring) to dst.
func (r *byteRing) appendTo(dst []byte, p, n int) []byte {
	for n > 0 {
		c := r.chunks[p/ringChunk][p%ringChunk:]
		k := min(n, len(c))
		dst = append(dst, c[:k]...)
		n, p = n-k, p+k
		if p == r.size {
			p = 0
		}
	}
	return dst
}

// slice returns the n bytes at offset p when one piece holds them all.
func (r *byteRing) slice(p, n int) ([]byte, bool) {
	c := r.chunks[p/ringChunk]
	o := p % ringChunk
	if o+n > len(c) {
		return nil, false
	}
	return c[o : o+n : o+n], true
}
