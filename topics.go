package raidq

import (
	"context"
	"fmt"
	"time"

	"github.com/raidq/raidq/bus/meta"
)

// TopicConfig is what CreateTopic asks for. Params has no defaults of
// its own: start from DefaultParams, LowLatencyParams or ProfileParams
// (zero parameters fail with ErrInvalidParams).
type TopicConfig struct {
	Name           string
	Partitions     int
	Params         Params
	Retention      time.Duration // 0: keep forever
	RetentionBytes int64         // per partition per node; 0: no size limit
}

// TopicInfo describes a topic as stored in the cluster's metadata.
type TopicInfo struct {
	Name           string
	Partitions     int
	Params         Params
	Retention      time.Duration // 0: keep forever
	RetentionBytes int64         // per partition per node; 0: no size limit
	// Ensembles are each partition's nodes, in shard order.
	Ensembles [][]string
	Created   time.Time
	// A change of the accept window under way (AlterTopic): offsets before
	// AcceptFrom keep PrevAcceptWindow, later ones use
	// Params.AcceptWindow; after AcceptSettles the change is in force on
	// every node. Zero times: none.
	PrevAcceptWindow time.Duration
	AcceptFrom       time.Time
	AcceptSettles    time.Time
}

func topicInfo(r meta.TopicRecord) TopicInfo {
	t := TopicInfo{Name: r.Name, Partitions: r.Partitions, Params: paramsOf(r.Params()), Retention: time.Duration(r.Retention),
		RetentionBytes: r.RetentionBytes, Ensembles: r.Ensembles, Created: time.Unix(0, int64(r.Created))}
	if r.AcceptFrom != 0 {
		t.PrevAcceptWindow, t.AcceptFrom, t.AcceptSettles = time.Duration(r.PrevAcceptWindow), time.Unix(0, int64(r.AcceptFrom)), meta.SettleTime(r)
	}
	return t
}

// CreateTopic creates a topic; ensembles are drawn from the live nodes.
// Invalid parameters fail with an error wrapping ErrInvalidParams that
// names the rule (e.g. "W must be > n/2"); a user without the admin role
// with ErrPermissionDenied as soon as the cluster refuses the write. So do
// AlterTopic, AddPartitions and DeleteTopic.
func (c *Client) CreateTopic(ctx context.Context, tc TopicConfig) (TopicInfo, error) {
	var r meta.TopicRecord
	err := c.Refusable(ctx, c.refusals.topicSubjects(tc.Name), func(ctx context.Context) (err error) {
		r, err = c.meta.CreateTopic(ctx, meta.TopicSpec{Name: tc.Name, Partitions: tc.Partitions, Params: tc.Params.quorum(),
			Retention: tc.Retention, RetentionBytes: tc.RetentionBytes}, time.Now())
		return err
	})
	if err != nil {
		return TopicInfo{}, fmt.Errorf("create topic %q: %w", tc.Name, err)
	}
	return topicInfo(r), nil
}

// Topics lists the cluster's topics.
func (c *Client) Topics(ctx context.Context) ([]TopicInfo, error) {
	rs, err := c.meta.Topics(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TopicInfo, len(rs))
	for i, r := range rs {
		out[i] = topicInfo(r)
	}
	return out, nil
}

// Topic describes one topic (ErrUnknownTopic if missing).
func (c *Client) Topic(ctx context.Context, name string) (TopicInfo, error) {
	r, err := c.meta.Topic(ctx, name)
	if err != nil {
		return TopicInfo{}, err
	}
	return topicInfo(r), nil
}

// DeleteTopic deletes a topic's metadata; nodes stop accepting its writes.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	return c.Refusable(ctx, c.refusals.topicSubjects(name), func(ctx context.Context) error {
		return c.meta.DeleteTopic(ctx, name)
	})
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
