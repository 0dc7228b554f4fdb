package raidq

import (
	"errors"
	"fmt"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe/quorum"
)

// Every exported error value of the package is declared in this file.
// Calls return them wrapped with context: test with errors.Is. The one
// error type, *PermissionError, is with the refusals that build it
// (refusals.go); it matches ErrPermissionDenied.

// Errors a send or a call can fail with; test with errors.Is.
var (
	// ErrNotEnoughNodes: fewer than W nodes of the ensemble accepted the
	// write on every attempt (more than n-W nodes are down or refusing).
	ErrNotEnoughNodes = core.ErrNotEnoughNodes
	// ErrClockSkew: the nodes kept refusing offsets as too far ahead; the
	// producer's clock is far off theirs.
	ErrClockSkew = core.ErrClockSkew
	// ErrTimeout: no attempt was acknowledged by W nodes in time.
	ErrTimeout = core.ErrTimeout
	// ErrClosed: the producer, consumer or client was closed.
	ErrClosed = core.ErrClosed
	// ErrUnknownTopic: no such topic.
	ErrUnknownTopic = meta.ErrUnknownTopic
	// ErrUnknownPartition: the topic has no such partition.
	ErrUnknownPartition = errors.New("unknown partition")
	// ErrBusy: the producer's queues are full; slow down.
	ErrBusy = actors.ErrBusy
	// ErrInvalidParams: topic parameters break a rule of the coding
	// (docs/design.md, "Parameters").
	ErrInvalidParams = quorum.ErrInvalidParams
	// ErrInvalidMessage: a send was given a message it cannot take (a
	// Partition set on Send: choose one with SendTo; a Time out of range;
	// a limit of the batch format; a batch of no messages or more than a
	// stripe holds, or to a partition out of range).
	ErrInvalidMessage = actors.ErrInvalidMessage
	// ErrPermissionDenied: the cluster refused this user a subject the
	// operation needs (docs/security.md, "Refusals"): a producer's sends
	// to a topic it may not write, a consumer of a topic it may not read
	// or in a group its groups: list lacks, a topic change without the
	// admin role. The error is a *PermissionError naming the user, the
	// subject and what the auth file lacks; it also matches
	// nats.ErrPermissionViolation.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrPending: SendFuture.Result was called before the outcome was known.
	ErrPending = errors.New("send still pending")
)

// Errors of AlterTopic and AddPartitions; test with errors.Is.
var (
	// ErrAlterPending: a change of the accept window is still taking
	// effect (TopicInfo.AcceptSettles says until when); alter it again
	// after that.
	ErrAlterPending = meta.ErrAlterPending
	// ErrAlterOrder: the change would put the read delay below an accept
	// window still in force: lower the accept window first, and the read
	// delay once that is in force.
	ErrAlterOrder = meta.ErrAlterOrder
	// ErrAlter: nothing to change, or a change that is not allowed (fewer
	// partitions).
	ErrAlter = meta.ErrAlter
)

// Errors of consumer groups (Consumer.Commit, Seek, WithGroup); test
// with errors.Is.
var (
	// ErrFenced: the partition was claimed by another member of the group since
	// this member read it (a rebalance, or this member was presumed dead); the
	// commit did not happen and the partition's reader is stopped here.
	ErrFenced = meta.ErrFenced
	// ErrKafkaGroup: the group name is a Kafka consumer group's (one the
	// Kafka gateway coordinates). Native and Kafka groups never share a name.
	ErrKafkaGroup = errors.New("the name belongs to a Kafka consumer group")
	// ErrSeeked: Commit of a message delivered before a Seek of its partition;
	// nothing is committed.
	ErrSeeked = errors.New("message was delivered before the last Seek")
)

// Errors of group administration (Groups, DescribeGroup, ResetGroup,
// DeleteGroup); test with errors.Is.
var (
	// ErrUnknownGroup: no group of that name has any record.
	ErrUnknownGroup = fmt.Errorf("unknown consumer group: %w", meta.ErrNotFound)
	// ErrGroupLive: the group has live members, and the change needs it
	// empty (WithForce overrides).
	ErrGroupLive = errors.New("the group has live members")
	// ErrBadReset: a reset target that cannot be parsed or lies in the future.
	ErrBadReset = errors.New("invalid reset target")
)
