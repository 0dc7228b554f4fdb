package core

import "slices"

// SpanConfig says which time one partition's repair pass walks.
type SpanConfig struct {
	Created  uint64 // the topic's creation: nothing exists before it
	Birth    uint64 // Topic.BirthFor(incarnation birth); 0: no gap to fill
	Repaired uint64 // the repaired mark: the gap below it is filled
	// Verified is the end of the ranges a pass has verified contiguously
	// (every peer answered, nothing left to rebuild); 0: none yet.
	Verified uint64
	Floor    uint64 // retention: nothing below it is kept (dropped mark, now - retention)
	Window   int64  // the rolling window (ns)
	// CatchUp bounds how far back a restarted node resumes from Verified
	// (ns; 0: Window only).
	CatchUp int64
	// Horizon: only offsets older than now - Horizon are walked (D plus a
	// margin: every write there is over and every range sealed).
	Horizon int64
}

// Span is a stretch of time a pass walks. Gap: below the node's birth
// (the walk raises the repaired mark as it goes).
type Span struct {
	From, To uint64
	Gap      bool
}

// RepairSpans returns what a pass at now walks, in order: the gap below
// the node's birth not yet repaired (a young incarnation) and the rolling
// window of the recent past, resumed from Verified after a restart. A gap
// span's From can be above Repaired (the floor or the topic's creation):
// the caller raises the mark to it, nothing is kept below.
func RepairSpans(now int64, c SpanConfig) []Span {
	hz := uint64(max(now-c.Horizon, 0))
	low := max(c.Created, c.Floor)
	var out []Span
	gapEnd := uint64(0)
	if c.Birth > 0 {
		from, to := max(c.Repaired, low), min(c.Birth, hz)
		if from < to {
			out = append(out, Span{From: from, To: to, Gap: true})
		}
		gapEnd = to
	}
	from := uint64(max(now-c.Window, 0))
	if c.Verified > 0 && c.Verified < from {
		from = max(c.Verified, uint64(max(now-max(c.CatchUp, c.Window), 0)))
	}
	from = max(from, low, gapEnd)
	if from < hz {
		out = append(out, Span{From: from, To: hz})
	}
	return out
}

// PeersTime is cluster time as the heard peers' replies tell it: the
// median of their clocks (a minority of fast or slow peers cannot move
// it). ok is false when no peer was heard.
func PeersTime(peers []PeerScan) (t int64, ok bool) {
	var clocks []int64
	for _, p := range peers {
		if p.Heard && p.Clock > 0 {
			clocks = append(clocks, p.Clock)
		}
	}
	if len(clocks) == 0 {
		return 0, false
	}
	slices.Sort(clocks)
	return clocks[len(clocks)/2], true
}

// BeyondHorizon says a walk's range [.., to) reaches past what may be
// judged yet: later than horizon before cluster time as the peers tell it.
// A pass takes its own clock for the span's end; a clock stepped ahead
// and not yet caught by the clock watch would otherwise mark ranges of
// the real future verified, and the shards this node then refuses there
// (it has closed them by its own clock) would never be rebuilt. With no
// peer heard nothing is settled anyway.
func BeyondHorizon(to uint64, peers []PeerScan, horizon int64) bool {
	t, ok := PeersTime(peers)
	return ok && int64(to) > t-horizon
}
