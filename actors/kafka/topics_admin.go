package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/bus/meta"
)

// createTopics creates topics with raidq's default coding parameters (n,
// k, W come from the cluster, so ReplicationFactor is ignored: a raidq
// partition is always spread over its ensemble). Configs honoured:
// retention.ms and retention.bytes; others are refused with
// INVALID_CONFIG so no setting is silently lost.
func (c *conn) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		code, msg := c.createTopic(ctx, t, r.ValidateOnly)
		rt.ErrorCode = code
		if msg != "" {
			rt.ErrorMessage = kmsg.StringPtr(msg)
		}
		if code == 0 {
			parts := t.NumPartitions
			if parts <= 0 {
				parts = 1
			}
			rt.NumPartitions, rt.ReplicationFactor = parts, 1
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (c *conn) createTopic(ctx context.Context, t kmsg.CreateTopicsRequestTopic, validateOnly bool) (int16, string) {
	if !c.allowed(OpAdmin, t.Topic) {
		return kerr.TopicAuthorizationFailed.Code, ""
	}
	if len(t.ReplicaAssignment) > 0 {
		return kerr.InvalidReplicaAssignment.Code, "raidq places partitions itself (erasure-coded ensembles)"
	}
	tc := raidq.TopicConfig{Name: t.Topic, Partitions: int(t.NumPartitions), Params: raidq.DefaultParams()}
	if tc.Partitions <= 0 {
		tc.Partitions = 1
	}
	for _, cfg := range t.Configs {
		if err := applyConfig(&tc, cfg.Name, cfg.Value); err != nil {
			return kerr.InvalidConfig.Code, err.Error()
		}
	}
	if validateOnly {
		if err := raidq.ValidateParams(tc.Params); err != nil {
			return kerr.InvalidConfig.Code, err.Error()
		}
		return 0, ""
	}
	if _, err := c.g.cfg.Client.CreateTopic(ctx, tc); err != nil {
		return topicErr(err), err.Error()
	}
	c.log.Info("kafka gateway: topic created", "topic", t.Topic, "partitions", tc.Partitions, "user", c.user)
	// Wait for this gateway's catalog, so the client's next Metadata sees it.
	c.waitCatalog(ctx, t.Topic, func(*meta.Topic) bool { return true })
	return 0, ""
}

// waitCatalog waits (up to 5 s) until this gateway's catalog holds topic
// in a state ok accepts: the metadata watch learns a change a moment
// after it is written, and a client's next Metadata must see it.
func (c *conn) waitCatalog(ctx context.Context, topic string, ok func(*meta.Topic) bool) {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for wctx.Err() == nil {
		if t, err := c.g.cat.Topic(topic); err == nil && ok(t) {
			return
		}
		select {
		case <-wctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// applyConfig sets one topic config of a CreateTopics request.
func applyConfig(tc *raidq.TopicConfig, name string, value *string) error {
	if value == nil {
		return nil
	}
	switch name {
	case "retention.ms":
		ms, err := strconv.ParseInt(*value, 10, 64)
		if err != nil || ms < -1 {
			return fmt.Errorf("retention.ms %q: want milliseconds or -1", *value)
		}
		if ms > 0 {
			tc.Retention = time.Duration(ms) * time.Millisecond
		}
	case "retention.bytes":
		b, err := strconv.ParseInt(*value, 10, 64)
		if err != nil || b < -1 {
			return fmt.Errorf("retention.bytes %q: want bytes or -1", *value)
		}
		if b > 0 {
			tc.RetentionBytes = b
		}
	case "cleanup.policy":
		if *value != "delete" {
			return fmt.Errorf("cleanup.policy %q: raidq supports only delete (no compaction yet)", *value)
		}
	default:
		return fmt.Errorf("config %s is not supported by raidq (supported: retention.ms, retention.bytes, cleanup.policy=delete)", name)
	}
	return nil
}

func topicErr(err error) int16 {
	switch {
	case errors.Is(err, raidq.ErrInvalidParams):
		return kerr.InvalidConfig.Code
	case errors.Is(err, raidq.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, meta.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code
	}
	return kerr.UnknownServerError.Code
}

// deleteTopics deletes topics by name (topic ids are not served).
func (c *conn) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	names := r.TopicNames
	for _, t := range r.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
		}
	}
	for _, n := range names {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic = kmsg.StringPtr(n)
		switch {
		case !c.allowed(OpAdmin, n):
			rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		default:
			if err := c.g.cfg.Client.DeleteTopic(ctx, n); err != nil {
				rt.ErrorCode, rt.ErrorMessage = topicErr(err), kmsg.StringPtr(err.Error())
			} else {
				c.g.fetches.dropTopic(n)
				c.g.prods.drop(n)
				c.log.Info("kafka gateway: topic deleted", "topic", n, "user", c.user)
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// describeConfigs answers topic resources with their retention and
// raidq's coding parameters, and broker resources with nothing (no
// broker configs apply to a gateway).
func (c *conn) describeConfigs(r *kmsg.DescribeConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, res := range r.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		if res.ResourceType == kmsg.ConfigResourceTypeTopic {
			c.topicConfigs(&rr, res.ConfigNames)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

func (c *conn) topicConfigs(rr *kmsg.DescribeConfigsResponseResource, only []string) {
	if !c.allowed(OpDescribe, rr.ResourceName) {
		rr.ErrorCode = kerr.TopicAuthorizationFailed.Code
		return
	}
	t, err := c.g.cat.Topic(rr.ResourceName)
	if err != nil {
		rr.ErrorCode = kerr.UnknownTopicOrPartition.Code
		return
	}
	ret, retBytes := int64(-1), int64(-1)
	if t.Retention > 0 {
		ret = t.Retention.Milliseconds()
	}
	if t.RetentionBytes > 0 {
		retBytes = t.RetentionBytes
	}
	p := t.Params
	all := [][2]string{
		{"retention.ms", strconv.FormatInt(ret, 10)},
		{"retention.bytes", strconv.FormatInt(retBytes, 10)},
		{"cleanup.policy", "delete"},
		{"message.timestamp.type", "CreateTime"},
		{"max.message.bytes", strconv.Itoa(maxBatchBytes)},
		{"raidq.shards", strconv.Itoa(p.N)},
		{"raidq.data.shards", strconv.Itoa(p.K)},
		{"raidq.write.quorum", strconv.Itoa(p.W)},
		{"raidq.read.delay.ms", strconv.FormatInt(p.ReadDelay.Milliseconds(), 10)},
		{"raidq.offset.grid.ns", strconv.FormatUint(p.Grid, 10)},
	}
	want := map[string]bool{}
	for _, n := range only {
		want[n] = true
	}
	for _, kv := range all {
		if len(only) > 0 && !want[kv[0]] {
			continue
		}
		cfg := kmsg.NewDescribeConfigsResponseResourceConfig()
		cfg.Name, cfg.Value, cfg.ReadOnly = kv[0], kmsg.StringPtr(kv[1]), kv[0] != "retention.ms" && kv[0] != "retention.bytes"
		cfg.Source = kmsg.ConfigSourceDynamicTopicConfig
		rr.Configs = append(rr.Configs, cfg)
	}
}
