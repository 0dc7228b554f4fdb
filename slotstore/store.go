package slotstore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/raidq/raidq/stripe"
)

// Sentinel errors. Every error the package returns wraps at most one of them
// together with context (directory, topic, partition, offset).
var (
	// ErrNotFound: the slot is empty (on this incarnation: see Incarnation).
	ErrNotFound = errors.New("slot not found")
	// ErrCorrupt: stored bytes failed a check (shard CRC, LevelDB checksum,
	// a malformed value). A corrupt shard is treated as missing by readers.
	ErrCorrupt = errors.New("corrupt data")
	// ErrClosed: the store was closed (or, for a MemStore, crashed).
	ErrClosed = errors.New("store closed")
	// ErrBusy: the commit queue holds Options.MaxQueue batches already.
	// The caller should shed load (answer the producer BUSY), not wait.
	ErrBusy = errors.New("commit queue full")
	// ErrInvalid: a write or key the store refuses: a bad topic (see
	// ValidateTopic), an empty or oversized shard.
	ErrInvalid = errors.New("invalid")
)

// MaxShardBytes bounds one stored shard; a larger PutSlot fails the batch.
const MaxShardBytes = 8 << 20

// Defaults for Options.
const (
	DefaultMaxBatchBytes = 4 << 20
	DefaultMaxQueue      = 4096
)

// Key names one slot.
type Key struct {
	Topic     string
	Partition uint32
	Offset    uint64
}

func (k Key) String() string {
	return fmt.Sprintf("topic %q partition %d offset %d", k.Topic, k.Partition, k.Offset)
}

// Incarnation identifies one life of a data directory. A node whose directory
// is new (or was wiped) has a new incarnation and must answer "unknown", not
// "empty", for offsets before Birth until repair has filled them.
type Incarnation struct {
	ID    [16]byte
	Birth uint64 // unix ns: when this data dir was created, on cluster time once settled
	// Provisional: Birth is still the clock of the process that created the
	// directory (Options.Now); the node settles it from cluster time
	// (Store.SettleBirth) before the store takes writes.
	Provisional bool
}

func (i Incarnation) String() string {
	return fmt.Sprintf("%x@%d", i.ID, i.Birth)
}

// Options configure a store. The zero value is the safe default (fsync on).
type Options struct {
	// NoSync is --no-fsync mode: commits are not fsynced, so a power loss
	// can lose acknowledged writes. Open logs a warning saying so.
	NoSync bool
	// Logger receives lifecycle events and failures; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for the incarnation birth (unix ns); nil means time.Now.
	Now func() uint64
	// MaxBatchBytes caps the shard bytes coalesced into one synced LevelDB
	// write (a single larger batch is still written alone). Default 4 MiB.
	MaxBatchBytes int
	// MaxQueue caps batches waiting for the committer; beyond it Commit fails
	// fast with ErrBusy instead of blocking. Default 4096.
	MaxQueue int
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = func() uint64 { return uint64(time.Now().UnixNano()) }
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = DefaultMaxQueue
	}
	return o
}

// Store is the narrow I/O interface a node uses. All methods are safe for
// concurrent use. See the package comment for who may call what.
type Store interface {
	// Commit queues b and returns without waiting for a write or fsync; done
	// is called exactly once. (Commit does read: the write-once check looks
	// each slot up, normally in LevelDB's cache or bloom filter.) A single
	// committer goroutine coalesces queued batches into one LevelDB batch
	// written with Sync (unless NoSync), then calls every done in submission
	// order. An empty batch is a barrier: its done runs after every earlier
	// commit is durable. If a PutSlot key already holds (or is queued with)
	// DIFFERENT bytes, Commit panics: that is a protocol bug. Same bytes:
	// no-op. If the write or sync fails, done gets the error and the store
	// is failed: every later Commit gets that error. Immediate errors
	// (ErrClosed, ErrBusy, failed store, invalid batch) call done before
	// Commit returns. b and its shard slices must not be modified until done
	// runs. done must be quick (it holds up every later commit) and must not
	// call Close.
	Commit(b *Batch, done func(error))
	// Get returns a copy of the slot's shard after verifying it with
	// stripe.Parse; a bad shard is an error wrapping ErrCorrupt (and
	// stripe.ErrCorruptShard), an empty slot one wrapping ErrNotFound.
	Get(k Key) ([]byte, error)
	// Scan calls fn for every slot of (topic, partition) with
	// from <= offset < to, in ascending offset order, until fn returns
	// false. It does NOT verify CRCs (callers decide); shard is only valid
	// during fn (copy it to keep it). fn must not call Close.
	Scan(topic string, partition uint32, from, to uint64, fn func(offset uint64, shard []byte) bool) error
	// Seal returns the durable seal of the range starting at rangeStart,
	// 0 if none. Seals only rise: SetSeal keeps the larger value.
	Seal(topic string, partition uint32, rangeStart uint64) (uint64, error)
	// DropBefore deletes every slot, hole and seal (by rangeStart) of
	// (topic, partition) with offset < before, and returns how many slots
	// it deleted. Retention only: deletes are not fsynced (a crash may
	// bring some back; the next pass drops them again).
	DropBefore(topic string, partition uint32, before uint64) (int, error)
	// Mark returns the durable mark kind of (topic, partition), 0 if none
	// (marks_holes.go). Marks only rise: Batch.RaiseMark keeps the larger value.
	Mark(kind MarkKind, topic string, partition uint32) (uint64, error)
	// Holes returns the holes of (topic, partition) in [from, to), in
	// ascending order (Batch.PutHole; DropBefore drops them).
	Holes(topic string, partition uint32, from, to uint64) ([]uint64, error)
	// ApproxBytes estimates the bytes the slots of (topic, partition) in
	// [from, to) take (size-based retention).
	ApproxBytes(topic string, partition uint32, from, to uint64) (int64, error)
	// ClockFloor returns the node's durable clock floor, 0 if none
	// (Batch.RaiseClockFloor, clock_floor.go).
	ClockFloor() (uint64, error)
	// Incarnation returns this data directory's incarnation.
	Incarnation() Incarnation
	// SettleBirth ends a provisional incarnation (one Open created; see
	// Incarnation.Provisional): its birth becomes max(Birth, birth) if the
	// store holds nothing yet (no slot, seal, mark or hole), else it stays,
	// and the incarnation is no longer provisional (durably, with Sync).
	// A settled incarnation is left as it is. It returns the incarnation.
	// Call it before the first Commit.
	SettleBirth(birth uint64) (Incarnation, error)
	// DiskBytes returns the bytes the store holds on disk: its files' sizes,
	// less the zeros of preallocated journals (0 for MemStore).
	DiskBytes() int64
	// Close flushes the queue (every queued done runs), stops the
	// committer and closes the database. Later calls to Close return nil;
	// every other method then returns (or passes to done) ErrClosed.
	Close() error
}

// verifyShard checks a stored shard with stripe.Parse before handing it out.
func verifyShard(op string, v []byte) ([]byte, error) {
	if _, err := stripe.Parse(v); err != nil {
		return nil, fmt.Errorf("slotstore: %s: %w: %w", op, ErrCorrupt, err)
	}
	return v, nil
}
