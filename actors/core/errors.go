package core

import "errors"

// Operating errors a send can fail with. They are wrapped with %w and a
// sentence saying what happened (which nodes answered what).
var (
	// ErrNotEnoughNodes: too few nodes accepted the stripe to reach W.
	ErrNotEnoughNodes = errors.New("not enough nodes accepted the write")
	// ErrClockSkew: the nodes kept refusing the offset as too far ahead or behind.
	ErrClockSkew = errors.New("producer clock too far from the nodes' clocks")
	// ErrTimeout: no attempt reached W before the retries ran out.
	ErrTimeout = errors.New("write timed out")
	// ErrClosed: the producer or client was closed.
	ErrClosed = errors.New("closed")
)
