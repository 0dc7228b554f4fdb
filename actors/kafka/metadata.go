package kafka

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/bus/meta"
)

// brokers lists every live gateway as a broker.
func (c *conn) brokers() []kmsg.MetadataResponseBroker {
	var out []kmsg.MetadataResponseBroker
	for _, g := range c.g.reg.gateways() {
		b, ok := broker(g)
		if ok {
			out = append(out, b)
		}
	}
	return out
}

func broker(g meta.Gateway) (kmsg.MetadataResponseBroker, bool) {
	host, port, err := net.SplitHostPort(g.Advertise)
	if err != nil {
		return kmsg.MetadataResponseBroker{}, false
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return kmsg.MetadataResponseBroker{}, false
	}
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = g.BrokerID, host, int32(p)
	if g.Rack != "" {
		b.Rack = kmsg.StringPtr(g.Rack)
	}
	return b, true
}

// metadata answers with every live gateway as a broker and this gateway
// as the leader (and only replica) of every partition: clients send
// everything for a partition here, and never see NOT_LEADER.
func (c *conn) metadata(ctx context.Context, r *kmsg.MetadataRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	resp.Brokers = c.brokers()
	resp.ClusterID = kmsg.StringPtr(c.g.cfg.Cluster)
	resp.ControllerID = c.g.cfg.BrokerID
	var names []string
	if r.Topics == nil {
		for _, n := range c.g.cat.Names() {
			if c.allowed(OpDescribe, n) {
				names = append(names, n)
			}
		}
	} else {
		for _, t := range r.Topics {
			if t.Topic != nil {
				names = append(names, *t.Topic)
			}
		}
	}
	for _, n := range names {
		resp.Topics = append(resp.Topics, c.topicMetadata(n))
	}
	return resp
}

func (c *conn) topicMetadata(name string) kmsg.MetadataResponseTopic {
	rt := kmsg.NewMetadataResponseTopic()
	rt.Topic = kmsg.StringPtr(name)
	if !c.allowed(OpDescribe, name) {
		rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		return rt
	}
	t, err := c.g.cat.Topic(name)
	if err != nil {
		rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		return rt
	}
	if !t.Params.Gridded() {
		// A topic from before the offset grid: its positions have no
		// int64 order, so Kafka clients cannot address it.
		rt.ErrorCode = kerr.InvalidTopicException.Code
		return rt
	}
	self := c.g.cfg.BrokerID
	for p := 0; p < t.Partitions; p++ {
		rp := kmsg.NewMetadataResponseTopicPartition()
		rp.Partition, rp.Leader, rp.LeaderEpoch = int32(p), self, 0
		rp.Replicas, rp.ISR = []int32{self}, []int32{self}
		rt.Partitions = append(rt.Partitions, rp)
	}
	return rt
}

// findCoordinator names the live gateway that coordinates each group.
// Transactions are not served, so transaction coordinators are refused.
func (c *conn) findCoordinator(r *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := r.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{r.CoordinatorKey}
	}
	for _, key := range keys {
		rc := kmsg.NewFindCoordinatorResponseCoordinator()
		rc.Key = key
		if r.CoordinatorType != 0 {
			rc.ErrorCode = kerr.UnsupportedVersion.Code
			rc.ErrorMessage = kmsg.StringPtr("raidq does not support transactions")
		} else if !c.groupAllowed(key) {
			rc.ErrorCode = kerr.GroupAuthorizationFailed.Code
		} else if b, ok := broker(c.g.reg.coordinator(key)); ok {
			rc.NodeID, rc.Host, rc.Port = b.NodeID, b.Host, b.Port
		} else {
			rc.ErrorCode = kerr.CoordinatorNotAvailable.Code
		}
		resp.Coordinators = append(resp.Coordinators, rc)
	}
	if r.Version < 4 && len(resp.Coordinators) == 1 {
		rc := resp.Coordinators[0]
		resp.ErrorCode, resp.ErrorMessage = rc.ErrorCode, rc.ErrorMessage
		resp.NodeID, resp.Host, resp.Port = rc.NodeID, rc.Host, rc.Port
		resp.Coordinators = nil
	}
	return resp
}

// initProducerID hands out a producer id for idempotent produce: random
// 63 bits, so gateways need no shared counter (ids are per producer
// session; a collision needs two producers drawing one of 2^63 values).
// Transactional producers are refused: raidq has no transactions yet.
func (c *conn) initProducerID(r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	if r.TransactionalID != nil {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		c.log.Info("kafka gateway: refusing a transactional producer (transactions are not supported)", "transactional_id", *r.TransactionalID)
		return resp
	}
	if r.ProducerID >= 0 && r.ProducerEpoch >= 0 {
		// KIP-360: a producer bumping its epoch keeps its id.
		resp.ProducerID, resp.ProducerEpoch = r.ProducerID, r.ProducerEpoch+1
		if resp.ProducerEpoch < 0 {
			resp.ProducerID, resp.ProducerEpoch = newProducerID(), 0
		}
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = newProducerID(), 0
	return resp
}

func newProducerID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) >> 1)
}
