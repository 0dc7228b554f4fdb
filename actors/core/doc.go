// Package core holds raidq's protocol logic as pure types, in the style of
// etcd-io/raft's RawNode: no clock, no randomness and no I/O of their own.
// Time ("now", unix nanoseconds) and random numbers are passed in, and every
// method returns what the caller must do (persist, reply, send, deliver).
//
//   - Owner: one slot-owner's range of offsets on one node (docs/design.md#slot-store, docs/design.md#write-path step 5).
//   - Writer: one producer's stripes in flight for one partition (docs/design.md#write-path).
//   - Reader: one partition reader's scan/group/decide loop (docs/design.md#read-path).
//
// The actors in package actors are thin shells around these; the
// deterministic simulation in scenarios/sim drives them directly.
package core
