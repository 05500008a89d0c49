package a64

// ErrBetweenExclusives says why a site inside an atomic sequence gets no
// jump (BetweenExclusives).
const ErrBetweenExclusives = "between a load-exclusive and its store-exclusive: the b to the pad would make the store fail every time"

// ExclusiveSpan bounds how far after a load-exclusive its
// store-exclusive is looked for (BetweenExclusives): the exclusive
// loops compilers and hand-written atomics emit are a few instructions
// long.
const ExclusiveSpan = 16

// BetweenExclusives marks the words strictly between a load-exclusive
// and the first exclusive after it when that is a store-exclusive
// within ExclusiveSpan words: an atomic sequence. A fast tracepoint must
// not go there: the b to the pad, and the pad's own memory accesses,
// clear the exclusive monitor the load set, so the store-exclusive
// fails every time and the loop retries for ever (Decode refuses the
// exclusives themselves).
func BetweenExclusives(words []uint32) []bool {
	between := make([]bool, len(words))
	for i, w := range words {
		if load, ok := isExclusive(w); !ok || !load {
			continue
		}
		for j := i + 1; j < len(words) && j <= i+ExclusiveSpan; j++ {
			if load, ok := isExclusive(words[j]); ok {
				if !load {
					for k := i + 1; k < j; k++ {
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
