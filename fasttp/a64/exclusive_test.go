package a64

import (
	"reflect"
	"testing"
)

func TestAtomicSequence(t *testing.T) {
	const (
		ldaxr = 0x885ffc02
		stlxr = 0x8803fc02
		ldxp  = 0xc87f0c02 // ldxp x2, x3, [x0]
		stxp  = 0xc8240c02 // stxp w4, x2, x3, [x0]
		add   = 0x11000442
		cbnz  = 0x35ffffa3
		casp  = 0x48207c82 // casp w0, w1, w2, w3, [x4]: no exclusive
	)
	fill := make([]uint32, ExclusiveSpan)
	for i := range fill {
		fill[i] = add
	}
	for _, c := range []struct {
		name  string
		words []uint32
		want  []int // the indices in a sequence
	}{
		{"loop", []uint32{add, ldaxr, add, add, stlxr, cbnz}, []int{1, 2, 3, 4}},
		{"pair", []uint32{ldxp, add, stxp}, []int{0, 1, 2}},
		{"no store", []uint32{ldaxr, add, add, cbnz}, nil},
		{"two loads", []uint32{ldaxr, ldaxr, add, stlxr}, []int{1, 2, 3}},
		{"store too far", append(append([]uint32{ldaxr}, fill...), stlxr), nil},
		{"store at the span", append(append([]uint32{ldaxr}, fill[1:]...), stlxr), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		{"casp", []uint32{casp, add, stlxr}, nil},
	} {
		var got []int
		for i, b := range AtomicSequence(c.words) {
			if b {
				got = append(got, i)
			}
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: in a sequence %v, want %v", c.name, got, c.want)
		}
	}
}
