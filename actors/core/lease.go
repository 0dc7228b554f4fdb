package core

// LeaseWatch judges, on one observer's own clock, whether a lease held by
// another has lapsed: its record's revision (every renewal advances it)
// has not changed for the lease's TTL since the observer first saw that
// revision. The expiry a holder writes is its own clock's and is never
// compared with the observer's: with it, a node whose clock ran fast took
// every lease from live holders (finding 3).
//
// The holder's side needs no change: it stops publishing a little before
// TTL after each renewal started, measured on its own clock, and an
// observer can only see the renewal's revision after it was written, so
// the observer's TTL ends after the holder's deadline.
type LeaseWatch struct {
	rev   uint64
	since int64
	seen  bool
}

// Observe records that the lease's revision is rev at now.
func (w *LeaseWatch) Observe(now int64, rev uint64) {
	if !w.seen || w.rev != rev {
		w.rev, w.since, w.seen = rev, now, true
	}
}

// Failed records that reading the lease failed at now: the lapse is
// measured again from the next successful read.
func (w *LeaseWatch) Failed(now int64) { w.seen = false }

// Lapsed reports whether the revision observed has stood still for ttl.
func (w *LeaseWatch) Lapsed(now, ttl int64) bool { return w.seen && now-w.since >= ttl }
