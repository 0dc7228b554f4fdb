package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/bus"
)

// GroupTTL is a group member's default session timeout: the others take
// its partitions once its heartbeat record has not changed for this long
// on their own clocks (Kafka's session.timeout.ms defaults to 45 s; a
// shorter session moves a crashed member's partitions sooner, a longer
// one rides through longer metadata stalls without pausing).
const GroupTTL = 15 * time.Second

// GroupMember is a consumer group member's heartbeat record. Heartbeat is
// the member's own clock, for people reading the record; liveness is
// judged from the record's revision (core.Liveness), never from it.
type GroupMember struct {
	Member    string `json:"member"`
	Heartbeat int64  `json:"heartbeat"`
	// Session is the member's session timeout in ns (0: GroupTTL).
	Session int64 `json:"session_ns,omitempty"`
}

// MemberBeat is one member's heartbeat as listed: the record's revision
// (every heartbeat advances it) and the session timeout it asks for.
type MemberBeat struct {
	Revision uint64
	Session  time.Duration
}

// PositionEntry is a partition's position record and its revision.
type PositionEntry struct {
	Pos GroupPosition
	Rev uint64
}

// GroupPosition is a group's committed position in one partition: the
// next record to deliver, and which member wrote it.
type GroupPosition struct {
	Offset  uint64 `json:"offset"`
	Index   uint32 `json:"index"`
	Member  string `json:"member"`
	Updated int64  `json:"updated"`
}

func groupKey(group, topic string, parts ...string) (string, error) {
	if err := bus.ValidName("group", group); err != nil {
		return "", err
	}
	if err := bus.ValidName("topic", topic); err != nil {
		return "", err
	}
	k := "g." + group + "." + topic
	for _, p := range parts {
		k += "." + p
	}
	return k, nil
}

// GroupHeartbeat records that member is alive in group for topic, with
// its session timeout (0: GroupTTL).
func (s *Store) GroupHeartbeat(ctx context.Context, group, topic, member string, now time.Time, session time.Duration) error {
	if err := bus.ValidName("member", member); err != nil {
		return err
	}
	k, err := groupKey(group, topic, "m", member)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(GroupMember{Member: member, Heartbeat: now.UnixNano(), Session: int64(session)})
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err = s.groups.Put(ctx, k, b)
	return err
}

// LeaveGroup removes member's heartbeat so the others take over at once.
func (s *Store) LeaveGroup(ctx context.Context, group, topic, member string) error {
	k, err := groupKey(group, topic, "m", member)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.groups.Delete(ctx, k)
}

// GroupBeats lists the heartbeat records of group for topic: every member
// that has not left, alive or not (the caller judges, core.Liveness).
func (s *Store) GroupBeats(ctx context.Context, group, topic string) (map[string]MemberBeat, error) {
	prefix, err := groupKey(group, topic, "m")
	if err != nil {
		return nil, err
	}
	out := make(map[string]MemberBeat)
	err = s.eachEntry(ctx, s.groups, prefix+".*", func(e jetstream.KeyValueEntry) error {
		m, b, err := decodeBeat(e)
		if err == nil {
			out[m] = b
		}
		return err
	})
	return out, err
}

// GroupBeat reads one member's heartbeat record; ok false: there is none
// (the member left). A listing (GroupBeats) is not proof that a record is
// absent, so a member missing from one is read again by its key before it
// is taken for gone.
func (s *Store) GroupBeat(ctx context.Context, group, topic, member string) (beat MemberBeat, ok bool, err error) {
	if err := bus.ValidName("member", member); err != nil {
		return beat, false, err
	}
	k, err := groupKey(group, topic, "m", member)
	if err != nil {
		return beat, false, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	e, err := s.groups.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return beat, false, nil
	}
	if err != nil {
		return beat, false, err
	}
	_, beat, err = decodeBeat(e)
	return beat, err == nil, err
}

// decodeBeat decodes a member's heartbeat record.
func decodeBeat(e jetstream.KeyValueEntry) (string, MemberBeat, error) {
	var m GroupMember
	if err := decode(e.Value(), &m); err != nil {
		return "", MemberBeat{}, err
	}
	if err := bus.ValidName("member", m.Member); err != nil {
		return "", MemberBeat{}, err
	}
	session := time.Duration(m.Session)
	if session <= 0 || session > MaxSession {
		session = GroupTTL
	}
	return m.Member, MemberBeat{Revision: e.Revision(), Session: session}, nil
}

// MaxSession bounds a member's session timeout.
const MaxSession = 10 * time.Minute

// GroupPositions lists group's position records for topic, by partition.
func (s *Store) GroupPositions(ctx context.Context, group, topic string) (map[int]PositionEntry, error) {
	prefix, err := groupKey(group, topic, "p")
	if err != nil {
		return nil, err
	}
	out := make(map[int]PositionEntry)
	err = s.eachEntry(ctx, s.groups, prefix+".*", func(e jetstream.KeyValueEntry) error {
		p, err := strconv.Atoi(e.Key()[len(prefix)+1:])
		if err != nil || p < 0 {
			return fmt.Errorf("bad partition in position key %q", e.Key())
		}
		var pos GroupPosition
		if err := decode(e.Value(), &pos); err != nil {
			return err
		}
		out[p] = PositionEntry{Pos: pos, Rev: e.Revision()}
		return nil
	})
	return out, err
}

// Position reads a group's position in a partition; rev 0 means none yet.
func (s *Store) Position(ctx context.Context, group, topic string, partition int) (GroupPosition, uint64, error) {
	k, err := groupKey(group, topic, "p", strconv.Itoa(partition))
	if err != nil {
		return GroupPosition{}, 0, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	e, err := s.groups.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return GroupPosition{}, 0, nil
	}
	if err != nil {
		return GroupPosition{}, 0, err
	}
	var p GroupPosition
	if err := decode(e.Value(), &p); err != nil {
		return p, 0, err
	}
	return p, e.Revision(), nil
}

// CommitPosition writes pos if the entry is still at revision rev (0: it
// must not exist yet) and returns the new revision. A member that lost the
// partition to another gets ErrFenced and must stop reading it.
func (s *Store) CommitPosition(ctx context.Context, group, topic string, partition int, pos GroupPosition, rev uint64) (uint64, error) {
	k, err := groupKey(group, topic, "p", strconv.Itoa(partition))
	if err != nil {
		return 0, err
	}
	b, _ := json.Marshal(pos)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var nrev uint64
	if rev == 0 {
		nrev, err = s.groups.Create(ctx, k, b)
	} else {
		nrev, err = s.groups.Update(ctx, k, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%w: group %s topic %s partition %d", ErrFenced, group, topic, partition)
	}
	return nrev, err
}

// ClaimPosition takes over a partition for member: it rewrites the current
// position with member as its owner, so the previous owner's next commit
// is fenced. It returns the position to resume from and its revision.
func (s *Store) ClaimPosition(ctx context.Context, group, topic string, partition int, member string, now time.Time) (GroupPosition, uint64, error) {
	pos, rev, err := s.Position(ctx, group, topic, partition)
	if err != nil {
		return pos, 0, err
	}
	pos.Member, pos.Updated = member, now.UnixNano()
	nrev, err := s.CommitPosition(ctx, group, topic, partition, pos, rev)
	return pos, nrev, err
}
