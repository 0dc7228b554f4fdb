package kafka

import (
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/scenarios/testkit"
)

func heldSession(t *testing.T) *session {
	return &session{log: testkit.Logger(t, 0), arrived: make(chan struct{}), doubt: map[uint64]bool{}}
}

func rec(off uint64, idx uint32, late bool) raidq.Message {
	return raidq.Message{Position: raidq.Position{Offset: off, Index: idx}, Late: late}
}

func offsets(ms []raidq.Message) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, kafkaOffset(m.Position))
	}
	return out
}

// A record in doubt at first reaches the Kafka client before the records
// above it: they are held until it comes late (or resolves otherwise).
func TestSessionHoldsAboveInDoubt(t *testing.T) {
	s := heldSession(t)
	s.accept(rec(1024, 0, false))
	s.report(raidq.ReadReport{InDoubt: []raidq.InDoubt{{Offset: 2048}}})
	s.accept(rec(3072, 0, false))
	s.accept(rec(4096, 0, false))
	if got := offsets(s.buf); len(got) != 1 || got[0] != 1024 {
		t.Fatalf("buffered %v while 2048 is in doubt, want only 1024", got)
	}
	s.accept(rec(2048, 0, true)) // delivered late
	if got, want := offsets(s.buf), []int64{1024, 2048, 3072, 4096}; len(got) != len(want) || got[1] != 2048 || got[3] != 4096 {
		t.Fatalf("buffered %v, want %v", got, want)
	}
	if len(s.held) != 0 || len(s.doubt) != 0 {
		t.Fatalf("held %d, doubt %v after resolution", len(s.held), s.doubt)
	}
}

// An in-doubt offset that settles without a delivery (void, or delivered
// at another offset) releases what was held.
func TestSessionReleasesOnResolved(t *testing.T) {
	s := heldSession(t)
	s.report(raidq.ReadReport{InDoubt: []raidq.InDoubt{{Offset: 2048}, {Offset: 5120}}})
	s.accept(rec(3072, 0, false))
	s.accept(rec(6144, 0, false))
	s.report(raidq.ReadReport{Resolved: []uint64{2048}})
	if got := offsets(s.buf); len(got) != 1 || got[0] != 3072 {
		t.Fatalf("buffered %v, want [3072] (6144 is above 5120, still in doubt)", got)
	}
	s.report(raidq.ReadReport{Resolved: []uint64{5120}})
	if got := offsets(s.buf); len(got) != 2 || got[1] != 6144 {
		t.Fatalf("buffered %v, want [3072 6144]", got)
	}
}

// Past its byte bound the hold gives up: the records are released (and
// a late record below them would be dropped, logged).
func TestSessionHoldBounded(t *testing.T) {
	s := heldSession(t)
	s.report(raidq.ReadReport{InDoubt: []raidq.InDoubt{{Offset: 1024}}})
	big := rec(2048, 0, false)
	big.Value = make([]byte, maxHeldBytes+1)
	s.accept(big)
	if len(s.buf) != 1 || len(s.held) != 0 {
		t.Fatalf("buf %d held %d: the hold must give up past its bound", len(s.buf), len(s.held))
	}
	s.accept(rec(1024, 0, true))
	if len(s.buf) != 1 {
		t.Fatalf("a late record below the released ones was buffered (offsets must only grow)")
	}
}

// Past its time bound the hold gives up at the next fetch, even when no
// record or report arrives to trigger it: records produced before a
// quiet spell are not held forever behind an offset that never settles.
func TestSessionHoldTimeBoundedWithoutArrivals(t *testing.T) {
	s := heldSession(t)
	s.report(raidq.ReadReport{InDoubt: []raidq.InDoubt{{Offset: 1024}}})
	s.accept(rec(2048, 0, false))
	if len(s.held) != 1 {
		t.Fatalf("held %d, want the record above the in-doubt offset held", len(s.held))
	}
	s.heldSince = time.Now().Add(-maxHeldFor - time.Second)
	msgs, _, _, err := s.take(0, 1<<20)
	if err != nil || len(msgs) != 1 || kafkaOffset(msgs[0].Position) != 2048 {
		t.Fatalf("take = %v, %v: want the held record released past maxHeldFor", offsets(msgs), err)
	}
}
