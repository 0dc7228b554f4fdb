package fanout

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

func FuzzParseStripeID(f *testing.F) {
	f.Add("00112233445566778899aabbccddeeff-42")
	f.Add("zz-1")
	f.Add("-")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseStripeID(s)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error does not wrap ErrBadMessage: %v", err)
			}
			return
		}
		again, err := ParseStripeID(id.String())
		if err != nil || again != id {
			t.Fatalf("%q: round trip through %q: %v", s, id.String(), err)
		}
	})
}

// FuzzParseMsg: a delivered message with arbitrary headers parses or
// fails with ErrBadMessage; it never panics.
func FuzzParseMsg(f *testing.F) {
	f.Add("1700000000000000000", "3", "00112233445566778899aabbccddeeff-42", "a2V5", "base64", "bmFtZQ==:dmFsdWU=", "x", []byte("value"))
	f.Add("", "", "", "", "", "", "", []byte{})
	f.Fuzz(func(t *testing.T, off, idx, stripeID, key, keyEnc, b64, extra string, data []byte) {
		m := &nats.Msg{Subject: "raidq.c.deliver.t.0", Data: data, Header: nats.Header{}}
		for name, v := range map[string]string{HeaderOffset: off, HeaderIndex: idx, HeaderStripe: stripeID, HeaderKey: key,
			HeaderKeyEncoding: keyEnc, HeaderBase64: b64, "X-App": extra, HeaderTooLarge: extra, HeaderTime: extra} {
			if v != "" {
				m.Header.Set(name, v)
			}
		}
		if _, err := ParseMsg(m); err != nil && !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error does not wrap ErrBadMessage: %v", err)
		}
	})
}

func FuzzDecodePos(f *testing.F) {
	f.Add([]byte(`{"offset":1,"index":2}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodePos(b)
	})
}
