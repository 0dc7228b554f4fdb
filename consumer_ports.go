package raidq

import (
	"log/slog"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// consumerPorts is what a consumer reaches the world through besides its
// group's metadata (groupState.store, a meta.GroupKV): the topic catalog,
// a factory of partition readers and its logger. A client's consumers use
// the client's (clientPorts); the simulation's group members simulated
// ones (hooks.go, drillhooks.GroupConsumer). Time stays package time: the
// simulation runs the member in a testing/synctest bubble, which fakes it.
type consumerPorts struct {
	catalog   meta.Catalog
	newReader func(actors.ReaderConfig) (partReader, error)
	logger    *slog.Logger
}

// partReader is what a consumer uses of a partition reader
// (*actors.Reader).
type partReader interface {
	// Close stops the reader.
	Close()
	// LowWater is the lowest position not yet resolved (commits stop there).
	LowWater() core.Position
	// Handed is how far the reader has handed records to the sink (unix ns).
	Handed() uint64
}

var _ partReader = (*actors.Reader)(nil)

// clientPorts are the ports of c's consumers: its actors' catalog and
// readers, its logger.
func clientPorts(c *Client) consumerPorts {
	return consumerPorts{catalog: c.core.Catalog(), logger: c.logger,
		newReader: func(cfg actors.ReaderConfig) (partReader, error) {
			r, err := c.core.NewReader(cfg)
			if err != nil {
				return nil, err
			}
			return r, nil
		}}
}
