package kafka

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// Committed offsets: OffsetCommit (checked by the core, written through)
// and OffsetFetch (from memory: the record as last read or written).

// OffsetCommit answers an OffsetCommit request (v0..v9), as Kafka does
// once the offsets are replicated: once they are written to the group's
// record. The commits that arrive while a write is in flight share the
// next one. A commit that loses to another gateway's record gets
// NOT_COORDINATOR (reconcile), one whose write failed and is not known to
// be in the record within KVTimeout and replyMargin REQUEST_TIMED_OUT (it
// may still be written): codes franz-go, librdkafka, sarama and kafka-go
// retry on (so is COORDINATOR_NOT_AVAILABLE, when the group is dropped or
// the gateway closes first).
func (c *Coordinator) OffsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	var codes [][]int16
	var wait *commitWait
	var held *kgroup
	code := unsupportedVersion
	if servedVersion(kmsg.OffsetCommit, r.Version) {
		code = c.locked(ctx, r.Group, func(g *kgroup, now int64) core.KafkaCode {
			code := g.core.Commit(now, r.MemberID, deref(r.InstanceID), r.Generation)
			if code == core.KafkaNone {
				codes, wait = c.commit(g, r, now)
				held = g
			}
			return code
		})
	}
	if wait != nil {
		c.awaitCommit(held, wait)
		for i, t := range r.Topics {
			for j, p := range t.Partitions {
				if codes[i][j] == 0 {
					codes[i][j] = wait.codes[tp{topic: t.Topic, part: p.Partition}]
				}
			}
		}
	}
	for i, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, int16(code)
			if codes != nil {
				rp.ErrorCode = codes[i][j]
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// commit takes an allowed commit's offsets (g.mu held), one code each
// (0: taken), and starts their write; the commit waits on the returned
// commitWait (nil: nothing taken).
func (c *Coordinator) commit(g *kgroup, r *kmsg.OffsetCommitRequest, now int64) ([][]int16, *commitWait) {
	wall := c.cfg.Wall().UnixNano()
	codes := make([][]int16, len(r.Topics))
	var w *commitWait
	for i, t := range r.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		for j, p := range t.Partitions {
			codes[i][j] = c.commitOne(g, t.Topic, p, wall)
			if codes[i][j] == 0 {
				if w == nil {
					w = newCommitWait()
				}
				k := tp{topic: t.Topic, part: p.Partition}
				w.keys[k] = g.offsets[k.topic][k.part]
			}
		}
	}
	if w != nil {
		g.commits = append(g.commits, w)
		g.dirty = true
		c.maybeWrite(g, now, false)
	}
	return codes, w
}

// awaitCommit waits for w's write, for at most KVTimeout and
// replyMargin: the time of a write in flight, then of the next one or of
// the re-read after a reply lost. Not for the request's own deadline: the
// answer says whether the offsets are in the record, known only once the
// write's outcome is (a client that gave up meanwhile is sent nothing).
func (c *Coordinator) awaitCommit(g *kgroup, w *commitWait) {
	t := time.NewTimer(c.lim.KVTimeout + replyMargin)
	defer t.Stop()
	select {
	case <-w.done:
		return
	case <-t.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for k := range w.keys { // unless written meanwhile
		w.settle(k, kerr.RequestTimedOut.Code)
	}
	g.commits = slices.DeleteFunc(g.commits, func(x *commitWait) bool { return x == w })
	g.flight = slices.DeleteFunc(g.flight, func(x *commitWait) bool { return x == w })
}

// commitOne checks and keeps one partition's offset within the limits:
// Kafka's topic names, metadata of MaxKafkaOffsetMetadata bytes (made
// UTF-8: the record is JSON), and the group's offsets within the
// record's share.
func (c *Coordinator) commitOne(g *kgroup, topic string, p kmsg.OffsetCommitRequestTopicPartition, wall int64) int16 {
	switch {
	case !meta.ValidKafkaTopic(topic) || p.Partition < 0:
		return kerr.UnknownTopicOrPartition.Code
	case c.cfg.ValidPartition != nil && !c.cfg.ValidPartition(topic, p.Partition):
		return kerr.UnknownTopicOrPartition.Code
	case p.Offset < -1:
		return kerr.OffsetOutOfRange.Code
	}
	md := strings.ToValidUTF8(deref(p.Metadata), "\uFFFD")
	if len(md) > meta.MaxKafkaOffsetMetadata {
		return kerr.OffsetMetadataTooLarge.Code
	}
	k := tp{topic: strings.Clone(topic), part: p.Partition}
	cost := g.offsetCost + meta.KafkaOffsetCost(md)
	old, had := g.offsets[k.topic][k.part]
	switch {
	case had:
		cost -= meta.KafkaOffsetCost(old.Metadata)
	case g.offsets[k.topic] == nil:
		cost += meta.KafkaTopicCost(k.topic)
	}
	if cost > meta.KafkaOffsetsBudget || !had && g.partitions() >= meta.MaxKafkaPartitions {
		return kerr.InvalidCommitOffsetSize.Code
	}
	g.putOffset(k, meta.KafkaOffset{Offset: p.Offset, Metadata: md, Committed: wall})
	g.unwritten[k] = true
	return 0
}

func (g *kgroup) partitions() int {
	n := 0
	for _, parts := range g.offsets {
		n += len(parts)
	}
	return n
}

// fetchTopic is one topic of an OffsetFetch: its partitions (all: nil).
type fetchTopic struct {
	topic string
	parts []int32
}

// fetched is one partition's answer.
type fetched struct {
	part     int32
	offset   int64
	metadata string
	code     int16
}

// OffsetFetch answers an OffsetFetch request (v0..v9; v8+ names several
// groups) from memory: a partition without a commit has offset -1.
func (c *Coordinator) OffsetFetch(ctx context.Context, r *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	if !servedVersion(kmsg.OffsetFetch, r.Version) {
		resp.ErrorCode = int16(unsupportedVersion)
		for _, rg := range r.Groups {
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group, g.ErrorCode = rg.Group, int16(unsupportedVersion)
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	}
	if r.Version >= 8 {
		for _, rg := range r.Groups {
			resp.Groups = append(resp.Groups, c.fetchGroup(ctx, rg))
		}
		return resp
	}
	var want []fetchTopic
	if r.Topics != nil || r.Version < 2 {
		want = make([]fetchTopic, 0, len(r.Topics))
		for _, t := range r.Topics {
			want = append(want, fetchTopic{topic: t.Topic, parts: t.Partitions})
		}
	}
	got, code := c.fetchOffsets(ctx, r.Group, want)
	if r.Version >= 2 {
		resp.ErrorCode = code
	}
	for _, t := range got {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.topic
		for _, f := range t.parts {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.Metadata, rp.ErrorCode = f.part, f.offset, kmsg.StringPtr(f.metadata), f.code
			if r.Version < 2 && code != 0 {
				rp.ErrorCode = code // v0-v1 have no group error: every partition carries it
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (c *Coordinator) fetchGroup(ctx context.Context, rg kmsg.OffsetFetchRequestGroup) kmsg.OffsetFetchResponseGroup {
	out := kmsg.NewOffsetFetchResponseGroup()
	out.Group = rg.Group
	var want []fetchTopic
	if rg.Topics != nil {
		want = make([]fetchTopic, 0, len(rg.Topics))
		for _, t := range rg.Topics {
			want = append(want, fetchTopic{topic: t.Topic, parts: t.Partitions})
		}
	}
	got, code := c.fetchOffsets(ctx, rg.Group, want)
	out.ErrorCode = code
	for _, t := range got {
		rt := kmsg.NewOffsetFetchResponseGroupTopic()
		rt.Topic = t.topic
		for _, f := range t.parts {
			rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			rp.Partition, rp.Offset, rp.Metadata, rp.ErrorCode = f.part, f.offset, kmsg.StringPtr(f.metadata), f.code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
	return out
}

type fetchedTopic struct {
	topic string
	parts []fetched
}

// fetchOffsets reads a group's offsets: want's partitions (nil: every
// committed one). With a group error, the partitions asked for come back
// with offset -1 and the code is returned.
func (c *Coordinator) fetchOffsets(ctx context.Context, name string, want []fetchTopic) ([]fetchedTopic, int16) {
	var out []fetchedTopic
	code := c.locked(ctx, name, func(g *kgroup, _ int64) core.KafkaCode {
		out = g.fetch(want)
		return core.KafkaNone
	})
	if code != core.KafkaNone {
		out = nil
		for _, t := range want {
			ft := fetchedTopic{topic: t.topic}
			for _, p := range t.parts {
				ft.parts = append(ft.parts, fetched{part: p, offset: -1})
			}
			out = append(out, ft)
		}
	}
	return out, int16(code)
}

// fetch answers from the record as last read or written here: the
// commits taken and not yet written are acknowledged to no one.
func (g *kgroup) fetch(want []fetchTopic) []fetchedTopic {
	if want == nil {
		for _, topic := range slices.Sorted(maps.Keys(g.stored)) {
			want = append(want, fetchTopic{topic: topic, parts: slices.Sorted(maps.Keys(g.stored[topic]))})
		}
	}
	out := make([]fetchedTopic, 0, len(want))
	for _, t := range want {
		ft := fetchedTopic{topic: t.topic}
		for _, p := range t.parts {
			f := fetched{part: p, offset: -1}
			if o, ok := g.stored[t.topic][p]; ok {
				f.offset, f.metadata = o.Offset, o.Metadata
			}
			ft.parts = append(ft.parts, f)
		}
		out = append(out, ft)
	}
	return out
}
