package sim

import (
	"slices"
	"time"
)

// Progress (liveness) of the fan-out readers: safety checks alone pass a
// reader that delivers everything eventually, however late. The rescan
// livelock (finding 6: a hung node's rescans, each taking the suspect
// timeout, fell due again before the next main scan, so with rescans
// always first the reader stopped while the node stayed down) breaks no
// safety property: the reader catches up once the node answers. So:
//
//	every acked record is delivered by every reader within progressBound
//	of becoming readable, not counting the time during which the stripe
//	cannot be read (fewer than k of the nodes holding its shards up, or
//	more than n-k nodes down: the reader must wait then), nor
//	perInDoubt for each in-doubt offset the reader passed meanwhile.
//
// A wiped node counts as down from its wipe on (wipe.go). A slow node
// counts as down too: its round trip (100-300 ms) mostly exceeds the
// suspect timeout, so once one of its scans timed out the reader rarely
// hears it again (only a scan answered within 150 ms clears it).
//
// A record becomes readable when it is acked, the reader's clock minus
// the read delay D has passed its offset, and the reader has caught up
// with its clock once (its frontier within a second of its clock minus
// D: a reader that starts far behind, ReaderBehind or ReaderLate, first
// catches up scan by scan). Records whose reader restarted between
// readable and delivered are not timed: the new incarnation re-reads from
// its low water. With repair (repair.go), shards repair wrote do not count
// as holders (heldFirst).
//
// The bound covers what the fixed core may legitimately spend: an earlier
// offset in doubt holds the reader for InDoubtWait and the look-ahead
// (1 s + 2 s of offsets, so up to ~3 s), a scan may wait scanTimeout for
// a node that does not answer, slow nodes add 150 ms a hop, and readers
// that start late or far behind catch up through probes. Measured over
// 2000 seeds of SeedConfig, the fixed core stays below 3 s (Result.MaxLag
// 2.95 s). With core.ReaderBugs.RescansFirst a reader stops for as long
// as a hung node with an in-doubt row stays down (rescanLivelockConfig:
// up to 8 s).
const progressBound = 5 * int64(time.Second)

// perInDoubt is what each in-doubt offset the reader passes may add: the
// core passes a run of them one main scan each (its look-ahead ends one
// past the blocked head), and a rescan comes between two main scans.
const perInDoubt = 2 * scanTimeout

// checkProgress times every acked stripe's first record at every reader.
func (s *sim) checkProgress() {
	d := int64(s.params.ReadDelay)
	for _, r := range s.readers {
		first := map[string]delivered{}
		for _, g := range r.got {
			if _, ok := first[g.value]; !ok {
				first[g.value] = g
			}
		}
		for _, id := range sortedIDs(s.truth.acked) {
			vs := s.truth.values[id]
			if len(vs) == 0 {
				continue
			}
			got, ok := first[vs[0]]
			if !ok {
				continue // checkAckedDelivered reports it
			}
			off := s.truth.acked[id]
			if r.caught == 0 {
				continue // never caught up: checkAckedDelivered has the rest
			}
			ready := max(s.truth.ended[id], int64(off)+d-r.skew, r.caught)
			if r.started[got.inc] > ready {
				continue // restarted meanwhile
			}
			if got.at <= ready {
				continue
			}
			lag := got.at - ready - s.unreadable(ready, got.at, s.holders(id, off), off)
			passed := r.inDoubtBetween(ready, got.at)
			lag -= int64(passed) * perInDoubt
			bound := progressBound
			if got.late {
				// A deferred row is re-asked on a doubling interval (core
				// ReaderConfig.DeferredRescan up to MaxDeferredRescan): one
				// re-ask lost on the network costs the next interval, whoever
				// is up meanwhile (seed 3 of rescanLivelockConfig: two lost
				// re-asks, 8 s).
				bound += s.readerConfig().MaxDeferredRescan
			}
			s.res.MaxLag = max(s.res.MaxLag, time.Duration(lag))
			if lag > bound {
				s.violate("liveness: %s delivered %s of %s (acked at %s) %v after it became readable at %s (less %v unreadable and %d in-doubt offsets passed meanwhile), more than %v",
					r.name, s.log.pos(got.pos), sid(id), s.log.off(off), time.Duration(got.at-ready).Round(time.Millisecond),
					s.log.at(ready), time.Duration(got.at-ready-lag-int64(passed)*perInDoubt).Round(time.Millisecond), passed, time.Duration(bound))
			}
		}
	}
}

// unreadable is the time in [from, to) during which a stripe with shards
// on holders cannot be read: fewer than k of them up, or more than n-k
// nodes down.
func (s *sim) unreadable(from, to int64, holders []int, off uint64) int64 {
	cuts := []int64{from, to}
	holders = s.heldFirst(holders, off)
	for _, o := range s.outages {
		for _, t := range []int64{o.start, o.end} {
			if t > from && t < to {
				cuts = append(cuts, t)
			}
		}
	}
	slices.Sort(cuts)
	var sum int64
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]
		if b > a && !s.readableAt(a, holders) {
			sum += b - a
		}
	}
	return sum
}

// readableAt: at true time t at least k holders are up and at most n-k
// nodes are down (by the outage plan; slow nodes count as down).
func (s *sim) readableAt(t int64, holders []int) bool {
	down := map[int]bool{}
	for _, n := range s.nodes {
		if n.slow || (n.wipedAt != 0 && n.wipedAt <= t) {
			down[n.id] = true // a wiped node: unknown below its birth, its clock maybe behind
		}
	}
	for _, o := range s.outages {
		if o.start <= t && t < o.end {
			down[o.node] = true
		}
	}
	up := 0
	for _, h := range holders {
		if !down[h] {
			up++
		}
	}
	return up >= s.params.K && len(down) <= s.params.N-s.params.K
}

// noteCaughtUp records when the reader first caught up with its clock:
// its frontier within a second of its clock minus the read delay.
func (r *reader) noteCaughtUp() {
	if r.caught != 0 {
		return
	}
	if head := r.clock() - r.r.ReadDelay(); int64(r.r.Frontier()) >= head-int64(time.Second) {
		r.caught = r.s.now
	}
}

// inDoubtBetween counts the reader's in-doubt reports in [from, to].
func (r *reader) inDoubtBetween(from, to int64) int {
	n := 0
	for _, t := range r.inDoubtAt {
		if t >= from && t <= to {
			n++
		}
	}
	return n
}
