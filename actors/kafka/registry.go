package kafka

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe/placement"
)

// Registry timing: a gateway rewrites its record every registryBeat and
// is judged gone once the record's revision has not moved for
// registrySession on the observer's clock (core.Liveness, as group members
// are: no clock of another host is compared, and a KV stall judges nobody).
const (
	registryBeat    = 2 * time.Second
	registrySession = 10 * time.Second
)

// registry keeps this gateway's record fresh and the view of live
// gateways: the brokers Metadata lists and the candidates for each
// group's coordinator.
type registry struct {
	store *meta.Store
	self  meta.Gateway
	log   *slog.Logger
	start time.Time // monotonic base of the liveness clock

	mu    sync.Mutex
	live  *core.Liveness
	peers map[string]meta.Gateway // last listed records by id
	fails int

	quit chan struct{}
	done chan struct{}
}

// startRegistry writes the gateway's first record (retrying within ctx:
// a gateway nobody can find is no use) and starts the heartbeat.
func startRegistry(ctx context.Context, store *meta.Store, self meta.Gateway, log *slog.Logger) (*registry, error) {
	self.Version = bus.Version()
	self.Started = time.Now().UnixNano()
	r := &registry{store: store, self: self, log: log, start: time.Now(), peers: map[string]meta.Gateway{},
		quit: make(chan struct{}), done: make(chan struct{})}
	r.live = core.NewLiveness(0)
	for {
		err := r.beat(ctx)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
	}
	go r.run()
	return r, nil
}

func (r *registry) now() int64 { return int64(time.Since(r.start)) }

// beat rewrites this gateway's record and lists the others.
func (r *registry) beat(ctx context.Context) error {
	self := r.self
	self.Heartbeat = time.Now().UnixNano()
	if err := r.store.PutGateway(ctx, self); err != nil {
		r.failed("writing the gateway record", err)
		return err
	}
	gws, err := r.store.Gateways(ctx)
	if err != nil {
		r.failed("listing gateways", err)
		return err
	}
	beats := make(map[string]core.MemberBeat, len(gws))
	peers := make(map[string]meta.Gateway, len(gws))
	for _, g := range gws {
		beats[g.ID] = core.MemberBeat{Revision: g.Revision, Session: int64(registrySession)}
		peers[g.ID] = g.Gateway
		if g.ID != r.self.ID && g.BrokerID == r.self.BrokerID {
			r.log.Error("kafka gateway: another gateway has this broker id; give one of them another --broker-id",
				"other", g.ID, "broker_id", g.BrokerID)
		}
	}
	r.mu.Lock()
	r.live.Observe(r.now(), beats)
	r.peers = peers
	if r.fails > 0 {
		r.log.Info("kafka gateway: metadata reachable again", "failed_beats", r.fails)
	}
	r.fails = 0
	r.mu.Unlock()
	return nil
}

func (r *registry) failed(what string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live.Failed(r.now())
	r.fails++
	if r.fails == 1 {
		r.log.Warn("kafka gateway: "+what+" failed; serving from the last view and retrying", "err", err)
	}
}

func (r *registry) run() {
	defer close(r.done)
	t := time.NewTicker(registryBeat)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), registryBeat)
			_ = r.beat(ctx)
			cancel()
		}
	}
}

// gateways lists the live gateways (this one always), sorted by broker id.
func (r *registry) gateways() []meta.Gateway {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []meta.Gateway{r.self}
	for _, id := range r.live.Live(r.now()) {
		if g, ok := r.peers[id]; ok && id != r.self.ID {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BrokerID < out[j].BrokerID })
	return out
}

// coordinator is the live gateway that coordinates group: the one ranked
// first by rendezvous hashing on "kafka-group/<group>" over the live ids.
func (r *registry) coordinator(group string) meta.Gateway {
	gws := r.gateways()
	ids := make([]string, len(gws))
	byID := make(map[string]meta.Gateway, len(gws))
	for i, g := range gws {
		ids[i] = g.ID
		byID[g.ID] = g
	}
	return byID[placement.Winner("kafka-group/"+group, ids)]
}

// coordinates says whether this gateway coordinates group.
func (r *registry) coordinates(group string) bool { return r.coordinator(group).ID == r.self.ID }

// close stops the heartbeat and removes the record, so the other
// gateways stop listing this one at once instead of after a session.
func (r *registry) close() {
	close(r.quit)
	<-r.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.store.RemoveGateway(ctx, r.self.ID); err != nil {
		r.log.Warn("kafka gateway: removing the gateway record failed; others drop it after its session", "err", err)
	}
}
