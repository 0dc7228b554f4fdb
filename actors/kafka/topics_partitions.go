package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/bus/meta"
)

// createPartitions raises topics' partition counts through the cluster's
// add-partitions operation (raidq.Client.AddPartitions, as `raidq topic
// add-partitions`): the existing partitions and their ensembles stay, the
// new ones are placed on the live nodes. As in Kafka: the ALTER right on
// the topic is needed (here the admin role), a count that does not grow
// is INVALID_PARTITIONS, a manual assignment INVALID_REPLICA_ASSIGNMENT
// (raidq places partitions itself), a topic named twice INVALID_REQUEST,
// and validateOnly checks without changing anything.
func (c *conn) createPartitions(ctx context.Context, r *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	if r.TimeoutMillis > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(r.TimeoutMillis)*time.Millisecond)
		defer cancel()
	}
	named := map[string]int{}
	for _, t := range r.Topics {
		named[t.Topic]++
	}
	for _, t := range r.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		var msg string
		if named[t.Topic] > 1 {
			rt.ErrorCode, msg = kerr.InvalidRequest.Code, "the topic is named more than once in the request"
		} else {
			rt.ErrorCode, msg = c.createPartition(ctx, t, r.ValidateOnly)
		}
		if msg != "" {
			rt.ErrorMessage = kmsg.StringPtr(msg)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (c *conn) createPartition(ctx context.Context, t kmsg.CreatePartitionsRequestTopic, validateOnly bool) (int16, string) {
	if !c.allowed(OpAdmin, t.Topic) {
		return kerr.TopicAuthorizationFailed.Code, ""
	}
	cur, err := c.g.cat.Topic(t.Topic)
	if err != nil {
		return kerr.UnknownTopicOrPartition.Code, ""
	}
	if t.Assignment != nil {
		return kerr.InvalidReplicaAssignment.Code, "raidq places partitions itself (erasure-coded ensembles)"
	}
	count := int(t.Count)
	if code, msg := checkCount(cur.Partitions, count); code != 0 {
		return code, msg
	}
	if validateOnly {
		return 0, ""
	}
	if _, err := c.g.cfg.Client.AddPartitions(ctx, t.Topic, count); err != nil {
		c.log.Warn("kafka gateway: cannot add partitions", "topic", t.Topic, "count", count, "err", err)
		return partitionsErr(err), err.Error()
	}
	c.log.Info("kafka gateway: partitions added", "topic", t.Topic, "from", cur.Partitions, "to", count, "user", c.user)
	c.waitCatalog(ctx, t.Topic, func(t *meta.Topic) bool { return t.Partitions >= count })
	return 0, ""
}

// checkCount refuses a count that does not grow the topic or exceeds
// raidq's limit, with Kafka's message.
func checkCount(have, count int) (int16, string) {
	switch {
	case count == have:
		return kerr.InvalidPartitions.Code, fmt.Sprintf("Topic already has %d partitions.", have)
	case count < have:
		return kerr.InvalidPartitions.Code, fmt.Sprintf("Topic currently has %d partitions, which is higher than the requested %d.", have, count)
	case count > meta.MaxPartitions:
		return kerr.InvalidPartitions.Code, fmt.Sprintf("raidq topics have at most %d partitions.", meta.MaxPartitions)
	}
	return 0, ""
}

// partitionsErr maps an add-partitions error: a count overtaken by a
// concurrent change is INVALID_PARTITIONS; anything else (too few live
// nodes for an ensemble among them: the message says which) is
// UNKNOWN_SERVER_ERROR.
func partitionsErr(err error) int16 {
	switch {
	case errors.Is(err, raidq.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, raidq.ErrPermissionDenied):
		return kerr.TopicAuthorizationFailed.Code
	case errors.Is(err, meta.ErrAlter):
		return kerr.InvalidPartitions.Code
	case errors.Is(err, context.DeadlineExceeded):
		return kerr.RequestTimedOut.Code
	}
	return kerr.UnknownServerError.Code
}
