package bus

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// seed adds every valid sample and random message of the wanted types, plus
// a few broken ones, to the fuzz corpus.
func seed(f *testing.F, keep func(message) bool) {
	r := rand.New(rand.NewPCG(5, 6))
	var ms []message
	ms = append(ms, sampleMessages()...)
	for range 200 {
		ms = append(ms, randMessage(r))
	}
	n := 0
	for _, m := range ms {
		if keep(m) && m.Size() <= 4096 && n < 40 {
			b := m.Marshal()
			f.Add(b)
			f.Add(b[:len(b)/2])
			n++
		}
	}
	f.Add([]byte{})
	f.Add([]byte{1, 1})
	f.Add([]byte{4, 1, 1})
}

// checkCanonical asserts the fuzz property: a decoding error wraps
// ErrBadMessage; a decoded value is valid, re-encodes to exactly the input
// and decodes again to an equal value.
func checkCanonical(t *testing.T, b []byte, m message, err error) {
	if err != nil {
		if !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error does not wrap ErrBadMessage: %v", err)
		}
		return
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("decoded value fails Validate: %v", err)
	}
	enc := m.Marshal()
	if !bytes.Equal(enc, b) {
		t.Fatalf("re-encoding differs:\n in %x\nout %x", b, enc)
	}
	again, err := decodeAny(m, enc)
	if err != nil {
		t.Fatalf("re-decode: %v", err)
	}
	if !reflect.DeepEqual(again, m) {
		t.Fatalf("re-decoded value differs:\n%#v\n%#v", again, m)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	seed(f, func(m message) bool {
		switch m.(type) {
		case WriteReq, ScanReq:
			return true
		}
		return false
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeRequest(b)
		if err != nil {
			checkCanonical(t, b, nil, err)
			return
		}
		switch m := v.(type) {
		case WriteReq:
			checkCanonical(t, b, m, nil)
		case ScanReq:
			checkCanonical(t, b, m, nil)
		default:
			t.Fatalf("DecodeRequest returned %T", v)
		}
	})
}

func FuzzDecodeWriteReply(f *testing.F) {
	seed(f, func(m message) bool { _, ok := m.(WriteReply); return ok })
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeWriteReply(b)
		checkCanonical(t, b, m, err)
	})
}

func FuzzDecodeScanReply(f *testing.F) {
	seed(f, func(m message) bool { _, ok := m.(ScanReply); return ok })
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeScanReply(b)
		checkCanonical(t, b, m, err)
	})
}
