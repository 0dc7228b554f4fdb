package bus

import (
	"errors"
	"testing"
)

func TestInDoubtReportRoundTrip(t *testing.T) {
	s, err := NewSubjects("c1")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.InDoubt("orders", 7); got != "raidq.c1.indoubt.orders.7" {
		t.Errorf("subject %q", got)
	}
	if got := s.InDoubtAll(); got != "raidq.c1.indoubt.>" {
		t.Errorf("wildcard %q", got)
	}
	r := InDoubtReport{Topic: "orders", Partition: 7, Offset: 1 << 60, Producer: [16]byte{1, 2, 3}, Seq: 99}
	for _, to := range []string{"", "n1"} {
		r.To = to
		got, err := DecodeInDoubt(r.Marshal())
		if err != nil || got != r {
			t.Fatalf("round trip: %+v, %v", got, err)
		}
	}
	b := r.Marshal()
	if _, err := DecodeInDoubt(InDoubtReport{Topic: "orders", To: "a.b"}.Marshal()); !errors.Is(err, ErrBadMessage) {
		t.Errorf("bad node name: %v", err)
	}
	for _, bad := range [][]byte{nil, b[:len(b)-1], append(append([]byte(nil), b...), 0), append([]byte{2}, b[1:]...)} {
		if _, err := DecodeInDoubt(bad); !errors.Is(err, ErrBadMessage) {
			t.Errorf("decode %x: %v", bad, err)
		}
	}
}
