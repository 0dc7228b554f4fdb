package meta

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/actors"
)

// Catalog is an actors.Catalog kept current by a KV watcher. Lookups read
// the cache only, so nodes and producers keep working on it while the
// metadata bucket is briefly unavailable (DESIGN §7).
type Catalog struct {
	*actors.StaticCatalog
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{}
}

// WatchCatalog loads every topic and keeps watching for changes until
// Close. It returns once the initial values are loaded (or ctx ends).
func (s *Store) WatchCatalog(ctx context.Context) (*Catalog, error) {
	wctx, cancel := context.WithCancel(context.Background())
	w, err := s.meta.Watch(wctx, "topic.*")
	if err != nil {
		cancel()
		return nil, err
	}
	c := &Catalog{StaticCatalog: actors.NewStaticCatalog(), w: w, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
	go c.run(s)
	select {
	case <-c.ready:
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

func (c *Catalog) run(s *Store) {
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
			r, err := DecodeTopic(e.Value())
			if err != nil {
				s.opts.Logger.Error("ignoring bad topic record", "key", e.Key(), "err", err)
				continue
			}
			_ = c.Put(r.Topic())
		default:
			c.Delete(name)
		}
	}
	if !readyOnce {
		close(c.ready)
	}
}

// Close stops the watcher.
func (c *Catalog) Close() {
	_ = c.w.Stop()
	c.cancel()
	<-c.done
}
