package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
)

// BirthConfig is what SettleBirth needs.
type BirthConfig struct {
	ID      string
	Cluster string
	Store   slotstore.Store
	// Client, if set, is the client whose links ask the peers for their
	// clocks (actors.Client.Request); nil: one made for the occasion on
	// Conn, closed before SettleBirth returns.
	Client *actors.Client
	Conn   *nats.Conn // to ask the peers for their clocks, when Client is nil
	// Catalog must list its topics (Names, as *meta.StaticCatalog and
	// *meta.Catalog do); one that cannot leaves the birth provisional.
	Catalog meta.Catalog
	Now     func() int64 // the node clock; nil = time.Now
	// Clocks are other readings of cluster time the caller has: the
	// heartbeat times of the member records (the node's own included).
	Clocks []int64
	// Timeout bounds asking the peers (default 1s).
	Timeout time.Duration
	Logger  *slog.Logger
}

// namer is a catalog that lists its topics.
type namer interface{ Names() []string }

// SettleBirth settles the birth of a provisional incarnation (a store that
// Open has just created: first start or wiped directory) from cluster time
// before the node takes requests: core.BirthInput, with the clocks the
// peers of every ensemble answer with (status endpoint) and c.Clocks. On a
// brand-new cluster (no topic yet) the birth stays the node's clock.
// A settled incarnation is returned as it is.
func SettleBirth(ctx context.Context, c BirthConfig) (slotstore.Incarnation, error) {
	inc := c.Store.Incarnation()
	cat, ok := c.Catalog.(namer)
	if !inc.Provisional || !ok {
		return inc, nil
	}
	if c.Now == nil {
		c.Now = func() int64 { return time.Now().UnixNano() }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var in core.BirthInput
	peers := map[string]bool{}
	for _, name := range cat.Names() {
		t, err := c.Catalog.Topic(name)
		if err != nil {
			continue // deleted meanwhile
		}
		in.Created = append(in.Created, t.Created)
		in.Margin = max(in.Margin, core.BirthMargin(int64(t.Params.FutureBound), int64(t.Params.MaxSkew)))
		for _, e := range t.Ensembles {
			for _, id := range e {
				peers[id] = id != c.ID
			}
		}
	}
	heard := 0
	if len(in.Created) > 0 {
		for _, v := range c.Clocks {
			in.Clocks = append(in.Clocks, uint64(max(v, 0)))
		}
		clocks := peerClocks(ctx, c, peers)
		heard = len(clocks)
		in.Clocks = append(in.Clocks, clocks...)
	}
	in.Own = uint64(c.Now())
	if len(in.Created) == 0 {
		in.Own = inc.Birth // a brand-new cluster: the birth the store took stands
	}
	settled, err := c.Store.SettleBirth(in.Birth())
	if err != nil {
		return settled, fmt.Errorf("settle the incarnation's birth: %w", err)
	}
	log := c.Logger.With("node", c.ID, "incarnation", settled.String(), "topics", len(in.Created), "peers_heard", heard)
	switch ahead := time.Duration(int64(settled.Birth) - int64(in.Own)); {
	case len(in.Created) == 0:
		log.Debug("new incarnation on a cluster without topics: born on the node clock")
	case ahead > 10*time.Second:
		log.Warn("new incarnation born on cluster time, well ahead of this node's clock: is its clock behind?", "ahead", ahead)
	default:
		log.Info("new incarnation born on cluster time", "ahead", ahead)
	}
	return settled, nil
}

// peerClocks asks every peer (peers[id] true) for its status at once,
// through the client's links, and returns the clocks of those that
// answered within c.Timeout, each plus its round trip (the clock was read
// at most that long ago).
func peerClocks(ctx context.Context, c BirthConfig, peers map[string]bool) []uint64 {
	subj, err := bus.NewSubjects(c.Cluster)
	if err != nil {
		return nil
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	cl := c.Client
	if cl == nil {
		if c.Conn == nil {
			return nil
		}
		// A new incarnation is rare (first start, wiped directory): a
		// client for these requests alone.
		own, err := actors.NewClient(actors.ClientConfig{Cluster: c.Cluster, Conn: c.Conn, Catalog: c.Catalog,
			Logger: c.Logger, Now: c.Now, Link: actors.LinkConfig{Timeout: c.Timeout}})
		if err != nil {
			c.Logger.Warn("birth: no client to ask the peers for their clocks", "err", err)
			return nil
		}
		defer own.Close()
		cl = own
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	var (
		mu  sync.Mutex
		out []uint64
		wg  sync.WaitGroup
	)
	for id, peer := range peers {
		if !peer {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			data, err := cl.Request(ctx, id, subj.Status(id), nil, c.Timeout)
			var st bus.NodeStatus
			if err != nil || json.Unmarshal(data, &st) != nil || st.Clock <= 0 {
				return // down, not answering, or not a status answer: other clocks stand in
			}
			mu.Lock()
			out = append(out, uint64(st.Clock+time.Since(sent).Nanoseconds()))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}
