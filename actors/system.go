package actors

import (
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/raidq/raidq/actors/core"
)

// NewSystem returns an actor system that logs through logger (protoactor
// would otherwise write to stderr), with its own chatter at warn level.
func NewSystem(logger *slog.Logger) *actor.ActorSystem {
	quiet := slog.New(levelFilter{logger.Handler(), slog.LevelWarn})
	return actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }),
		actor.WithDeadLetterThrottleCount(3),
	)
}

// restartStrategy restarts a failed child (its state is rebuilt from the
// store or its parent), giving up after 10 failures in 10 seconds.
func restartStrategy() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)
}

func rangeOf(offset uint64) uint64 { return core.RangeStart(offset) }

var errorsIs = errors.Is
