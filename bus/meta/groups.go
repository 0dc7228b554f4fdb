package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/bus"
)

// GroupTTL: a group member whose heartbeat is older than this is gone and
// its partitions move to the others.
const GroupTTL = 6 * time.Second

// GroupMember is a consumer group member's heartbeat record.
type GroupMember struct {
	Member    string `json:"member"`
	Heartbeat int64  `json:"heartbeat"`
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

// GroupHeartbeat records that member is alive in group for topic.
func (s *Store) GroupHeartbeat(ctx context.Context, group, topic, member string, now time.Time) error {
	if err := bus.ValidName("member", member); err != nil {
		return err
	}
	k, err := groupKey(group, topic, "m", member)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(GroupMember{Member: member, Heartbeat: now.UnixNano()})
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

// GroupMembers lists the live members of group for topic, sorted.
func (s *Store) GroupMembers(ctx context.Context, group, topic string, now time.Time) ([]string, error) {
	prefix, err := groupKey(group, topic, "m")
	if err != nil {
		return nil, err
	}
	var out []string
	err = s.each(ctx, s.groups, prefix+".*", func(b []byte) error {
		var m GroupMember
		if err := decode(b, &m); err != nil {
			return err
		}
		if now.Sub(time.Unix(0, m.Heartbeat)) < GroupTTL {
			out = append(out, m.Member)
		}
		return nil
	})
	sort.Strings(out)
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
