package raidq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raidq/raidq/bus/meta"
)

// TopicConfig is what CreateTopic asks for. Zero fields take the defaults
// of DefaultParams.
type TopicConfig struct {
	Name           string
	Partitions     int
	Params         Params
	Retention      time.Duration // 0: keep forever
	RetentionBytes int64         // per partition per node; 0: no size limit
}

// TopicInfo describes a topic as stored in the cluster's metadata.
type TopicInfo = meta.TopicRecord

var errNoMeta = errors.New("this client has no cluster metadata (it was given a fixed catalog)")

// CreateTopic creates a topic; ensembles are drawn from the live nodes.
// Invalid parameters fail with an error wrapping ErrInvalidParams that
// names the rule (e.g. "W must be > n/2").
func (c *Client) CreateTopic(ctx context.Context, tc TopicConfig) (TopicInfo, error) {
	if c.meta == nil {
		return TopicInfo{}, errNoMeta
	}
	r, err := c.meta.CreateTopic(ctx, meta.TopicSpec{Name: tc.Name, Partitions: tc.Partitions, Params: tc.Params,
		Retention: tc.Retention, RetentionBytes: tc.RetentionBytes}, time.Now())
	if err != nil {
		return r, fmt.Errorf("create topic %q: %w", tc.Name, err)
	}
	return r, nil
}

// Topics lists the cluster's topics.
func (c *Client) Topics(ctx context.Context) ([]TopicInfo, error) {
	if c.meta == nil {
		return nil, errNoMeta
	}
	return c.meta.Topics(ctx)
}

// Topic describes one topic (ErrUnknownTopic if missing).
func (c *Client) Topic(ctx context.Context, name string) (TopicInfo, error) {
	if c.meta == nil {
		return TopicInfo{}, errNoMeta
	}
	return c.meta.Topic(ctx, name)
}

// DeleteTopic deletes a topic's metadata; nodes stop accepting its writes.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	if c.meta == nil {
		return errNoMeta
	}
	return c.meta.DeleteTopic(ctx, name)
}

// WaitTopic waits until the client's catalog knows the topic (a topic
// created by another client reaches this one through the KV watch).
func (c *Client) WaitTopic(ctx context.Context, name string) error {
	for {
		if _, err := c.core.Catalog().Topic(name); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %q: %w", name, ErrUnknownTopic)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
