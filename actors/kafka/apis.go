package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/bus/kafkawire"
)

// served lists the API keys and version ranges the gateway answers
// (docs/kafka.md has the same table). Anything else (transactions among
// them) is logged and answered as Kafka brokers do: ApiVersions with
// UNSUPPORTED_VERSION, other keys by closing the connection.
var served = kafkawire.Versions{
	// Produce from v0: librdkafka compresses only when the range reaches
	// v0. v0-v2 carry old message sets, refused per partition with
	// UNSUPPORTED_FOR_MESSAGE_FORMAT.
	kmsg.Produce.Int16():         {0, 9},
	kmsg.Fetch.Int16():           {4, 12},
	kmsg.ListOffsets.Int16():     {1, 7},
	kmsg.Metadata.Int16():        {1, 9},
	kmsg.OffsetCommit.Int16():    {0, 9},
	kmsg.OffsetFetch.Int16():     {0, 9},
	kmsg.FindCoordinator.Int16(): {0, 4},
	kmsg.JoinGroup.Int16():       {0, 9},
	kmsg.Heartbeat.Int16():       {0, 4},
	kmsg.LeaveGroup.Int16():      {0, 5},
	kmsg.SyncGroup.Int16():       {0, 5},
	kmsg.DescribeGroups.Int16():  {0, 6},
	kmsg.ListGroups.Int16():      {0, 5},
	// SaslHandshake from v0: librdkafka offers SASL only when v0 is in
	// range (it then uses v1 and SaslAuthenticate). A v0 client sends
	// its token raw after the handshake (conn.readRawSASL).
	kmsg.SASLHandshake.Int16():    {0, 1},
	kmsg.ApiVersions.Int16():      {0, 3},
	kmsg.CreateTopics.Int16():     {0, 5},
	kmsg.DeleteTopics.Int16():     {0, 5},
	kmsg.InitProducerID.Int16():   {0, 4},
	kmsg.DescribeConfigs.Int16():  {0, 4},
	kmsg.SASLAuthenticate.Int16(): {0, 2},
	kmsg.DeleteGroups.Int16():     {0, 3},
	kmsg.CreatePartitions.Int16(): {0, 3},
}

// requestTimeout bounds a request that names no timeout of its own.
// JoinGroup and SyncGroup wait for the rest of the group, up to the
// member's rebalance timeout (minutes for Java clients): the coordinator
// bounds those itself, so they end only with the connection.
const requestTimeout = 30 * time.Second

func init() {
	// The group APIs' ranges must stay within what the coordinator answers.
	for k, v := range CoordinatorVersions {
		if s, ok := served[k.Int16()]; ok && (s[0] < v[0] || s[1] > v[1]) {
			panic(fmt.Sprintf("kafka gateway: %s served %v beyond the coordinator's %v", kmsg.NameForKey(k.Int16()), s, v))
		}
	}
}

// unsupported logs a request whose key or version is not served and
// returns the answer it gets, if any (only ApiVersions has one).
func (c *conn) unsupported(req *kafkawire.Request) kmsg.Response {
	c.log.Info("kafka gateway: unsupported request; answering UNSUPPORTED_VERSION or closing the connection",
		"api", kmsg.NameForKey(req.Key), "key", req.Key, "version", req.Version)
	return kafkawire.UnsupportedVersionResponse(req, served)
}

// handle answers one decoded request (nil: no response).
func (c *conn) handle(req *kafkawire.Request) kmsg.Response {
	if resp, ok := c.refuseTxn(req.Body); ok {
		c.log.Info("kafka gateway: refusing a transaction request (transactions are not supported)", "api", kmsg.NameForKey(req.Key))
		return resp
	}
	ctx, cancel := context.WithCancel(WithClient(context.Background(), req.ClientID, c.remote))
	defer cancel()
	if req.Key != kmsg.JoinGroup.Int16() && req.Key != kmsg.SyncGroup.Int16() {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, requestTimeout)
		defer stop()
	}
	go func() {
		select {
		case <-c.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	switch r := req.Body.(type) {
	case *kmsg.ApiVersionsRequest:
		return kafkawire.ApiVersionsResponse(req.Version, served)
	case *kmsg.SASLHandshakeRequest:
		return c.saslHandshake(r)
	case *kmsg.SASLAuthenticateRequest:
		return c.saslAuthenticate(r)
	case *kmsg.MetadataRequest:
		return c.metadata(ctx, r)
	case *kmsg.ProduceRequest:
		return c.produce(ctx, r)
	case *kmsg.FetchRequest:
		return c.fetch(ctx, r)
	case *kmsg.ListOffsetsRequest:
		return c.listOffsets(ctx, r)
	case *kmsg.CreateTopicsRequest:
		return c.createTopics(ctx, r)
	case *kmsg.DeleteTopicsRequest:
		return c.deleteTopics(ctx, r)
	case *kmsg.CreatePartitionsRequest:
		return c.createPartitions(ctx, r)
	case *kmsg.DescribeConfigsRequest:
		return c.describeConfigs(r)
	case *kmsg.InitProducerIDRequest:
		return c.initProducerID(r)
	case *kmsg.FindCoordinatorRequest:
		return c.findCoordinator(r)
	default:
		return c.handleGroup(ctx, req)
	}
}

// handleGroup answers the group coordinator's requests (coordinator.go),
// after checking the user may use the group.
func (c *conn) handleGroup(ctx context.Context, req *kafkawire.Request) kmsg.Response {
	gc := c.g.groups
	if resp := c.memberRefused(req.Body); resp != nil {
		return resp
	}
	switch r := req.Body.(type) {
	case *kmsg.JoinGroupRequest:
		return gc.JoinGroup(ctx, r)
	case *kmsg.SyncGroupRequest:
		return gc.SyncGroup(ctx, r)
	case *kmsg.HeartbeatRequest:
		return gc.Heartbeat(ctx, r)
	case *kmsg.LeaveGroupRequest:
		return gc.LeaveGroup(ctx, r)
	case *kmsg.OffsetCommitRequest:
		return c.offsetCommit(ctx, r)
	case *kmsg.OffsetFetchRequest:
		return c.offsetFetch(ctx, r)
	case *kmsg.DescribeGroupsRequest:
		return gc.DescribeGroups(ctx, c.allowedGroups(r))
	case *kmsg.ListGroupsRequest:
		return c.listGroups(ctx, r)
	case *kmsg.DeleteGroupsRequest:
		return c.deleteGroups(ctx, r)
	}
	// Every key in served has a case above; the panic costs only this
	// connection (conn.serve and dispatch recover it and close it).
	panic(fmt.Sprintf("kafka gateway: served request %s has no handler", kmsg.NameForKey(req.Key)))
}

// listGroups answers only the groups the user may use.
func (c *conn) listGroups(ctx context.Context, r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := c.g.groups.ListGroups(ctx, r)
	if c.g.cfg.Users != nil {
		kept := resp.Groups[:0]
		for _, g := range resp.Groups {
			if c.groupAllowed(g.Group) {
				kept = append(kept, g)
			}
		}
		resp.Groups = kept
	}
	return resp
}

// deleteGroups deletes the groups the user may use, refusing the rest.
func (c *conn) deleteGroups(ctx context.Context, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	var refused []string
	allowed := *r
	allowed.Groups = nil
	for _, g := range r.Groups {
		if c.groupAllowed(g) {
			allowed.Groups = append(allowed.Groups, g)
		} else {
			refused = append(refused, g)
		}
	}
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	if len(allowed.Groups) > 0 {
		resp = c.g.groups.DeleteGroups(ctx, &allowed)
	}
	for _, g := range refused {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group, rg.ErrorCode = g, kerr.GroupAuthorizationFailed.Code
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// memberRefused answers GROUP_AUTHORIZATION_FAILED to a membership
// request (join, sync, heartbeat, leave) for a group the user may not
// use; nil for any other request, or an allowed one.
func (c *conn) memberRefused(body kmsg.Request) kmsg.Response {
	var group string
	switch r := body.(type) {
	case *kmsg.JoinGroupRequest:
		group = r.Group
	case *kmsg.SyncGroupRequest:
		group = r.Group
	case *kmsg.HeartbeatRequest:
		group = r.Group
	case *kmsg.LeaveGroupRequest:
		group = r.Group
	default:
		return nil
	}
	if c.groupAllowed(group) {
		return nil
	}
	resp := body.ResponseKind()
	code := kerr.GroupAuthorizationFailed.Code
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		r.ErrorCode = code
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = code
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = code
	}
	return resp
}

// offsetCommit checks the group and every topic, then commits.
func (c *conn) offsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) kmsg.Response {
	topicsOK := true
	for _, t := range r.Topics {
		topicsOK = topicsOK && c.allowed(OpConsume, t.Topic)
	}
	if !c.groupAllowed(r.Group) || !topicsOK {
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.GroupAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	return c.g.groups.OffsetCommit(ctx, r)
}

// offsetFetch checks the group, then answers from the coordinator.
func (c *conn) offsetFetch(ctx context.Context, r *kmsg.OffsetFetchRequest) kmsg.Response {
	if !c.groupAllowed(r.Group) {
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	for _, g := range r.Groups {
		if !c.groupAllowed(g.Group) {
			resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
			resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
			return resp
		}
	}
	return c.g.groups.OffsetFetch(ctx, r)
}

// allowedGroups drops from a DescribeGroups request the groups the user
// may not see (they are answered as if absent).
func (c *conn) allowedGroups(r *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsRequest {
	if c.g.cfg.Users == nil {
		return r
	}
	out := *r
	out.Groups = nil
	for _, g := range r.Groups {
		if c.groupAllowed(g) {
			out.Groups = append(out.Groups, g)
		}
	}
	return &out
}

func (c *conn) groupAllowed(group string) bool {
	return c.g.cfg.Users == nil || group == "" || c.g.cfg.Users.GroupAllowed(c.user, group)
}

func (c *conn) allowed(op Op, topic string) bool {
	return c.g.cfg.Users == nil || c.g.cfg.Users.Allowed(c.user, op, topic)
}
