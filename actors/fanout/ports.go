package fanout

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// The fan-out reaches the world only through these ports (and time, which
// the simulation fakes), so scenarios/sim runs this package as shipped:
// its KV with stalls and cut-offs, its readers and its bus are simulated,
// the jobs, holdings and publishers are this code.

// Leases is where the leases live (*meta.Store).
type Leases interface {
	ReadLease(ctx context.Context, name string) (meta.Lease, uint64, error)
	TakeLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time, rev uint64, data []byte) (meta.Lease, uint64, error)
	RenewLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time, rev uint64, data []byte) (uint64, error)
	ReleaseLease(ctx context.Context, name, holder string, rev uint64, data []byte) error
}

// Publisher takes the deliveries (*nats.Conn).
type Publisher interface {
	PublishMsg(m *nats.Msg) error
	// FlushTimeout returns once the server has taken everything published.
	FlushTimeout(d time.Duration) error
	MaxPayload() int64
}

// Readers starts a holding's partition reader.
type Readers interface {
	NewReader(cfg actors.ReaderConfig) (PartitionReader, error)
}

// PartitionReader is a running reader: it calls its config's Sink in
// order until closed.
type PartitionReader interface {
	// LowWater is the lowest position the reader may still deliver (its
	// oldest unresolved in-doubt offset, or its position).
	LowWater() core.Position
	// Close stops it; no Sink call starts afterwards.
	Close()
}

// ClientReaders runs the readers on c.
func ClientReaders(c *actors.Client) Readers { return clientReaders{c} }

type clientReaders struct{ c *actors.Client }

func (r clientReaders) NewReader(cfg actors.ReaderConfig) (PartitionReader, error) {
	return r.c.NewReader(cfg)
}
