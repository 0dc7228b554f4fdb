package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
)

// A partition's tail, found from the data (tail.go): the Kafka offset
// after the last record below the read frontier. It is found with a few
// small scans of the partition's ensemble, never a partition reader:
//
//   - a closing, headers-only scan of the owner range at now − D gives
//     the frontier F (the least offset the heard nodes closed: none of
//     them takes a write below it any more) and the stripes of [range, F);
//   - below that, probes (a node's first occupied offset at or after x,
//     ScanReq.Probe: one store seek) find the highest owner range holding
//     a slot, by bisection, and a closing headers-only scan of that range
//     judges its stripes;
//   - the last stripe's record count comes from decoding that one stripe.
//
// A stripe counts when k or more shards of one encoding are seen (a
// reader decodes it) and no lower offset of the scanned range holds its
// stripe id (a reader delivers the first copy and drops the other).

// Bounds of one tail search.
const (
	tailPageTimeout = time.Second // one node's answer to one page
	tailMaxPages    = 64          // pages of one node's scan
	tailMaxProbes   = 80          // probe rounds of one search (bisection over 2^64 ns needs ~35)
	tailMaxJudged   = 8           // owner ranges judged below the head before giving up
)

var errTailQuorum = errors.New("kafka gateway: too few nodes answered to find a partition's last record")

// tailScan finds the tail of one partition.
type tailScan struct {
	nc   *nats.Conn
	subj bus.Subjects
	t    *meta.Topic
	part int
}

// nodeAnswer is one node's answer to one (paged) scan.
type nodeAnswer struct {
	pos     int // ensemble position
	heard   bool
	closed  uint64 // closing scans: the node takes no write below it
	after   uint64 // probes: the node's first occupied offset >= To (0: none)
	entries []bus.ScanEntry
}

// stripeAt is a stripe judged present: a reader decodes it at offset.
type stripeAt struct {
	offset uint64
	hdr    stripe.ShardHeader
	nodes  []int // ensemble positions that hold one of its shards
}

// ask runs req on every node of the ensemble in parallel.
func (s *tailScan) ask(ctx context.Context, req bus.ScanReq) []nodeAnswer {
	ens := s.t.Ensembles[s.part]
	out := make([]nodeAnswer, len(ens))
	var wg sync.WaitGroup
	for pos := range ens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[pos] = s.askNode(ctx, pos, req)
		}()
	}
	wg.Wait()
	return out
}

// askNode runs every page of one node's scan; any failure leaves the
// node unheard.
func (s *tailScan) askNode(ctx context.Context, pos int, req bus.ScanReq) nodeAnswer {
	node := s.t.Ensembles[s.part][pos]
	subj := s.subj.Scan(node, s.t.Name, uint32(s.part))
	a := nodeAnswer{pos: pos}
	for page := 0; page < tailMaxPages; page++ {
		pctx, cancel := context.WithTimeout(ctx, tailPageTimeout)
		msg, err := s.nc.RequestWithContext(pctx, subj, req.Marshal())
		cancel()
		if err != nil {
			return a
		}
		rep, err := bus.DecodeScanReply(msg.Data)
		if err != nil || rep.Status != bus.StatusOK {
			return a
		}
		a.entries = append(a.entries, rep.Entries...)
		end, last := pageEnd(req, rep)
		if end == 0 {
			return a
		}
		if last {
			a.heard, a.closed, a.after = true, end, rep.After
			return a
		}
		req.From = end
	}
	return a
}

// pageEnd checks one page and returns where it ended and whether it was
// the last (0: a bad page). A closing scan ends at the closed offset
// (Seal), a plain one at To.
func pageEnd(req bus.ScanReq, rep bus.ScanReply) (uint64, bool) {
	end := req.To
	if req.Close {
		if rep.Seal < req.From || rep.Seal > req.To {
			return 0, false
		}
		end = rep.Seal
	}
	switch {
	case rep.Next == end:
		return end, true
	case rep.Next > req.From && rep.Next < end:
		return rep.Next, false
	}
	return 0, false
}

// quorum checks that enough nodes answered: fewer than W unheard, so a
// committed stripe has a shard on a heard node, and no more than n − k,
// as a reader requires of a main scan.
func (s *tailScan) quorum(as []nodeAnswer) error {
	heard := 0
	for _, a := range as {
		if a.heard {
			heard++
		}
	}
	p := s.t.Params
	if unheard := p.N - heard; unheard >= p.W || unheard > p.N-p.K {
		return fmt.Errorf("%w: %d of %d", errTailQuorum, heard, p.N)
	}
	return nil
}

// closing runs a closing headers-only scan of [from, to) (one owner
// range) and returns the lowest offset a heard node closed and the last
// stripe below it.
func (s *tailScan) closing(ctx context.Context, from, to uint64) (uint64, *stripeAt, error) {
	as := s.ask(ctx, bus.ScanReq{Topic: s.t.Name, Partition: uint32(s.part), From: from, To: to, Close: true, HeadersOnly: true})
	if err := s.quorum(as); err != nil {
		return 0, nil, err
	}
	closed := to
	for _, a := range as {
		if a.heard {
			closed = min(closed, a.closed)
		}
	}
	return closed, lastStripe(as, closed, s.t.Params.K), nil
}

// lastStripe is the highest offset below end where k or more heard
// shards of one encoding lie, skipping a stripe id already present at a
// lower offset of the scan.
func lastStripe(as []nodeAnswer, end uint64, k int) *stripeAt {
	byOff := map[uint64][]stripeAt{}
	var offs []uint64
	for _, a := range as {
		if !a.heard {
			continue
		}
		for _, e := range a.entries {
			if e.Offset >= end {
				continue
			}
			h, err := stripe.ParseHeader(e.Shard)
			if err != nil {
				continue // corrupt: a reader skips it too
			}
			groups := byOff[e.Offset]
			if len(groups) == 0 {
				offs = append(offs, e.Offset)
			}
			byOff[e.Offset] = addShard(groups, e.Offset, h, a.pos)
		}
	}
	var best *stripeAt
	firstOf := map[stripe.ID]uint64{}
	for _, off := range offs {
		for i := range byOff[off] {
			g := &byOff[off][i]
			if len(g.nodes) < k {
				continue
			}
			if at, ok := firstOf[g.hdr.ID]; !ok || off < at {
				firstOf[g.hdr.ID] = off
			}
		}
	}
	for _, off := range offs {
		for i := range byOff[off] {
			g := &byOff[off][i]
			if len(g.nodes) >= k && firstOf[g.hdr.ID] == off && (best == nil || off > best.offset) {
				best = g
			}
		}
	}
	return best
}

func addShard(groups []stripeAt, off uint64, h stripe.ShardHeader, pos int) []stripeAt {
	for i := range groups {
		if groups[i].hdr.SameStripe(&h) {
			groups[i].nodes = append(groups[i].nodes, pos)
			return groups
		}
	}
	return append(groups, stripeAt{offset: off, hdr: h, nodes: []int{pos}})
}

// probe is the first occupied offset at or after x on any heard node
// (0: none), from a one-offset plain scan [x−1, x) with ScanReq.Probe.
func (s *tailScan) probe(ctx context.Context, x uint64) (uint64, error) {
	as := s.ask(ctx, bus.ScanReq{Topic: s.t.Name, Partition: uint32(s.part), From: x - 1, To: x, HeadersOnly: true, Probe: true})
	if err := s.quorum(as); err != nil {
		return 0, err
	}
	var first uint64
	for _, a := range as {
		if a.heard && a.after != 0 && (first == 0 || a.after < first) {
			first = a.after
		}
	}
	return first, nil
}

// lastRange is the start of the highest owner range holding a slot in
// [lo, hi), found by bisection with probes; false: no slot there.
func (s *tailScan) lastRange(ctx context.Context, lo, hi uint64, probes *int) (uint64, bool, error) {
	occupied := func(x uint64) (uint64, bool, error) { // the first slot in [x, hi)
		if *probes++; *probes > tailMaxProbes {
			return 0, false, fmt.Errorf("kafka gateway: partition tail: more than %d probes", tailMaxProbes)
		}
		a, err := s.probe(ctx, x)
		return a, err == nil && a != 0 && a < hi, err
	}
	a, ok, err := occupied(lo)
	if err != nil || !ok {
		return 0, false, err
	}
	low, high := core.RangeStart(a), core.RangeStart(hi-1)+core.RangeNanos // a slot in [low, hi); none in [high, hi)
	for high-low > core.RangeNanos {
		mid := low + (high-low)/core.RangeNanos/2*core.RangeNanos
		if a, ok, err = occupied(max(mid, lo)); err != nil {
			return 0, false, err
		}
		if ok {
			low = core.RangeStart(a)
		} else {
			high = mid
		}
	}
	return low, true, nil
}

// records is how many records the stripe at st holds: its shards are
// read from the nodes that hold them and decoded.
func (s *tailScan) records(ctx context.Context, st *stripeAt) (int, error) {
	shards := make([]*stripe.Shard, st.hdr.N)
	var mu sync.Mutex
	var wg sync.WaitGroup
	req := bus.ScanReq{Topic: s.t.Name, Partition: uint32(s.part), From: st.offset, To: st.offset + 1}
	for _, pos := range st.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := s.askNode(ctx, pos, req)
			for _, e := range a.entries {
				sh, err := stripe.Parse(e.Shard)
				if err != nil || e.Offset != st.offset || !sh.SameStripe(&st.hdr) || int(sh.Index) >= len(shards) {
					continue
				}
				mu.Lock()
				shards[sh.Index] = &sh
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	payload, err := stripe.Decode(shards)
	if err != nil {
		return 0, fmt.Errorf("kafka gateway: partition tail: stripe at %d: %w", st.offset, err)
	}
	recs, err := stripe.DecodeBatch(payload)
	if err != nil {
		return 0, fmt.Errorf("kafka gateway: partition tail: stripe at %d: %w", st.offset, err)
	}
	return len(recs), nil
}

// tailFound is what one search found.
type tailFound struct {
	next     uint64 // the offset after the last record found (0: none in the searched span)
	frontier uint64 // every committed record below it was searched
}

// find searches [lo, frontier) from the top: the owner range at head
// (now − D on the gateway's clock: it only says where to look; the nodes'
// closings say what is final), then, while nothing is found, the highest
// occupied range below, at most tailMaxJudged of them.
func (s *tailScan) find(ctx context.Context, lo, head uint64) (tailFound, error) {
	hs := core.RangeStart(max(head, lo))
	frontier, st, err := s.closing(ctx, hs, hs+core.RangeNanos)
	if err != nil {
		return tailFound{}, err
	}
	probes := 0
	for hi, judged := hs, 0; st == nil && hi > lo; judged++ {
		if judged == tailMaxJudged {
			return tailFound{}, fmt.Errorf("kafka gateway: partition tail: %d ranges of void slots", judged)
		}
		r, ok, err := s.lastRange(ctx, lo, hi, &probes)
		if err != nil {
			return tailFound{}, err
		}
		if !ok {
			break
		}
		from, to := max(r, lo), min(r+core.RangeNanos, hi)
		var closed uint64
		if closed, st, err = s.closing(ctx, from, to); err != nil {
			return tailFound{}, err
		}
		if closed < to { // a node closed less there: final only below it
			frontier = closed
		}
		hi = from
	}
	if st == nil {
		return tailFound{frontier: frontier}, nil
	}
	n, err := s.records(ctx, st)
	if err != nil {
		return tailFound{}, err
	}
	return tailFound{next: st.offset + uint64(n), frontier: frontier}, nil
}
