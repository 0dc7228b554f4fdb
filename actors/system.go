package actors

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/raidq/raidq/actors/internal/actorsys"
)

// System is an actor system that several clients share
// (ClientConfig.System). A process runs one client and needs none: its
// client makes its own. The simulation (scenarios/sim) runs dozens of
// client processes per seed, and a protoactor system costs thousands of
// allocations to make, so its processes share one.
type System struct {
	sys *actor.ActorSystem
}

// NewSystem makes a shared actor system logging to logger.
func NewSystem(logger *slog.Logger) *System {
	return &System{sys: actorsys.NewSystem(logger)}
}

// Shutdown stops the system, after the clients in it are closed.
func (s *System) Shutdown() { s.sys.Shutdown() }
