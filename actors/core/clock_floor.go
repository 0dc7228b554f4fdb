package core

// ClockFloor is a node's promise about its own clock, the clock half of
// the read frontier (docs/design.md#the-read-frontier). A node that
// answers a closing scan at clock c tells the reader it takes no new
// write below c - A in the scanned range. Its owners keep that promise
// while it runs (Owner.RaiseFloor); a restart, perhaps with the clock
// stepped back, must keep it too, so the node uses a clock for closing
// only once its store holds a floor at or above it, and a restarted node
// refuses every write older than that durable floor minus A.
//
// The floor is persisted ahead, one accept window at a time (the lease
// CloseClock is given, the closing topic's A): one store write per A/2
// keeps the node closing up to its real clock, and a restarted node then
// refuses nothing its clock alone would not, since floor - A is at most
// the clock it crashed at. (A lease longer than A would refuse fresh
// offsets for a while after a quick restart: with several nodes restarting
// together no write could commit.) Under load the floor rides in the
// store's group commit with the shards; an idle node pays about 2/A small
// syncs a second.
//
// ClockFloor is pure and not safe for concurrent use: the node driver
// holds it under a lock and carries out its effects (actors/node).
type ClockFloor struct {
	persisted int64 // durable in the store
	used      int64 // the highest clock a close used (or the floor restored on start)
	pending   int64 // a persist under way to this value; 0: none
}

// NewClockFloor starts a node's floor from the value its store holds (0
// for a new store): writes below restored - A are refused from the start.
func NewClockFloor(restored int64) *ClockFloor {
	return &ClockFloor{persisted: restored, used: restored}
}

// CloseClock returns the clock a closing scan at node time now may use,
// min(now, durable floor), and raises the used floor to it. When the
// durable floor is due (within lease/2 of now; lease is the closing
// topic's accept window) and no persist is under way, persist is the value
// the driver must write (Batch.RaiseClockFloor) and report back with
// Persisted; 0 otherwise.
func (f *ClockFloor) CloseClock(now, lease int64) (clock, persist int64) {
	lease = max(lease, 1)
	clock = min(now, f.persisted)
	f.used = max(f.used, clock)
	if f.pending == 0 && now+lease/2 > f.persisted {
		f.pending = now + lease
		persist = f.pending
	}
	return clock, persist
}

// Persisted reports the outcome of writing v: on success the durable
// floor rises to v; on failure a later CloseClock asks again.
func (f *ClockFloor) Persisted(v int64, ok bool) {
	if v == f.pending {
		f.pending = 0
	}
	if ok {
		f.persisted = max(f.persisted, v)
	}
}

// Used is the floor owners must refuse writes against (Owner.RaiseFloor):
// offsets older than Used - A were closed for some reader, or may have
// been before a restart.
func (f *ClockFloor) Used() int64 { return f.used }

// Durable is the floor the store holds.
func (f *ClockFloor) Durable() int64 { return f.persisted }
