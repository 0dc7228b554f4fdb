package slotstore

import (
	"testing"

	"github.com/raidq/raidq/stripe/invariants/invariantstest"
)

// TestCommitterInvariantPendingMatchesQueue: after a group is written,
// the pending slots (what the write-once check consults) are exactly
// the queued puts. A committer is built here without its goroutine, in
// the state a bug would leave, and finish is called as run calls it.
func TestCommitterInvariantPendingMatchesQueue(t *testing.T) {
	put := func(off uint64) slotPut {
		k := Key{Topic: "t", Partition: 0, Offset: off}
		return slotPut{key: k, enc: slotKey(k), shard: testShard(t, off, 1, 64)}
	}
	p1, p2 := put(100), put(200)
	written := []*item{{puts: []slotPut{p1}}}
	queued := &item{puts: []slotPut{p2}}
	cases := []struct {
		name    string
		pending map[string][]byte
		want    string
	}{
		{name: "a queued put lost from pending", pending: map[string][]byte{string(p1.enc): p1.shard}, want: "queued but not pending"},
		{name: "a pending slot nothing queues", pending: map[string][]byte{string(p1.enc): p1.shard, string(p2.enc): p2.shard, "stray": nil},
			want: "2 slots pending, 1 queued"},
		{name: "pending with other bytes", pending: map[string][]byte{string(p1.enc): p1.shard, string(p2.enc): p1.shard},
			want: "pending with other bytes than queued"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &committer{pending: tc.pending, queue: []*item{queued}}
			invariantstest.Fires(t, tc.want, func() { c.finish(written) })
		})
	}
	c := &committer{pending: map[string][]byte{string(p1.enc): p1.shard, string(p2.enc): p2.shard}, queue: []*item{queued}}
	c.finish(written) // consistent: holds
	if len(c.pending) != 1 {
		t.Fatalf("%d pending after the group, want p2's", len(c.pending))
	}
}
