package raidq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// GroupReset is what ResetGroup moves.
type GroupReset struct {
	Topic string
	To    ResetTo
	// Partitions to reset (none: every partition of the topic).
	Partitions []int
	// Execute writes the new positions; false is a dry run that only
	// computes them.
	Execute bool
}

// PartitionReset is one partition's reset.
type PartitionReset struct {
	Topic     string
	Partition int
	// Committed: the group had a position here, From.
	Committed bool
	From      Position
	To        Position
	// KafkaOffset is To as a Kafka offset on a gridded topic; -1: none.
	KafkaOffset int64
	// Written: Execute wrote To.
	Written bool
}

// scanPartitions refines each committed partition's lag with a scan
// (WithLagScan), a few partitions at a time. A scan that fails (no
// permission to read, nodes unreachable) leaves the estimate without one.
func (c *Client) scanPartitions(ctx context.Context, parts []GroupPartition, cfg groupAdminConfig) {
	if cfg.scanLimit <= 0 {
		return
	}
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range parts {
		gp := &parts[i]
		if !gp.Committed || gp.Head.IsZero() {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			head := uint64(gp.Head.UnixNano())
			if scan, err := c.scanLag(ctx, gp.Topic, gp.Partition, gp.Position, head, cfg); err == nil {
				gp.Lag, gp.LagRecords, gp.LagRecordsAtLeast = partitionLag(head, gp.Position.Offset, &scan)
			}
		}()
	}
	wg.Wait()
}

// scanLag reads a partition from a committed position until its reader
// has handed over everything below head (unix ns), cfg.scanLimit records
// were seen, or cfg.scanTimeout passed. The reader hands a scan's records
// to the sink before it counts the scan as handed (actors.Reader.Handed),
// so once Handed reaches head every record below it has been counted.
func (c *Client) scanLag(ctx context.Context, topic string, p int, from Position, head uint64, cfg groupAdminConfig) (lagScan, error) {
	var mu sync.Mutex
	var s lagScan
	full := make(chan struct{})
	start := from.core()
	sink := func(ds []core.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range ds {
			if d.Pos.Less(start) || d.Pos.Offset >= head || s.records >= int64(cfg.scanLimit) {
				continue
			}
			if s.first == 0 || d.Pos.Offset < s.first {
				s.first = d.Pos.Offset
			}
			if s.records++; s.records == int64(cfg.scanLimit) {
				close(full)
			}
		}
	}
	r, err := c.core.NewReader(actors.ReaderConfig{Topic: topic, Partition: p, From: core.Position{Offset: from.Offset}, Sink: sink})
	if err != nil {
		return s, err
	}
	defer r.Close()
	timeout := cfg.scanTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	done := false
wait:
	for {
		if done = r.Handed() >= head; done {
			break
		}
		select {
		case <-tick.C:
		case <-full:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	mu.Lock()
	defer mu.Unlock()
	s.done = done
	return s, nil
}

// ResetGroup moves group's positions in one topic to r.To, or with
// r.Execute false only computes where (a dry run). It refuses while the
// topic has live members in the group (ErrGroupLive; WithForce
// overrides, and the members' partitions are fenced and re-read from the
// new positions) and refuses Kafka groups (ErrKafkaGroup: reset those
// with a Kafka client through a gateway). Each write is a compare-and-set
// on the revision read, so a commit made meanwhile is not overwritten:
// that partition fails with ErrFenced, the others are written, and the
// error names them. Members that join later start at the new positions.
func (c *Client) ResetGroup(ctx context.Context, group string, r GroupReset, opts ...GroupAdminOption) ([]PartitionReset, error) {
	cfg := adminConfig(opts)
	if err := bus.ValidName("group", group); err != nil {
		return nil, c.notNative(ctx, group, err)
	}
	t, err := c.core.Catalog().Topic(r.Topic)
	if err != nil {
		return nil, fmt.Errorf("reset group %s: %w", group, err)
	}
	parts, err := resetPartitions(r.Partitions, t.Partitions)
	if err != nil {
		return nil, fmt.Errorf("reset group %s: %w", group, err)
	}
	now := time.Now()
	at, err := r.To.resolve(now, topicTimes{created: t.Created, retention: t.Retention, readDelay: t.Params.ReadDelay})
	if err != nil {
		return nil, err
	}
	snap, err := c.emptyEnough(ctx, group, r.Topic, cfg)
	if err != nil {
		return nil, err
	}
	revs := make(map[int]meta.GroupRecord)
	for _, rec := range snap.recs {
		if rec.Kind == 'p' && rec.Topic == r.Topic {
			revs[rec.Partition] = rec
		}
	}
	out := make([]PartitionReset, 0, len(parts))
	for _, p := range parts {
		pr := PartitionReset{Topic: r.Topic, Partition: p, To: Position{Offset: at}, KafkaOffset: kafkaOffset(Position{Offset: at}, t.Params.Grid)}
		if rec, ok := revs[p]; ok {
			pr.Committed, pr.From = rec.Pos.Offset != 0, Position{Offset: rec.Pos.Offset, Index: rec.Pos.Index}
		}
		out = append(out, pr)
	}
	if !r.Execute {
		return out, nil
	}
	err = c.Refusable(ctx, c.refusals.groupAdminSubjects(group), func(ctx context.Context) error {
		return c.writeResets(ctx, group, out, revs, now)
	})
	if errors.Is(err, ErrPermissionDenied) {
		err = fmt.Errorf("reset group %s: %w", group, err)
	}
	return out, err
}

// writeResets writes each reset as a released record (naming no member,
// so a member assigned the partition claims it from there); a record that
// changed since it was read is left and reported.
func (c *Client) writeResets(ctx context.Context, group string, rs []PartitionReset, revs map[int]meta.GroupRecord, now time.Time) error {
	var errs []error
	for i := range rs {
		pr := &rs[i]
		rec := meta.GroupPosition{Offset: pr.To.Offset, Index: pr.To.Index, Updated: now.UnixNano()}
		_, err := c.meta.CommitPosition(ctx, group, pr.Topic, pr.Partition, rec, revs[pr.Partition].Rev)
		if err != nil {
			errs = append(errs, fmt.Errorf("partition %d: %w", pr.Partition, err))
			continue
		}
		pr.Written = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("reset group %s: not every partition was reset: %w", group, errors.Join(errs...))
	}
	return nil
}

// resetPartitions checks the partitions asked for (none: all of them).
func resetPartitions(asked []int, partitions int) ([]int, error) {
	if len(asked) == 0 {
		out := make([]int, partitions)
		for p := range out {
			out[p] = p
		}
		return out, nil
	}
	out := slices.Clone(asked)
	sort.Ints(out)
	for _, p := range out {
		if p < 0 || p >= partitions {
			return nil, fmt.Errorf("%w: partition %d: the topic has partitions 0..%d", ErrBadReset, p, partitions-1)
		}
	}
	return slices.Compact(out), nil
}

// emptyEnough snapshots a native group and refuses while it has live
// members (in topic, or in any topic for ""), unless forced. A group
// with no native records must not be a Kafka group's name.
func (c *Client) emptyEnough(ctx context.Context, group, topic string, cfg groupAdminConfig) (nativeSnapshot, error) {
	snap, err := c.snapshotNative(ctx, group, cfg)
	if err != nil {
		return snap, err
	}
	if len(snap.recs) == 0 {
		if err := c.notNative(ctx, group, nil); err != nil {
			return snap, err
		}
	}
	var live []string
	for _, r := range snap.recs {
		if r.Kind == 'm' && (topic == "" || r.Topic == topic) && snap.live[r.Topic+"/"+r.Member] {
			live = append(live, r.Member)
		}
	}
	if len(live) > 0 && !cfg.force {
		sort.Strings(live)
		return snap, fmt.Errorf("group %s: %w (%v); stop them first, or force", group, ErrGroupLive, slices.Compact(live))
	}
	return snap, nil
}

// notNative is the error for a name that is not a native group's: a
// Kafka group's (ErrKafkaGroup), else nameErr (nil: none, the name is
// free).
func (c *Client) notNative(ctx context.Context, group string, nameErr error) error {
	taken, err := c.meta.KafkaGroupExists(ctx, group)
	switch {
	case err != nil:
		return fmt.Errorf("group %q: check Kafka groups: %w", group, err)
	case taken:
		return fmt.Errorf("group %q: %w: change it with a Kafka client through a gateway "+
			"(kafka-consumer-groups --reset-offsets or --delete)", group, ErrKafkaGroup)
	}
	return nameErr
}

// DeleteGroup removes every record of a native group (positions and
// heartbeats, in every topic) and returns how many. It refuses while the
// group has live members (ErrGroupLive) unless WithForce, an unknown
// group (ErrUnknownGroup) and a Kafka group (ErrKafkaGroup). Without
// force a record that changed since it was read is left (ErrFenced).
func (c *Client) DeleteGroup(ctx context.Context, group string, opts ...GroupAdminOption) (int, error) {
	cfg := adminConfig(opts)
	if err := bus.ValidName("group", group); err != nil {
		return 0, c.notNative(ctx, group, err)
	}
	snap, err := c.emptyEnough(ctx, group, "", cfg)
	if err != nil {
		return 0, err
	}
	if len(snap.recs) == 0 {
		return 0, fmt.Errorf("%q: %w", group, ErrUnknownGroup)
	}
	n := 0
	err = c.Refusable(ctx, c.refusals.groupAdminSubjects(group), func(ctx context.Context) error {
		var errs []error
		for _, r := range snap.recs {
			rev := r.Rev
			if cfg.force {
				rev = 0
			}
			if err := c.meta.DeleteGroupRecord(ctx, r.Key, rev); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
		if len(errs) > 0 {
			return fmt.Errorf("delete group %s: %d records left: %w", group, len(errs), errors.Join(errs...))
		}
		return nil
	})
	if errors.Is(err, ErrPermissionDenied) {
		err = fmt.Errorf("delete group %s: %w", group, err)
	}
	return n, err
}

// kafkaInfo sums a Kafka group's record up.
func kafkaInfo(kg meta.KafkaGroup) GroupInfo {
	g := GroupInfo{Name: kg.Name, Kafka: true, State: kg.State, LiveMembers: len(kg.Members)}
	for topic := range kg.Offsets {
		g.Topics = append(g.Topics, topic)
	}
	for topic := range kafkaOwners(kg) {
		if !slices.Contains(g.Topics, topic) {
			g.Topics = append(g.Topics, topic)
		}
	}
	sort.Strings(g.Topics)
	return g
}

// kafkaOwners maps topic -> partition -> the member assigned it, from
// the members' consumer-protocol assignments (none for another protocol
// type, or an assignment that does not decode).
func kafkaOwners(kg meta.KafkaGroup) map[string]map[int]string {
	out := make(map[string]map[int]string)
	if kg.ProtocolType != "consumer" {
		return out
	}
	for _, m := range kg.Members {
		a, err := kafkaAssignment(m.Assignment)
		if err != nil {
			continue
		}
		for topic, ps := range a {
			if out[topic] == nil {
				out[topic] = make(map[int]string)
			}
			for _, p := range ps {
				out[topic][int(p)] = m.ID
			}
		}
	}
	return out
}

// describeKafka describes a Kafka group from its record: members as its
// coordinator last wrote them, owners from their assignments, committed
// Kafka offsets as positions.
func (c *Client) describeKafka(ctx context.Context, kg meta.KafkaGroup, cfg groupAdminConfig) (GroupDescription, error) {
	d := GroupDescription{GroupInfo: kafkaInfo(kg)}
	for _, m := range kg.Members {
		d.Members = append(d.Members, GroupMemberInfo{ID: m.ID, Live: true, Session: time.Duration(m.Session),
			ClientID: m.ClientID, ClientHost: m.ClientHost})
	}
	owners := kafkaOwners(kg)
	topics := d.Topics
	if cfg.topic != "" {
		topics = []string{cfg.topic}
	}
	now := time.Now()
	for _, topic := range topics {
		offs := kg.Offsets[topic]
		have := make([]int, 0, len(offs))
		for p := range offs {
			have = append(have, int(p))
		}
		t, parts := c.topicPartitions(topic, have)
		for _, p := range parts {
			gp := GroupPartition{Topic: topic, Partition: p, KafkaOffset: -1, Lag: -1, LagRecords: -1, Owner: owners[topic][p]}
			gp.OwnerLive = gp.Owner != ""
			if o, ok := offs[int32(p)]; ok && o.Offset >= 0 && t != nil {
				gp.Committed, gp.Position = true, kafkaPosition(o.Offset, t.Params.Grid)
				gp.Updated = time.Unix(0, o.Committed)
			}
			if t != nil {
				setHead(&gp, t.Params.Grid, t.Params.ReadDelay, now)
			}
			d.Partitions = append(d.Partitions, gp)
		}
	}
	c.scanPartitions(ctx, d.Partitions, cfg)
	return d, nil
}
