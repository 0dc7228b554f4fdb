package meta

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Catalog is an Catalog kept current by a KV watcher. Lookups read
// the cache only, so nodes and producers keep working on it while the
// metadata bucket is briefly unavailable (docs/design.md#metadata-in-jetstream-kv).
type WatchedCatalog struct {
	*StaticCatalog
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{}
	polled chan struct{}

	mu   sync.Mutex
	revs map[string]uint64 // KV revision of each topic's record in the cache
}

// CatalogRefresh is how often a Catalog also re-reads every topic record.
// The KV watch is an ordered consumer on one server: when that server
// dies, nats.go notices only after two missed 5s heartbeats and then
// recreates it, and until then changes (a replaced node's ensembles, a new
// topic) would not arrive. The poll bounds that staleness; revisions keep
// an older read from overwriting a newer watched value.
const CatalogRefresh = 3 * time.Second

// WatchCatalog loads every topic and keeps watching for changes until
// Close. It returns once the initial values are loaded (or ctx ends).
//
// A watch started while the metadata stream has no leader (its server
// just died and the rest are electing) can stay without its initial values
// after the election: its consumer was never created. So a watch that has
// not loaded within an attempt's wait (3 s, then doubling) is stopped and
// a new one started, until ctx ends; the last error says how long it tried.
func (s *Store) WatchCatalog(ctx context.Context) (*WatchedCatalog, error) {
	start := time.Now()
	wait := 3 * time.Second
	for attempt := 1; ; attempt++ {
		c, err := s.watchOnce()
		if err != nil {
			s.opts.Logger.Warn("metadata: starting the topic watch failed; trying again", "attempt", attempt, "err", err)
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("topic catalog: %d watch attempts in %v, last: %w", attempt, time.Since(start).Round(time.Millisecond), err)
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-c.ready:
			t.Stop()
			return c, nil
		case <-ctx.Done():
			t.Stop()
			c.Close()
			return nil, fmt.Errorf("topic catalog not loaded after %d watch attempts in %v (is the metadata stream electing a leader?): %w",
				attempt, time.Since(start).Round(time.Millisecond), ctx.Err())
		case <-t.C:
			c.Close()
			s.opts.Logger.Warn("metadata: the topic watch has not loaded; starting it again", "attempt", attempt, "waited", wait)
			wait *= 2
		}
	}
}

// watchOnce starts one catalog watch and its poll.
func (s *Store) watchOnce() (*WatchedCatalog, error) {
	wctx, cancel := context.WithCancel(context.Background())
	w, err := s.meta.Watch(wctx, "topic.*")
	if err != nil {
		cancel()
		return nil, err
	}
	c := &WatchedCatalog{StaticCatalog: NewStaticCatalog(), w: w, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{}),
		polled: make(chan struct{}), revs: make(map[string]uint64)}
	go c.run(s)
	go c.poll(wctx, s)
	return c, nil
}

func (c *WatchedCatalog) run(s *Store) {
	defer close(c.done)
	readyOnce := false
	for e := range c.w.Updates() {
		if e == nil {
			if !readyOnce {
				readyOnce = true
				close(c.ready)
			}
			continue
		}
		name := strings.TrimPrefix(e.Key(), "topic.")
		switch e.Operation() {
		case jetstream.KeyValuePut:
			c.apply(s, e)
		default:
			c.mu.Lock()
			if e.Revision() >= c.revs[name] {
				c.revs[name] = e.Revision()
				c.Delete(name)
			}
			c.mu.Unlock()
		}
	}
	if !readyOnce {
		close(c.ready)
	}
}

// apply puts a watched or polled topic record into the cache unless the
// cache already holds a newer revision.
func (c *WatchedCatalog) apply(s *Store, e jetstream.KeyValueEntry) {
	name := strings.TrimPrefix(e.Key(), "topic.")
	r, err := DecodeTopic(e.Value())
	if err != nil {
		s.opts.Logger.Error("ignoring bad topic record", "key", e.Key(), "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Revision() < c.revs[name] {
		return
	}
	if err := c.Put(r.Topic()); err != nil {
		s.opts.Logger.Error("ignoring bad topic record", "key", e.Key(), "err", err)
		return
	}
	c.revs[name] = e.Revision()
}

// poll re-reads every topic record every CatalogRefresh until ctx ends
// (Close). A failed read (metadata unavailable) is tried again next time.
func (c *WatchedCatalog) poll(ctx context.Context, s *Store) {
	defer close(c.polled)
	t := time.NewTicker(CatalogRefresh)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.eachEntry(ctx, s.meta, "topic.*", func(e jetstream.KeyValueEntry) error {
			c.apply(s, e)
			return nil
		})
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			s.opts.Logger.Warn("metadata: re-reading the topic catalog failed; serving the cached catalog", "err", err)
		case err == nil && failing:
			failing = false
			s.opts.Logger.Info("metadata: topic catalog readable again")
		}
	}
}

// Close stops the watcher and the poll.
func (c *WatchedCatalog) Close() {
	_ = c.w.Stop()
	c.cancel()
	<-c.done
	<-c.polled
}
