package raidq

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// Group administration (raidq group list, describe, reset, delete):
// native groups from their records in the groups bucket, Kafka clients'
// groups from their `kgroup.<name>` records. The arithmetic is in
// groups_admin_calc.go; this file reads and writes.

// GroupAdminOption configures Groups, DescribeGroup, ResetGroup and
// DeleteGroup.
type GroupAdminOption func(*groupAdminConfig)

type groupAdminConfig struct {
	watch       time.Duration
	topic       string
	scanLimit   int
	scanTimeout time.Duration
	force       bool
}

// DefaultHeartbeatWatch is how long the admin calls watch the members'
// heartbeat records to tell live members (records that change) from
// stale ones: two heartbeat intervals and a half.
const DefaultHeartbeatWatch = 5 * GroupInterval / 2

// WithHeartbeatWatch sets how long to watch heartbeats (default
// DefaultHeartbeatWatch). A member is live if its record changed
// meanwhile. d <= 0 does not watch: every member with a record counts as
// live, so ResetGroup and DeleteGroup refuse while any record is there.
func WithHeartbeatWatch(d time.Duration) GroupAdminOption {
	return func(c *groupAdminConfig) { c.watch = max(d, 0) }
}

// WithGroupTopic limits DescribeGroup to one topic of the group.
func WithGroupTopic(topic string) GroupAdminOption {
	return func(c *groupAdminConfig) { c.topic = topic }
}

// WithLagScan makes DescribeGroup count each partition's unread records
// by reading it from the committed position to the readable frontier,
// stopping after limit records or timeout (limit <= 0: no scan, lag in
// records is not counted). The scan decodes what it reads: keep the
// limit small on a busy topic.
func WithLagScan(limit int, timeout time.Duration) GroupAdminOption {
	return func(c *groupAdminConfig) { c.scanLimit, c.scanTimeout = limit, timeout }
}

// WithForce lets ResetGroup and DeleteGroup act while the group has live
// members. A reset member's partitions are fenced: it stops reading them
// and takes them again from the new positions at its next round.
func WithForce() GroupAdminOption { return func(c *groupAdminConfig) { c.force = true } }

func adminConfig(opts []GroupAdminOption) groupAdminConfig {
	c := groupAdminConfig{watch: DefaultHeartbeatWatch}
	for _, f := range opts {
		f(&c)
	}
	return c
}

// GroupInfo is one consumer group as Groups lists it.
type GroupInfo struct {
	Name string
	// Kafka: a group of Kafka clients, coordinated by a gateway
	// (docs/kafka.md#consumer-groups); its positions are Kafka offsets.
	Kafka bool
	// State: a Kafka group's (Empty, PreparingRebalance,
	// CompletingRebalance, Stable); a native group is "Active" with live
	// members, else "Empty".
	State  string
	Topics []string
	// LiveMembers are the members heartbeating now (a Kafka group's: the
	// members its coordinator last wrote).
	LiveMembers int
}

// GroupMemberInfo is one member of a group.
type GroupMemberInfo struct {
	ID    string
	Topic string // native members heartbeat per topic; "" for Kafka members
	Live  bool
	// Session is the member's session timeout.
	Session time.Duration
	// Heartbeat is the member's last heartbeat on its own clock (native
	// members; informational, never compared).
	Heartbeat time.Time
	// ClientID and ClientHost: a Kafka member's.
	ClientID, ClientHost string
}

// GroupPartition is a group's committed position in one partition.
type GroupPartition struct {
	Topic     string
	Partition int
	// Committed: the group has a position here (false: none, or a record
	// claimed before any commit; a member starts at its WithStart,
	// default the topic's creation).
	Committed bool
	// Position is the next record to deliver; Position.Time() its time.
	Position Position
	// KafkaOffset is Position as a Kafka offset on a gridded topic; -1:
	// none (no grid, or no position).
	KafkaOffset int64
	// Owner is the member holding the partition: the one its position
	// record names (written when a member claims it and at each commit;
	// cleared when it is released); "" none.
	Owner     string
	OwnerLive bool
	// Updated is when the position was last written (writer's clock).
	Updated time.Time
	// Head is the readable frontier, now minus the topic's read delay.
	Head time.Time
	// Lag is how far the group trails Head in time (partitionLag); -1:
	// unknown (no position, or the topic is gone).
	Lag time.Duration
	// LagRecords counts the records between Position and Head (-1: not
	// counted); LagRecordsAtLeast: the scan stopped at its limit or
	// deadline, there may be more.
	LagRecords        int64
	LagRecordsAtLeast bool
}

// GroupDescription is DescribeGroup's answer.
type GroupDescription struct {
	GroupInfo
	Members    []GroupMemberInfo
	Partitions []GroupPartition
}

// nativeSnapshot is a native group's records, with liveness judged.
type nativeSnapshot struct {
	recs []meta.GroupRecord
	live map[string]bool // "topic/member"
}

// snapshotNative lists the native groups' records (one group, or all
// for ""), watching the heartbeats for cfg.watch to judge liveness.
func (c *Client) snapshotNative(ctx context.Context, group string, cfg groupAdminConfig) (nativeSnapshot, error) {
	first, err := c.meta.GroupRecords(ctx, group)
	if err != nil {
		return nativeSnapshot{}, fmt.Errorf("list group records: %w", err)
	}
	if cfg.watch <= 0 {
		return nativeSnapshot{recs: first, live: liveMembers(beatRevs(first), nil)}, nil
	}
	select {
	case <-time.After(cfg.watch):
	case <-ctx.Done():
		return nativeSnapshot{}, ctx.Err()
	}
	second, err := c.meta.GroupRecords(ctx, group)
	if err != nil {
		return nativeSnapshot{}, fmt.Errorf("list group records: %w", err)
	}
	return nativeSnapshot{recs: second, live: liveMembers(beatRevs(first), beatRevs(second))}, nil
}

func beatRevs(recs []meta.GroupRecord) map[string]uint64 {
	out := make(map[string]uint64)
	for _, r := range recs {
		if r.Kind == 'm' {
			out[r.Topic+"/"+r.Member] = r.Rev
		}
	}
	return out
}

// infos sums the snapshot up per group.
func (s nativeSnapshot) infos() []GroupInfo {
	byName := make(map[string]*GroupInfo)
	members := make(map[string]map[string]bool)
	for _, r := range s.recs {
		g := byName[r.Group]
		if g == nil {
			g = &GroupInfo{Name: r.Group, State: "Empty"}
			byName[r.Group], members[r.Group] = g, make(map[string]bool)
		}
		if !slices.Contains(g.Topics, r.Topic) {
			g.Topics = append(g.Topics, r.Topic)
		}
		if r.Kind == 'm' && s.live[r.Topic+"/"+r.Member] {
			members[r.Group][r.Member] = true
		}
	}
	out := make([]GroupInfo, 0, len(byName))
	for name, g := range byName {
		sort.Strings(g.Topics)
		if g.LiveMembers = len(members[name]); g.LiveMembers > 0 {
			g.State = "Active"
		}
		out = append(out, *g)
	}
	return out
}

// Groups lists the consumer groups, native and Kafka, sorted by name,
// with their topics and live members. It takes the heartbeat watch
// (WithHeartbeatWatch) to judge liveness.
func (c *Client) Groups(ctx context.Context, opts ...GroupAdminOption) ([]GroupInfo, error) {
	cfg := adminConfig(opts)
	snap, err := c.snapshotNative(ctx, "", cfg)
	if err != nil {
		return nil, err
	}
	out := snap.infos()
	kgs, err := c.meta.KafkaGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list Kafka groups: %w", err)
	}
	for _, kg := range kgs {
		out = append(out, kafkaInfo(kg))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// DescribeGroup describes one group: its members, and for each partition
// of its topics (WithGroupTopic: of one) the committed position, owner
// and lag. WithLagScan also counts the unread records.
func (c *Client) DescribeGroup(ctx context.Context, group string, opts ...GroupAdminOption) (GroupDescription, error) {
	cfg := adminConfig(opts)
	if bus.ValidName("group", group) == nil {
		snap, err := c.snapshotNative(ctx, group, cfg)
		if err != nil {
			return GroupDescription{}, err
		}
		if len(snap.recs) > 0 {
			return c.describeNative(ctx, group, snap, cfg)
		}
	}
	kg, rev, err := c.meta.KafkaGroup(ctx, group)
	if err != nil {
		return GroupDescription{}, fmt.Errorf("read Kafka group %q: %w", group, err)
	}
	if rev == 0 {
		return GroupDescription{}, fmt.Errorf("%q: %w", group, ErrUnknownGroup)
	}
	return c.describeKafka(ctx, kg, cfg)
}

func (c *Client) describeNative(ctx context.Context, group string, snap nativeSnapshot, cfg groupAdminConfig) (GroupDescription, error) {
	infos := snap.infos()
	d := GroupDescription{GroupInfo: infos[0]}
	positions := make(map[string]map[int]meta.GroupRecord)
	for _, r := range snap.recs {
		if cfg.topic != "" && r.Topic != cfg.topic {
			continue
		}
		switch r.Kind {
		case 'm':
			live := snap.live[r.Topic+"/"+r.Member]
			d.Members = append(d.Members, GroupMemberInfo{ID: r.Member, Topic: r.Topic, Live: live,
				Session: sessionOf(r.Beat), Heartbeat: time.Unix(0, r.Beat.Heartbeat)})
		case 'p':
			if positions[r.Topic] == nil {
				positions[r.Topic] = make(map[int]meta.GroupRecord)
			}
			positions[r.Topic][r.Partition] = r
		}
	}
	sort.Slice(d.Members, func(i, j int) bool {
		return d.Members[i].Topic+"/"+d.Members[i].ID < d.Members[j].Topic+"/"+d.Members[j].ID
	})
	topics := d.Topics
	if cfg.topic != "" {
		topics = []string{cfg.topic}
	}
	now := time.Now()
	for _, topic := range topics {
		d.Partitions = append(d.Partitions, c.nativePartitions(topic, positions[topic], snap.live, now)...)
	}
	c.scanPartitions(ctx, d.Partitions, cfg)
	return d, nil
}

func sessionOf(m meta.GroupMember) time.Duration {
	if s := time.Duration(m.Session); s > 0 && s <= meta.MaxSession {
		return s
	}
	return meta.GroupTTL
}

// nativePartitions lists a topic's partitions with the group's records.
func (c *Client) nativePartitions(topic string, recs map[int]meta.GroupRecord, live map[string]bool, now time.Time) []GroupPartition {
	have := make([]int, 0, len(recs))
	for p := range recs {
		have = append(have, p)
	}
	t, parts := c.topicPartitions(topic, have)
	out := make([]GroupPartition, 0, len(parts))
	for _, p := range parts {
		gp := GroupPartition{Topic: topic, Partition: p, KafkaOffset: -1, Lag: -1, LagRecords: -1}
		if r, ok := recs[p]; ok {
			// Offset 0: claimed before anything was committed; the
			// member started at its WithStart.
			gp.Committed, gp.Position = r.Pos.Offset != 0, Position{Offset: r.Pos.Offset, Index: r.Pos.Index}
			gp.Owner, gp.OwnerLive = r.Pos.Member, r.Pos.Member != "" && live[topic+"/"+r.Pos.Member]
			gp.Updated = time.Unix(0, r.Pos.Updated)
		}
		if t != nil {
			setHead(&gp, t.Params.Grid, t.Params.ReadDelay, now)
		}
		out = append(out, gp)
	}
	return out
}

// topicPartitions is the topic as the catalog knows it (nil: not at all,
// it was deleted) and the partitions to show: all of its partitions and
// any others the group has records for, sorted.
func (c *Client) topicPartitions(topic string, have []int) (*meta.Topic, []int) {
	t, err := c.core.Catalog().Topic(topic)
	if err != nil {
		t = nil
	}
	var parts []int
	for p := 0; t != nil && p < t.Partitions; p++ {
		parts = append(parts, p)
	}
	for _, p := range have {
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	sort.Ints(parts)
	return t, parts
}

// setHead fills the frontier, the Kafka offset and the lag without a scan.
func setHead(gp *GroupPartition, grid uint64, readDelay time.Duration, now time.Time) {
	gp.Head = now.Add(-readDelay)
	if !gp.Committed {
		return
	}
	gp.KafkaOffset = kafkaOffset(gp.Position, grid)
	gp.Lag, gp.LagRecords, gp.LagRecordsAtLeast = partitionLag(uint64(gp.Head.UnixNano()), gp.Position.Offset, nil)
}
