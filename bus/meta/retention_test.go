package meta

import (
	"testing"
	"time"

	"github.com/raidq/raidq/stripe/quorum"
)

// TestTopicRetentionMapped: the catalog's topic carries the record's
// retention, which the nodes' retention loops apply.
func TestTopicRetentionMapped(t *testing.T) {
	p := quorum.Default()
	r := TopicRecord{Name: "t", Partitions: 1, N: p.N, K: p.K, W: p.W, ReadDelay: Duration(p.ReadDelay),
		AcceptWindow: Duration(p.AcceptWindow), FutureBound: Duration(p.FutureBound), MaxSkew: Duration(p.MaxSkew),
		Retention: Duration(time.Hour), RetentionBytes: 1 << 30, Ensembles: [][]string{{"a", "b", "c", "d", "e", "f"}}}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	tp := r.Topic()
	if tp.Retention != time.Hour || tp.RetentionBytes != 1<<30 {
		t.Fatalf("topic retention %v / %d bytes, want 1h / 1GiB", tp.Retention, tp.RetentionBytes)
	}
}
