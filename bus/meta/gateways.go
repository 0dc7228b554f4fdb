package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/bus"
)

// Gateway is one Kafka gateway's record (`gateway.<id>` in the meta
// bucket), rewritten by its heartbeat. Other gateways list it to answer
// Metadata (every live gateway is a broker) and FindCoordinator (a
// group's coordinator is the live gateway ranked first for it).
type Gateway struct {
	ID        string `json:"id"`
	BrokerID  int32  `json:"broker_id"`
	Advertise string `json:"advertise"` // host:port given to Kafka clients
	Started   int64  `json:"started"`   // unix ns
	Heartbeat int64  `json:"heartbeat"` // unix ns of the last refresh, gateway clock (informational)
	Version   string `json:"version,omitempty"`
	Rack      string `json:"rack,omitempty"`
}

// GatewayEntry is a gateway record with its KV revision: liveness is
// judged on revisions changing, on the observer's clock.
type GatewayEntry struct {
	Gateway
	Revision uint64
}

// Validate checks a gateway record.
func (g *Gateway) Validate() error {
	if err := bus.ValidName("gateway id", g.ID); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if g.BrokerID < 0 {
		return fmt.Errorf("%w: gateway %s: negative broker id %d", ErrBadRecord, g.ID, g.BrokerID)
	}
	host, port, err := net.SplitHostPort(g.Advertise)
	if err != nil || host == "" {
		return fmt.Errorf("%w: gateway %s: advertised address %q is not host:port", ErrBadRecord, g.ID, g.Advertise)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("%w: gateway %s: advertised port %q", ErrBadRecord, g.ID, port)
	}
	return nil
}

// DecodeGateway decodes and validates a gateway record.
func DecodeGateway(b []byte) (Gateway, error) {
	var g Gateway
	if err := decode(b, &g); err != nil {
		return g, err
	}
	return g, g.Validate()
}

// PutGateway writes (refreshes) a gateway record.
func (s *Store) PutGateway(ctx context.Context, g Gateway) error {
	if err := g.Validate(); err != nil {
		return err
	}
	b, _ := json.Marshal(g)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err := s.meta.Put(ctx, "gateway."+g.ID, b)
	return err
}

// Gateways lists every gateway record with its revision (sorted by id).
func (s *Store) Gateways(ctx context.Context) ([]GatewayEntry, error) {
	var out []GatewayEntry
	err := s.eachEntry(ctx, s.meta, "gateway.*", func(e jetstream.KeyValueEntry) error {
		g, err := DecodeGateway(e.Value())
		if err == nil {
			out = append(out, GatewayEntry{Gateway: g, Revision: e.Revision()})
		}
		return err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// RemoveGateway deletes a gateway record (a gateway closing).
func (s *Store) RemoveGateway(ctx context.Context, id string) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.meta.Delete(ctx, "gateway."+id)
}
