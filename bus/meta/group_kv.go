package meta

import (
	"context"
	"time"
)

// GroupKV is what a consumer-group member (the root package's groups.go
// and group_commit.go) asks of the metadata store: its heartbeat, the
// members' records, the partitions' position records and the Kafka
// groups' names. *Store implements it over the JetStream KV; the
// simulation (scenarios/sim) over its simulated KV.
type GroupKV interface {
	GroupHeartbeat(ctx context.Context, group, topic, member string, now time.Time, session time.Duration) error
	GroupBeats(ctx context.Context, group, topic string) (map[string]MemberBeat, error)
	GroupBeat(ctx context.Context, group, topic, member string) (MemberBeat, bool, error)
	GroupPositions(ctx context.Context, group, topic string) (map[int]PositionEntry, error)
	Position(ctx context.Context, group, topic string, partition int) (GroupPosition, uint64, error)
	CommitPosition(ctx context.Context, group, topic string, partition int, pos GroupPosition, rev uint64) (uint64, error)
	LeaveGroup(ctx context.Context, group, topic, member string) error
	KafkaGroupExists(ctx context.Context, name string) (bool, error)
}

var _ GroupKV = (*Store)(nil)
