package raidq

import (
	"context"
	"fmt"
	"time"

	"github.com/raidq/raidq/bus/meta"
)

// TopicChange is what AlterTopic changes; nil fields stay as they are.
// Retention changes take effect at the nodes' next retention pass. The
// accept window changes by offset, AlterLead ahead of the change, so that
// every node switches at the same place (docs/design.md#changing-a-topics-timing);
// the read delay must stay at or above every accept window in force.
type TopicChange struct {
	Retention      *time.Duration
	RetentionBytes *int64
	ReadDelay      *time.Duration
	AcceptWindow   *time.Duration
}

// AlterLead is how far ahead of an AlterTopic call a new accept window
// starts.
const AlterLead = time.Duration(meta.AlterLead)

// AlterTopic changes a topic by compare-and-set on its record: a change
// that lands in between is re-read and the change checked again against
// it. Invalid values fail with ErrInvalidParams, a second change of the
// accept window before the first is in force with ErrAlterPending, a read
// delay below a window in force with ErrAlterOrder.
func (c *Client) AlterTopic(ctx context.Context, name string, ch TopicChange) (TopicInfo, error) {
	var r meta.TopicRecord
	err := c.Refusable(ctx, c.refusals.topicSubjects(name), func(ctx context.Context) (err error) {
		r, err = c.meta.AlterTopic(ctx, name, meta.TopicChange{Retention: ch.Retention, RetentionBytes: ch.RetentionBytes,
			ReadDelay: ch.ReadDelay, AcceptWindow: ch.AcceptWindow}, time.Now)
		return err
	})
	if err != nil {
		return TopicInfo{}, fmt.Errorf("alter topic %q: %w", name, err)
	}
	return topicInfo(r), nil
}

// AddPartitions raises a topic's partition count to count, placing the new
// partitions on the live nodes. Keyed messages map to partitions by the
// count, so a key's later messages may go to another partition than its
// earlier ones (as in Kafka).
func (c *Client) AddPartitions(ctx context.Context, name string, count int) (TopicInfo, error) {
	var r meta.TopicRecord
	err := c.Refusable(ctx, c.refusals.topicSubjects(name), func(ctx context.Context) (err error) {
		r, err = c.meta.AddPartitions(ctx, name, count, time.Now())
		return err
	})
	if err != nil {
		return TopicInfo{}, fmt.Errorf("add partitions to %q: %w", name, err)
	}
	return topicInfo(r), nil
}
