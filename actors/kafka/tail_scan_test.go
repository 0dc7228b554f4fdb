package kafka

import (
	"testing"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/stripe"
)

// answers builds heard node answers (6 nodes) holding, per node, the
// headers of the given stripes' shards: at[i] lists (offset, stripe,
// shard count) and the first count nodes get a shard.
func answers(t *testing.T, at ...struct {
	off    uint64
	id     uint64
	shards int
}) []nodeAnswer {
	t.Helper()
	as := make([]nodeAnswer, 6)
	for i := range as {
		as[i] = nodeAnswer{pos: i, heard: true}
	}
	for _, a := range at {
		shards, err := stripe.Encode(stripe.ID{Seq: a.id}, a.off, 6, 4, []byte("payload"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range a.shards {
			as[i].entries = append(as[i].entries, bus.ScanEntry{Offset: a.off, Shard: shards[i].Marshal()[:stripe.HeaderSize]})
		}
	}
	return as
}

// The last stripe is the highest offset below the frontier with k shards
// of one encoding, and not a second copy of a stripe found lower.
func TestLastStripe(t *testing.T) {
	type at = struct {
		off    uint64
		id     uint64
		shards int
	}
	for _, tc := range []struct {
		name string
		at   []at
		end  uint64
		want uint64 // 0: none
	}{
		{"highest decodable", []at{{1024, 1, 6}, {2048, 2, 4}}, 1 << 20, 2048},
		{"fewer than k shards is not a record", []at{{1024, 1, 6}, {2048, 2, 3}}, 1 << 20, 1024},
		{"at or above the frontier is not counted", []at{{1024, 1, 6}, {2048, 2, 6}}, 2048, 1024},
		{"a second copy is dropped by readers", []at{{1024, 1, 6}, {2048, 2, 6}, {3072, 1, 6}}, 1 << 20, 2048},
		{"nothing", nil, 1 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got uint64
			if st := lastStripe(answers(t, tc.at...), tc.end, 4); st != nil {
				got = st.offset
			}
			if got != tc.want {
				t.Fatalf("last stripe at %d, want %d", got, tc.want)
			}
		})
	}
}

// A page of a closing scan ends at the node's closed offset (Seal), of a
// plain scan at To; a full page continues at Next; a page that does not
// progress or closes outside the range is bad (the node counts unheard).
func TestPageEnd(t *testing.T) {
	closing := bus.ScanReq{From: 100, To: 200, Close: true}
	plain := bus.ScanReq{From: 100, To: 200}
	for _, c := range []struct {
		name string
		req  bus.ScanReq
		rep  bus.ScanReply
		end  uint64
		last bool
	}{
		{"closing, last page", closing, bus.ScanReply{Seal: 150, Next: 150}, 150, true},
		{"closing, full page", closing, bus.ScanReply{Seal: 150, Next: 120}, 120, false},
		{"closing beyond the range", closing, bus.ScanReply{Seal: 250, Next: 250}, 0, false},
		{"closing, no progress", closing, bus.ScanReply{Seal: 150, Next: 100}, 0, false},
		{"closing nothing", closing, bus.ScanReply{Seal: 100, Next: 100}, 100, true},
		{"plain, last page", plain, bus.ScanReply{Seal: 7, Next: 200}, 200, true},
		{"plain, full page", plain, bus.ScanReply{Next: 160}, 160, false},
		{"plain, past the end", plain, bus.ScanReply{Next: 210}, 0, false},
	} {
		end, last := pageEnd(c.req, c.rep)
		if end != c.end || last != c.last {
			t.Errorf("%s: end %d last %v, want %d %v", c.name, end, last, c.end, c.last)
		}
	}
}
