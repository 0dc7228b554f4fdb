package sim

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/bus/meta"
)

// cproc is one client process of the simulation: a shipped actors.Client
// (in the run's shared actor system) over a simulated bus of its own,
// on a clock of its own. The reader processes (reader.go), the producers
// (producer.go) and the repair processes' re-append clients
// (repair_ports.go) are each one.
type cproc struct {
	s      *sim
	name   string
	bus    *simBus
	client *actors.Client
	calls  atomic.Uint64
	once   sync.Once
}

var quietLog = slog.New(slog.DiscardHandler)

// newClientProc starts a client process called name with catalog cat on
// clock now.
func (s *sim) newClientProc(name string, cat meta.Catalog, now func() int64) (*cproc, error) {
	p := &cproc{s: s, name: name, bus: newSimBus(s, name)}
	c, err := actors.NewClient(actors.ClientConfig{Cluster: "sim", System: s.system, Bus: p.bus, Catalog: cat, Logger: quietLog, Now: now})
	if err != nil {
		return nil, err
	}
	p.client = c
	return p, nil
}

// post hands fn to the loop in the order the process made its calls.
func (p *cproc) post(fn func()) { p.s.bubble.post(p.name, p.calls.Add(1), fn) }

// close ends the process (on a driver goroutine: it waits for its actors
// to stop): the client's actors and links, then its bus.
func (p *cproc) close() {
	p.once.Do(func() {
		p.client.Close()
		p.bus.close()
	})
}
