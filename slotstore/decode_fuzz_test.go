package slotstore

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeIncarnation: the incarnation record on disk decodes only at
// its exact length, round-trips, and fails with ErrCorrupt otherwise.
func FuzzDecodeIncarnation(f *testing.F) {
	f.Add(encodeIncarnation(Incarnation{ID: [16]byte{1, 2, 3}, Birth: 1 << 62}))
	f.Add([]byte{})
	f.Add(make([]byte, incarnationLen+1))
	f.Fuzz(func(t *testing.T, v []byte) {
		inc, err := decodeIncarnation(v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || len(v) == incarnationLen {
				t.Fatalf("decode %x: %v", v, err)
			}
			return
		}
		if !bytes.Equal(encodeIncarnation(inc), v) {
			t.Fatalf("round trip of %x gives %x", v, encodeIncarnation(inc))
		}
	})
}

// FuzzDecodeSeal: seal (and repair mark) values are exactly 8 bytes.
func FuzzDecodeSeal(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, v []byte) {
		_, err := decodeSeal(v)
		if (err == nil) != (len(v) == 8) || (err != nil && !errors.Is(err, ErrCorrupt)) {
			t.Fatalf("decodeSeal(%x): %v", v, err)
		}
	})
}
