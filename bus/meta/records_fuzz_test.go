package meta

import (
	"errors"
	"testing"
)

func FuzzDecodeMember(f *testing.F) {
	f.Add([]byte(`{"id":"n1","client_url":"nats://127.0.0.1:4222","started":1,"heartbeat":2,"incarnation":"00112233445566778899aabbccddeeff@5"}`))
	f.Add([]byte(`{"id":"a b"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMember(b)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDecodeGroupRecords: the records of the groups bucket (positions,
// member heartbeats, leases) decode within the size limit or fail with
// ErrBadRecord.
func FuzzDecodeGroupRecords(f *testing.F) {
	f.Add([]byte(`{"offset":1700000000000000000,"index":3,"member":"m1","updated":5}`))
	f.Add([]byte(`{"member":"m1","heartbeat":5}`))
	f.Add([]byte(`{"holder":"n1","expires":5,"data":"eyJvZmZzZXQiOjF9"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p GroupPosition
		var m GroupMember
		var l Lease
		for _, v := range []any{&p, &m, &l} {
			if err := decode(b, v); err != nil && !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error does not wrap ErrBadRecord: %v", err)
			}
		}
		if len(b) > MaxRecord {
			if err := decode(b, &p); err == nil {
				t.Fatalf("a record of %d bytes was accepted (limit %d)", len(b), MaxRecord)
			}
		}
	})
}
