// Package slotstore is a node's slot store (docs/design.md#slot-store): one LevelDB per node
// holding write-once slots keyed (topic, partition, offset), the seals of
// offset ranges, and the node's incarnation.
//
// # Who calls what
//
//   - Commit is called by the slot-owner actor that owns a range of offsets.
//     It alone decides write-once (it reads the slot first and answers
//     CONFLICT itself); the store panics if two different shards are ever
//     committed to one slot, because that is a protocol bug, not an input
//     error. Re-committing the same bytes is a harmless no-op (a retry).
//   - Get, Scan and Seal may be called by anyone (readers, repair, scrub).
//     They see only writes that the committer has applied, never a write
//     still waiting in the queue.
//   - DropBefore is called by the retention loop only, and only for ranges
//     older than now - D - margin, which owners no longer accept writes
//     for (they are older than the accept window), so no write can race it.
//   - Close is called once by the node on shutdown (later calls are no-ops).
//
// # What is durable before what
//
//   - A Commit's done callback runs only after its batch is in LevelDB and
//     fsynced (one Sync write per group of batches), unless Options.NoSync.
//     A node answers OK to a producer, and a scan reply reveals a sealed
//     range, only from inside done: the slot or seal must be on disk first.
//   - done callbacks run in submission order, on the committer goroutine, so
//     when done(nil) runs every earlier commit is durable too. An empty batch
//     is therefore a barrier.
//   - Errors that need no I/O (closed store, failed store, full queue, an
//     invalid batch) are reported by calling done in the caller's goroutine
//     before Commit returns.
//   - If a write or fsync fails the store is failed for good: that done and
//     every later one gets the error. A node must stop loudly and restart
//     (fsync failure is not retryable: the page cache may already be gone).
//   - The incarnation is written with Sync when a data directory is created,
//     even with NoSync, before Open returns.
//   - With fsync on, LevelDB's journal is written over a file that is already
//     full of zeros and synced with fdatasync (prealloc.go): the sync then
//     flushes data only, with no file-system metadata commit per group. The
//     file gets its journal name (and the directory is fsynced) before
//     LevelDB writes a record into it.
//
// MemStore is an in-memory Store with the same semantics, plus Hold,
// Release, Crash and FailNextWrite so tests can lose exactly the writes
// whose done has not run.
package slotstore
