// Package actorsys is the actor-system plumbing that raidq's client and
// node actors share: a system that logs through slog, the kept-goroutine
// dispatcher, and the supervisor strategy.
package actorsys

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// NewSystem returns an actor system that logs through logger (protoactor
// would otherwise write to stderr), with its own chatter at warn level.
func NewSystem(logger *slog.Logger) *actor.ActorSystem {
	quiet := slog.New(minLevel{logger.Handler(), slog.LevelWarn})
	return actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }),
		actor.WithDeadLetterThrottleCount(3),
	)
}

// RestartStrategy restarts a failed child (its state is rebuilt from the
// store or its parent), giving up after 10 failures in 10 seconds.
func RestartStrategy() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)
}
