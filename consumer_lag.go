package raidq

import "time"

// PartitionLag is how far one partition's reader has read.
type PartitionLag struct {
	Partition int
	// ReadTo: every record the reader could read before this time has
	// been handed to the consumer (records in doubt there come later,
	// Message.Late).
	ReadTo time.Time
	// Behind is how far ReadTo trails the newest time a reader may read
	// (now minus the topic's read delay); 0 when caught up.
	Behind time.Duration
}

// Lag reports each partition reader's progress, by partition. A group
// member reports the partitions it reads now.
func (c *Consumer) Lag() []PartitionLag {
	t, err := c.c.core.Catalog().Topic(c.topic)
	if err != nil {
		return nil
	}
	head := time.Now().Add(-t.Params.ReadDelay)
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []PartitionLag
	for i, r := range c.readers {
		if i >= len(c.opts.Partitions) {
			break
		}
		to := time.Unix(0, int64(r.Handed()))
		out = append(out, PartitionLag{Partition: c.opts.Partitions[i], ReadTo: to, Behind: max(head.Sub(to), 0)})
	}
	return out
}
