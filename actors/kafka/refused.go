package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/bus/kafkawire"
)

// refusedTxn are the transaction APIs: not offered in ApiVersions, but a
// client that sends one anyway (one that skips ApiVersions) is answered
// with UNSUPPORTED_VERSION in every error code of the answer rather than
// a closed connection, so it learns why. Versions up to 3 (v4+ batch
// transactions differently).
var refusedTxn = kafkawire.Versions{
	kmsg.AddPartitionsToTxn.Int16(): {0, 3},
	kmsg.AddOffsetsToTxn.Int16():    {0, 3},
	kmsg.EndTxn.Int16():             {0, 3},
	kmsg.TxnOffsetCommit.Int16():    {0, 3},
}

// decoded is what the read loop decodes: what is served, and the refused
// transaction APIs (answered by refuseTxn).
var decoded = func() kafkawire.Versions {
	v := kafkawire.Versions{}
	for k, r := range served {
		v[k] = r
	}
	for k, r := range refusedTxn {
		v[k] = r
	}
	return v
}()

// refuseTxn answers a transaction request UNSUPPORTED_VERSION (ok false:
// not a transaction request).
func (c *conn) refuseTxn(body kmsg.Request) (kmsg.Response, bool) {
	code := kerr.UnsupportedVersion.Code
	switch r := body.(type) {
	case *kmsg.AddPartitionsToTxnRequest:
		resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, true
	case *kmsg.AddOffsetsToTxnRequest:
		resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		resp.ErrorCode = code
		return resp, true
	case *kmsg.EndTxnRequest:
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = code
		return resp, true
	case *kmsg.TxnOffsetCommitRequest:
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, true
	}
	return nil, false
}
