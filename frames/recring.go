package frames

// recChunkLen is the number of records in one chunk of a recRing.
const recChunkLen = 4096

// recRing holds the present frames' records by sequence number, in chunks
// of recChunkLen records that never move once filled: a new frame past
// the last chunk gets a new chunk (nothing is copied, where a ring that
// doubles copies every record and clears twice the memory), and a chunk
// whose frames have all been dropped is kept for reuse. On the virtual
// machines this runs on, fresh memory costs microseconds per page at
// first touch, so a long run's index costs that once per chunk, not once
// per doubling.
type recRing struct {
	// chunks[i] holds the records of sequence numbers base+i*recChunkLen
	// onwards.
	chunks [][]record
	base   int64 // a multiple of recChunkLen
	spare  [][]record
}

// at returns the record of sequence number seq, which must be present
// (or just added).
func (r *recRing) at(seq int64) *record {
	d := seq - r.base
	return &r.chunks[d/recChunkLen][d%recChunkLen]
}

// add returns the record for sequence number seq, the one after the
// present frames, adding a chunk when seq starts one.
func (r *recRing) add(seq int64) *record {
	d := seq - r.base
	if int(d/recChunkLen) == len(r.chunks) {
		var c []record
		if n := len(r.spare); n > 0 {
			c, r.spare = r.spare[n-1], r.spare[:n-1]
		} else {
			c = make([]record, recChunkLen)
		}
		r.chunks = append(r.chunks, c)
	}
	return &r.chunks[d/recChunkLen][d%recChunkLen]
}

// dropBelow gives up the chunks whose every sequence number is below
// head (the oldest present frame's, or the next one's when none is).
func (r *recRing) dropBelow(head int64) {
	for len(r.chunks) > 0 && head-r.base >= recChunkLen {
		r.spare = append(r.spare, r.chunks[0])
		r.chunks[0] = nil
		r.chunks = r.chunks[1:]
		r.base += recChunkLen
	}
}

// reset forgets every record: sequence numbers start again at 0. The
// chunks are kept for reuse, at most keep records' worth of them.
func (r *recRing) reset(keep int) {
	for i, c := range r.chunks {
		r.spare = append(r.spare, c)
		r.chunks[i] = nil
	}
	r.chunks = r.chunks[:0]
	r.base = 0
	if max := keep/recChunkLen + 1; len(r.spare) > max {
		clear(r.spare[max:])
		r.spare = r.spare[:max]
	}
}
