package raidq

import (
	"sort"
	"time"
)

// PartitionLag is how far one partition's reader has read.
type PartitionLag struct {
	Partition int
	// ReadTo: every record the reader could read before this time has
	// been handed to the consumer (records in doubt there come later,
	// Message.Late). Before its first scan it is where the reader starts.
	ReadTo time.Time
	// Behind is how far ReadTo trails the newest time a reader may read
	// (now minus the topic's read delay); 0 when caught up.
	Behind time.Duration
}

// Lag reports each partition reader's progress, sorted by partition: how
// far behind the readable frontier the records handed to this consumer
// are. A group member reports the partitions it owns now (none while it
// owns none). It counts what the readers handed over, including the
// consumer's buffer (WithBuffer) that the application has not taken yet;
// a full buffer stops the readers, so an application that falls behind
// shows a growing lag. For a whole group, committed positions and lag of
// every partition: Client.DescribeGroup. The same numbers are the gauge
// raidq_consumer_lag_seconds (WithMetrics).
func (c *Consumer) Lag() []PartitionLag {
	t, err := c.ports.catalog.Topic(c.topic)
	if err != nil {
		return nil
	}
	now := time.Now()
	var out []PartitionLag
	for _, r := range c.lagReaders() {
		to := time.Unix(0, int64(max(r.r.Handed(), r.from, t.Created)))
		out = append(out, PartitionLag{Partition: r.p, ReadTo: to, Behind: behindHead(now, t.Params.ReadDelay, to)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// behindHead is how far to trails the readable frontier at now.
func behindHead(now time.Time, readDelay time.Duration, to time.Time) time.Duration {
	return max(now.Add(-readDelay).Sub(to), 0)
}

// lagReader is one partition reader of a consumer and where it started.
type lagReader struct {
	p    int
	r    partReader
	from uint64
}

func (c *Consumer) lagReaders() []lagReader {
	var out []lagReader
	if g := c.group; g != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, part := range g.parts {
			if part.reader != nil {
				out = append(out, lagReader{p: part.p, r: part.reader, from: part.from.Offset})
			}
		}
		return out
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.readers {
		if i < len(c.opts.Partitions) {
			out = append(out, lagReader{p: c.opts.Partitions[i], r: r, from: c.from})
		}
	}
	return out
}

// reportLag registers the consumer's lag with the client's gauge
// raidq_consumer_lag_seconds (no-op without metrics) until Close.
func (c *Consumer) reportLag() {
	c.unlag = c.c.core.Metrics().ConsumerLag().Add(func(emit func(string, int, string, float64)) {
		for _, l := range c.Lag() {
			emit(c.topic, l.Partition, c.opts.Group, l.Behind.Seconds())
		}
	})
}
