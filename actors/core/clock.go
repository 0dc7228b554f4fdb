package core

import (
	"slices"
)

// ClockWatch judges whether a node's clock is off cluster time, from its
// peers' offsets (peer clock minus the node's clock, corrected by half the
// round trip of the question). A node whose clock is seconds off refuses
// nearly every write (CLOCK_AHEAD when behind, SEALED when ahead), which
// made producers rewrite every stripe elsewhere: twice the writes, landing
// on the same nodes. Off, the node answers CLOCK_OFF instead, which a
// producer counts like a dead node (no rewrite), and it repairs nothing
// (its repair horizon would mark future ranges verified).
//
// The judgement is the median offset of at least MinPeers peers: one peer
// with a bad clock does not move it. It turns off beyond Bound and back on
// below Bound/2, so a clock near the bound does not flap.
type ClockWatch struct {
	Bound    int64 // ns
	MinPeers int
	off      bool
	median   int64
}

// Observe feeds one round of peer offsets; it reports whether the state
// changed. Too few answers leave the state as it is.
func (w *ClockWatch) Observe(offsets []int64) bool {
	min := max(w.MinPeers, 1)
	if len(offsets) < min {
		return false
	}
	sorted := slices.Clone(offsets)
	slices.Sort(sorted)
	w.median = sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		w.median = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	dist := w.median
	if dist < 0 {
		dist = -dist
	}
	was := w.off
	switch {
	case !w.off && dist > w.Bound:
		w.off = true
	case w.off && dist < w.Bound/2:
		w.off = false
	}
	return was != w.off
}

// Off reports whether the clock is off, and the last median offset (how
// far cluster time is ahead of this node's clock; negative: behind).
func (w *ClockWatch) Off() (bool, int64) { return w.off, w.median }
