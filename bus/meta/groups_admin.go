package meta

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/bus"
)

// Group administration (raidq group list, describe, reset, delete): the
// native groups' records as a whole. The keys are
//
//	g.<group>.<topic>.m.<member>     a member's heartbeat (GroupMember)
//	g.<group>.<topic>.p.<partition>  a partition's position (GroupPosition)
//
// Group, topic and member names are bus.ValidName names, which hold no
// dot, so a key splits into its parts unambiguously. Kafka groups
// (kgroup.<name>) are listed by KafkaGroups.

// GroupRecord is one record of a native group, with its KV revision.
// Exactly one of Beat (Kind 'm') and Pos (Kind 'p') is meaningful.
type GroupRecord struct {
	Key       string
	Rev       uint64
	Group     string
	Topic     string
	Kind      byte // 'm': a member's heartbeat, 'p': a partition's position
	Member    string
	Partition int
	Beat      GroupMember
	Pos       GroupPosition
}

// parseGroupKey splits a native group key; ok false for any other key.
func parseGroupKey(key string) (r GroupRecord, ok bool) {
	parts := strings.Split(key, ".")
	if len(parts) != 5 || parts[0] != "g" || bus.ValidName("group", parts[1]) != nil ||
		bus.ValidName("topic", parts[2]) != nil {
		return r, false
	}
	r = GroupRecord{Key: key, Group: parts[1], Topic: parts[2]}
	switch parts[3] {
	case "m":
		r.Kind, r.Member = 'm', parts[4]
		return r, bus.ValidName("member", r.Member) == nil
	case "p":
		p, err := strconv.Atoi(parts[4])
		r.Kind, r.Partition = 'p', p
		return r, err == nil && p >= 0 && strconv.Itoa(p) == parts[4]
	}
	return r, false
}

// GroupRecords lists every record of the native groups, or of one group
// (group non-empty), in no particular order. A key that is not a group
// record's shape, or a value that does not decode, fails the listing
// (ErrBadRecord): an operator tool must not act on half a picture.
func (s *Store) GroupRecords(ctx context.Context, group string) ([]GroupRecord, error) {
	filter := "g.>"
	if group != "" {
		if err := bus.ValidName("group", group); err != nil {
			return nil, err
		}
		filter = "g." + group + ".>"
	}
	var out []GroupRecord
	err := s.watchAll(ctx, filter, func(e jetstream.KeyValueEntry) error {
		r, ok := parseGroupKey(e.Key())
		if !ok {
			return fmt.Errorf("%w: key %q is not a group record's", ErrBadRecord, e.Key())
		}
		r.Rev = e.Revision()
		var err error
		if r.Kind == 'm' {
			err = decode(e.Value(), &r.Beat)
		} else {
			err = decode(e.Value(), &r.Pos)
		}
		if err != nil {
			return fmt.Errorf("key %s: %w", e.Key(), err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// watchAll calls fn with every current entry matching filter, read in one
// watch of the groups bucket (one request, not a Get per key as
// eachEntry does: a cluster-wide listing may hold thousands of keys).
func (s *Store) watchAll(ctx context.Context, filter string, fn func(jetstream.KeyValueEntry) error) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	w, err := s.groups.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("listing %s: the watch ended early: %w", filter, context.Canceled)
			}
			if e == nil {
				return nil // every current value has been seen
			}
			if err := fn(e); err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("listing %s: incomplete: %w", filter, ctx.Err())
		}
	}
}

// DeleteGroupRecord deletes one record of a native group (GroupRecord.Key)
// if it is still at revision rev; rev 0 deletes whatever is there. A
// record that changed since it was listed is ErrFenced.
func (s *Store) DeleteGroupRecord(ctx context.Context, key string, rev uint64) error {
	if _, ok := parseGroupKey(key); !ok {
		return fmt.Errorf("%w: key %q is not a group record's", bus.ErrBadName, key)
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var opts []jetstream.KVDeleteOpt
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err := s.groups.Delete(ctx, key, opts...)
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("%w: %s", ErrFenced, key)
	}
	return err
}
