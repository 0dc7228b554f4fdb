package core

import (
	"fmt"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// group is the shards of one stripe encoding found at one offset.
type group struct {
	ref    *stripe.Shard
	shards []*stripe.Shard // by ensemble position
	seen   int
}

// groups splits a row's shards by stripe encoding, in ensemble order of
// first appearance (deterministic).
func (rw *row) groups() []*group {
	var gs []*group
	for i, s := range rw.shards {
		if s == nil {
			continue
		}
		var g *group
		for _, x := range gs {
			if x.ref.SameStripe(&s.ShardHeader) {
				g = x
				break
			}
		}
		if g == nil {
			g = &group{ref: s, shards: make([]*stripe.Shard, len(rw.shards))}
			gs = append(gs, g)
		}
		g.shards[i] = s
		g.seen++
	}
	return gs
}

// unheardCount counts nodes that might still hold a shard of a group here:
// never heard, or holding a corrupt slot.
func (rw *row) unheardCount() int {
	c := 0
	for _, s := range rw.state {
		if s == cellUnheard || s == cellCorrupt {
			c++
		}
	}
	return c
}

// drain delivers buffered rows in offset order until one must wait.
func (r *Reader) drain(now int64, out *Output) {
	for len(r.order) > 0 {
		rw := r.rows[r.order[0]]
		if rw.offset >= r.frontier {
			break
		}
		if !r.resolve(now, rw, out) {
			r.pos = Position{Offset: rw.offset, Index: r.skipIndex(rw.offset)}
			return
		}
		r.forget(rw)
		r.pos = Position{Offset: rw.offset + 1}
	}
	if r.frontier > r.pos.Offset {
		r.pos = Position{Offset: r.frontier}
	}
	r.prune()
}

// skipIndex keeps a partially delivered start offset's index.
func (r *Reader) skipIndex(off uint64) uint32 {
	if off == r.pos.Offset {
		return r.pos.Index
	}
	return 0
}

// resolve judges every group at rw; false means wait (in doubt, still
// within the wait and look-ahead bounds, or the deferred set is full). A
// row left with a group in doubt after the waits is deferred: the reader
// moves on and keeps re-asking its unheard nodes (reader_deferred.go).
func (r *Reader) resolve(now int64, rw *row, out *Output) bool {
	p := r.cfg.Params
	unheard := rw.unheardCount()
	var doubt []stripe.ID
	for _, g := range rw.groups() {
		if _, dup := r.seen[g.ref.ID]; dup {
			if p.Judge(g.seen, unheard) == quorum.Deliver {
				out.Duplicates++
			}
			continue
		}
		switch p.Judge(g.seen, unheard) {
		case quorum.Void:
			out.Voids++
		case quorum.Deliver:
			r.deliver(rw, g, out)
		case quorum.InDoubt:
			if r.committedLater(rw.offset, g.ref.ID) {
				continue // the retry copy is delivered at its own offset
			}
			// Wait until InDoubtWait has passed since the row was first seen
			// (rescans re-ask its unheard nodes meanwhile) and the look-ahead
			// up to offset+LookAhead, inclusive, is scanned: Next lets the
			// frontier reach exactly offset+LookAhead+1.
			if now-rw.firstSeen < r.cfg.InDoubtWait || r.frontier <= rw.offset+r.cfg.LookAhead {
				return false
			}
			if r.deferred.full(r.cfg.MaxDeferred, r.cfg.MaxDeferredBytes) {
				out.Stalled = fmt.Sprintf("%d in-doubt offsets unresolved (%d MiB of shards), the most this reader keeps: waiting at offset %d for unheard nodes %v",
					r.deferred.len(), r.deferred.bytes>>20, rw.offset, rw.unheard())
				return false
			}
			doubt = append(doubt, g.ref.ID)
		}
	}
	if len(doubt) > 0 && r.cfg.Bugs.ForgetInDoubt {
		for _, id := range doubt {
			out.InDoubt = append(out.InDoubt, InDoubtReport{Offset: rw.offset, Stripe: id, Unheard: rw.unheard()})
		}
	} else if len(doubt) > 0 {
		r.deferRow(now, rw, doubt, out)
	}
	return true
}

// committedLater looks ahead in the buffer for a decodable copy of id.
func (r *Reader) committedLater(off uint64, id stripe.ID) bool {
	return r.later[id] > off
}

// forget drops a resolved row and its look-ahead index entries.
func (r *Reader) forget(rw *row) {
	for _, s := range rw.shards {
		if s != nil && r.later[s.ID] == rw.offset {
			delete(r.later, s.ID)
		}
	}
	delete(r.rows, rw.offset)
	r.order = r.order[1:]
}

// deliver decodes a group and emits its records from the reader's
// position on; a group that fails to decode is reported as corrupt and
// treated as void for this reader.
func (r *Reader) deliver(rw *row, g *group, out *Output) {
	if r.emit(rw, g, r.pos, false, out) {
		r.deliveredElsewhere(g.ref.ID, rw.offset, out)
	}
}

// emit decodes g, remembers its stripe id and appends its records at or
// after from; false if it did not decode (reported corrupt).
func (r *Reader) emit(rw *row, g *group, from Position, late bool, out *Output) bool {
	payload, err := stripe.Decode(g.shards)
	var recs []stripe.Record
	if err == nil {
		recs, err = stripe.DecodeBatch(payload)
	}
	if err != nil {
		out.Corrupt = append(out.Corrupt, CorruptReport{Node: -1, Offset: rw.offset, Err: err})
		return false
	}
	r.seen[g.ref.ID] = rw.offset
	r.seenQ = append(r.seenQ, seenEntry{off: rw.offset, id: g.ref.ID})
	if len(r.seenQ) > MaxSeenIDs {
		r.forgetOldest()
	}
	keep := r.freshRecords(g.ref.ID, rw.offset, len(recs)) // reader_seqs.go
	for i, rec := range recs {
		if keep != nil && !keep[i] {
			continue // a record-numbered producer's sequence delivered before
		}
		pos := Position{Offset: rw.offset, Index: uint32(i)}
		if pos.Less(from) {
			continue // before the start position of a resumed reader
		}
		out.Deliveries = append(out.Deliveries, Delivery{Pos: pos, Stripe: g.ref.ID, Record: rec, Late: late})
	}
	return true
}

// MaxSeenIDs caps the stripe ids a reader remembers for dedupe
// (ReaderConfig.DedupeHorizon).
const MaxSeenIDs = 1 << 20

// forgetOldest drops the oldest remembered stripe id (the cap was reached).
func (r *Reader) forgetOldest() {
	e := r.seenQ[0]
	if r.seen[e.id] == e.off {
		delete(r.seen, e.id)
	}
	r.seenQ = r.seenQ[1:]
	r.seenDropped++
	if r.seenDropped >= len(r.seenQ) {
		r.seenQ = append(make([]seenEntry, 0, len(r.seenQ)+len(r.seenQ)/2+16), r.seenQ...)
		r.seenDropped = 0
	}
}

// prune forgets stripe ids older than the dedupe horizon. It drops the
// queue's head by reslicing and copies the rest down only once the dropped
// part is at least as long as what is left, so a long horizon (150 s of
// ids at a high stripe rate) costs amortized O(1) per id rather than a
// copy of the whole queue at every drain.
func (r *Reader) prune() {
	cut := 0
	for cut < len(r.seenQ) && r.seenQ[cut].off+r.cfg.DedupeHorizon < r.pos.Offset {
		if r.seen[r.seenQ[cut].id] == r.seenQ[cut].off {
			delete(r.seen, r.seenQ[cut].id)
		}
		cut++
	}
	r.pruneSeqs()
	if cut == 0 {
		return
	}
	r.seenQ = r.seenQ[cut:]
	if r.seenDropped+cut >= len(r.seenQ) {
		r.seenQ = append(make([]seenEntry, 0, len(r.seenQ)+len(r.seenQ)/2+16), r.seenQ...)
		r.seenDropped = 0
		return
	}
	r.seenDropped += cut
}
