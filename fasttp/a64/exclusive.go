package a64

// ErrAtomicSequence says why no tracepoint may go inside an atomic
// sequence (AtomicSequence).
const ErrAtomicSequence = "inside an atomic sequence (a load-exclusive to its store-exclusive): a tracepoint there, a jump's b or a trap's brk, clears the exclusive monitor, so the store would fail every time and the loop never end"

// ExclusiveSpan bounds how far after a load-exclusive its
// store-exclusive is looked for (AtomicSequence): the exclusive
// loops compilers and hand-written atomics emit are a few instructions
// long.
const ExclusiveSpan = 16

// AtomicSequence marks the words of atomic sequences: from a
// load-exclusive to the first exclusive after it when that is a
// store-exclusive within ExclusiveSpan words, both included. No
// tracepoint may go there: a fast one's b to the pad (and the pad's own
// memory accesses) or a trap's exception clears the exclusive monitor
// the load set, so the store-exclusive fails every time and the loop
// retries for ever (ErrAtomicSequence).
func AtomicSequence(words []uint32) []bool {
	between := make([]bool, len(words))
	for i, w := range words {
		if load, ok := isExclusive(w); !ok || !load {
			continue
		}
		for j := i + 1; j < len(words) && j <= i+ExclusiveSpan; j++ {
			if load, ok := isExclusive(words[j]); ok {
				if !load {
					for k := i; k <= j; k++ {
						between[k] = true
					}
				}
				break
			}
		}
	}
	return between
}

// isExclusive reports whether w is a load/store exclusive (register or
// pair, what Decode refuses as such), and whether it loads.
func isExclusive(w uint32) (load, ok bool) {
	if w&0x3f800000 == 0x08000000 && (w>>21&1 == 0 || w>>31 == 1) {
		return w>>22&1 == 1, true
	}
	return false, false
}
