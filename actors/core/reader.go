package core

import (
	"fmt"
	"sort"
	"time"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/invariants"
	"github.com/raidq/raidq/stripe/quorum"
)

// Position is where a record stands in a partition: the stripe's offset and
// the record's index inside the stripe. Positions order records totally.
type Position struct {
	Offset uint64
	Index  uint32
}

// Less orders positions.
func (p Position) Less(o Position) bool {
	return p.Offset < o.Offset || (p.Offset == o.Offset && p.Index < o.Index)
}

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Offset, p.Index) }

// ReaderConfig holds one partition reader's rules (docs/design.md#read-path).
type ReaderConfig struct {
	Params quorum.Params
	// Window is the widest scan, in ns.
	Window uint64
	// LookAhead: how far past an in-doubt offset the reader looks for the
	// same stripe id committed elsewhere before giving up on it.
	LookAhead uint64
	// InDoubtWait: how long to wait for unheard nodes before recording an
	// offset as in doubt and going on.
	InDoubtWait int64
	// RescanEvery: how often to ask unheard nodes again while waiting.
	RescanEvery int64
	// DedupeHorizon: stripe ids are remembered for this many ns of offsets
	// (default 150 s: longer than Kafka's default delivery.timeout.ms,
	// 120 s, so a client's retry of a batch under the same stripe id is
	// dropped). The ids cost some 90 bytes per stripe of the horizon
	// (seen, seenQ; reader_drain.go prune) and are capped at MaxSeenIDs:
	// past it the oldest are forgotten, so at more than about 7,000
	// stripes/s on one partition the horizon shrinks rather than memory
	// growing (about 95 MB per partition reader at the cap).
	DedupeHorizon uint64
	// SkipBehind: a reader more than this far behind now-D probes for the
	// next occupied offset and jumps over empty time (0: never). It must
	// exceed the accept window plus clock skew, because skipped ranges are
	// not sealed: only the nodes' accept window keeps writes out of them.
	SkipBehind uint64
	// MaxDeferred bounds the in-doubt offsets a reader keeps watching
	// after moving past them (reader_deferred.go). With that many
	// unresolved, the reader waits at the next in-doubt offset instead of
	// passing it: an acked stripe is never given up on.
	MaxDeferred int
	// MaxDeferredBytes bounds the shard bytes the deferred rows may hold
	// (each counted as if all n of its shards came in), likewise.
	MaxDeferredBytes int
	// DeferredRescan is the first interval between re-asks of a deferred
	// offset's unheard nodes; it doubles up to MaxDeferredRescan.
	DeferredRescan, MaxDeferredRescan int64
	// Bugs re-creates fixed bugs on purpose, for the simulation's check
	// that it would catch them (scenarios/sim TestSimCatchesBugs). Never
	// set outside that test.
	Bugs ReaderBugs
}

// ReaderBugs are read-path bugs the reader once had, each behind a switch.
type ReaderBugs struct {
	ForgetInDoubt     bool // report an in-doubt offset and forget it instead of deferring it
	PassQuorumLoss    bool // use scans with up to W-1 nodes unheard (more than n-k)
	SkipByReaderClock bool // bound the far-behind skip by the reader's clock only
	RescansFirst      bool // serve due rescans before every main scan
}

// DefaultReaderConfig derives reader rules from topic parameters. The
// look-ahead covers a producer's whole retry span.
//
// RescanEvery is a quarter of the accept window, between 5ms and 100ms: at the
// read frontier a node that closed a little less than its peers is
// unheard above its Closed, and a stripe still completing there waits
// one rescan (docs/design.md#the-read-frontier), so a low-latency topic
// rescans sooner.
func DefaultReaderConfig(p quorum.Params) ReaderConfig {
	rescan := min(max(int64(p.AcceptWindow)/4, 5_000_000), 100_000_000)
	return ReaderConfig{Params: p, Window: RangeNanos, LookAhead: 2_000_000_000,
		InDoubtWait: 1_000_000_000, RescanEvery: rescan, DedupeHorizon: 150_000_000_000,
		SkipBehind: 10_000_000_000, MaxDeferred: 4096, MaxDeferredBytes: 256 << 20, DeferredRescan: 1_000_000_000, MaxDeferredRescan: 8_000_000_000}
}

// Scan is one scan the reader wants run: [From, To) on the listed
// ensemble positions, sealing it there.
type Scan struct {
	From, To uint64
	Nodes    []int
	Rescan   bool
	// Probe: also ask each node for its first occupied offset at or after
	// To; with the answers the reader skips empty time up to ProbeLimit.
	Probe      bool
	ProbeLimit uint64
}

// Entry is one slot a node returned.
type Entry struct {
	Offset uint64
	Shard  []byte
}

// NodeResult is one node's answer to a Scan.
type NodeResult struct {
	Node  int
	Heard bool // answered OK up to Closed
	// Closed: the node takes no new write below it in the scanned range
	// (its closing scan's answer, ScanReply.Seal); its Entries cover
	// [Scan.From, Closed). A heard node is empty only below Closed.
	Closed  uint64
	Entries []Entry
	After   uint64 // with Scan.Probe: the node's first occupied offset >= To (0: none)
	// Clock is the node's clock (unix ns) when it answered; the far-behind
	// skip is bounded by the heard nodes' clocks, never the reader's.
	Clock int64
}

// Delivery is one record ready for consumers.
type Delivery struct {
	Pos    Position
	Stripe stripe.ID
	Record stripe.Record
	// Late: delivered from a deferred in-doubt offset once it became
	// decodable, after records at higher positions.
	Late bool
}

// InDoubtReport names an offset given up on, and the nodes never heard.
type InDoubtReport struct {
	Offset  uint64
	Stripe  stripe.ID
	Seen    int
	Unheard []int
}

// CorruptReport names a shard that failed its checks.
type CorruptReport struct {
	Node   int
	Offset uint64
	Err    error
}

// Output is what one Apply produced.
type Output struct {
	Deliveries []Delivery
	InDoubt    []InDoubtReport
	Corrupt    []CorruptReport
	Voids      int
	Duplicates int
	// Resolved lists deferred in-doubt offsets settled by this Apply
	// (delivered late, proven void, or found committed elsewhere).
	Resolved []uint64
	// Stalled says why a scan could not be used (too few nodes heard).
	Stalled string
	// Short: the nodes closed less of a main scan than it asked for (the
	// read frontier stopped below Scan.To), so the driver should wait a
	// poll before the next main scan rather than ask again at once.
	Short bool
}

// cell states of one node at one offset.
const (
	cellUnheard uint8 = iota
	cellEmpty
	cellShard
	cellCorrupt
)

// row is everything known about one offset that some node had a slot at.
type row struct {
	offset    uint64
	state     []uint8
	shards    []*stripe.Shard
	firstSeen int64
	lastAsk   int64
	// Deferred rows only: the groups settled (delivered or void) and when
	// to re-ask the unheard nodes.
	done     map[stripe.ID]bool
	nextAsk  int64
	askEvery int64
	bytes    int // rowBytes when deferred
}

// Reader is the pure logic of one partition reader. It is owned by one
// reader actor (or the simulation).
type Reader struct {
	cfg      ReaderConfig
	start    Position // where reading began: nothing before it is delivered
	pos      Position // next record to deliver
	frontier uint64   // every offset below it was scanned
	rows     map[uint64]*row
	order    []uint64 // sorted offsets of rows
	seen     map[stripe.ID]uint64
	seenQ    []seenEntry
	// seenDropped counts entries resliced off seenQ's head since it was
	// last copied down (prune).
	seenDropped int
	// seqs: the sequences delivered per record-numbered producer
	// (reader_seqs.go).
	seqs map[stripe.ProducerID]*seqMemory
	// later indexes buffered decodable groups: stripe id -> highest offset.
	later map[stripe.ID]uint64
	// deferred holds in-doubt rows the reader moved past (reader_deferred.go).
	deferred deferredSet
	// lastRescan: the previous Next returned a rescan, so a main scan, if
	// one is due, goes next (a hung node must not starve progress).
	lastRescan bool
}

type seenEntry struct {
	off uint64
	id  stripe.ID
}

// NewReader starts a reader at from (delivering records at from.Offset
// with index >= from.Index, then everything after). Its dedupe memory
// starts empty: stripe ids seen before from would not say where a
// previous reader delivered their stripes (one in doubt to it at its
// first copy came at a later one, and its commit may fall in between).
func NewReader(cfg ReaderConfig, from Position) *Reader {
	return &Reader{cfg: cfg, start: from, pos: from, frontier: from.Offset, rows: make(map[uint64]*row),
		seen: make(map[stripe.ID]uint64), later: make(map[stripe.ID]uint64), deferred: newDeferredSet()}
}

// Pos is the next position to deliver.
func (r *Reader) Pos() Position { return r.pos }

// Frontier is the end of what has been scanned.
func (r *Reader) Frontier() uint64 { return r.frontier }

// Next returns the scan to run at time now, or false when the reader must
// wait for the clock (everything up to now-D is scanned) or for a blocked
// offset's look-ahead. Rescans of unheard nodes come first, but never two
// in a row while a main scan is due: a rescan of a hung node takes the
// scan timeout, and rescans fall due again meanwhile, so serving them
// first always would stop the reader (the rescan livelock).
func (r *Reader) Next(now int64) (Scan, bool) {
	main, ok := r.mainScan(now)
	if !r.lastRescan || !ok || r.cfg.Bugs.RescansFirst {
		if sc, due := r.rescan(now); due {
			r.lastRescan = true
			return checkScan(sc), true
		}
		if sc, due := r.rescanDeferred(now); due {
			r.lastRescan = true
			return checkScan(sc), true
		}
	}
	r.lastRescan = false
	if ok {
		checkScan(main)
	}
	return main, ok
}

// checkScan asserts that a scan the reader asks for is non-empty and
// inside one owner range: the driver sends it to the owner of
// RangeStart(From), which asserts the same (Owner.Scan, Owner.Close).
func checkScan(sc Scan) Scan {
	if invariants.Enabled && (sc.From >= sc.To || sc.To > RangeStart(sc.From)+RangeNanos) {
		invariants.Failf("reader: scan [%d,%d) (rescan=%v) is empty or crosses the owner range boundary %d",
			sc.From, sc.To, sc.Rescan, RangeStart(sc.From)+RangeNanos)
	}
	return sc
}

// SetTiming changes the reader's read delay D and the accept window its
// far-behind skip allows for, after a `topic alter` (the largest window
// in force: quorum.AcceptPlan.Max). D only sets how far behind the reader
// proposes scans; what it delivers stays bounded by the nodes' closures
// (docs/design.md#changing-a-topics-timing), so a reader may take a change
// up at any time.
func (r *Reader) SetTiming(readDelay, accept int64) {
	r.cfg.Params.ReadDelay = time.Duration(readDelay)
	r.cfg.Params.AcceptWindow = time.Duration(accept)
}

// ReadDelay is the reader's read delay D in ns.
func (r *Reader) ReadDelay() int64 { return int64(r.cfg.Params.ReadDelay) }

// mainScan is the next scan at the frontier, if one is due.
func (r *Reader) mainScan(now int64) (Scan, bool) {
	limit := uint64(max(now-int64(r.cfg.Params.ReadDelay), 0))
	if head := r.blocked(); head != nil {
		limit = min(limit, head.offset+r.cfg.LookAhead+1)
	}
	from := r.frontier
	to := min(from+r.cfg.Window, limit, RangeStart(from)+RangeNanos)
	if to <= from {
		return Scan{}, false
	}
	sc := Scan{From: from, To: to, Nodes: r.all()}
	if skip := r.cfg.SkipBehind; skip > 0 && limit > skip && to < limit-skip {
		sc.Probe, sc.ProbeLimit = true, limit-skip
	}
	return sc, true
}

// skip moves the frontier over empty time after a probing scan: no node
// heard holds anything in [sc.To, target), and since fewer than W nodes
// are unheard, a stripe committed there would have a shard on a heard
// node. So nothing committed lies below target. Nor can anything commit
// there later: target stays SkipBehind below every heard node's clock
// minus the accept window, and those nodes refuse offsets that old, so
// fewer than W nodes could ever take a shard below target. The reader's
// own clock only chooses when to probe (a reader clock seconds fast must
// not skip over live writes); a heard node that did not report its clock
// prevents the skip.
func (r *Reader) skip(sc Scan, results []NodeResult) {
	target := sc.ProbeLimit
	accept := uint64(r.cfg.Params.AcceptWindow)
	for _, res := range results {
		if !res.Heard {
			continue
		}
		if r.cfg.Bugs.SkipByReaderClock {
			if res.After != 0 {
				target = min(target, res.After)
			}
			continue
		}
		if res.Clock <= 0 || uint64(res.Clock) < accept+r.cfg.SkipBehind {
			return
		}
		target = min(target, uint64(res.Clock)-accept-r.cfg.SkipBehind)
		if res.After != 0 {
			target = min(target, res.After)
		}
	}
	if target > r.frontier {
		r.frontier = target
	}
}

// rescan re-asks the nodes unheard at buffered rows, at most once per
// RescanEvery for each row. Every waiting row is re-asked, not only the
// head: a row queued behind the head has been waiting (its InDoubtWait
// runs) since it was first seen. One rescan covers the rows of one owner
// range, from the first row due to the range end (or the frontier), on
// every node unheard at any of them; calling Next again at the same time
// covers the next range.
//
// "Unheard" here is what the verdict counts as unheard (unheardCount): a
// node holding a corrupt slot is re-asked too, since repair may rewrite
// it. So every row in doubt has a rescan falling due (W >= k: a group in
// doubt has fewer than k shards but W or more with the unheard ones), and
// each rescan's Apply drains: once its InDoubtWait has passed the row is
// deferred even when no main scan is due. A reader that reached the head
// row's look-ahead before then has only the rescans left to get there.
func (r *Reader) rescan(now int64) (Scan, bool) {
	for i, off := range r.order {
		rw := r.rows[off]
		if now-rw.lastAsk < r.cfg.RescanEvery || rw.unheardCount() == 0 {
			continue
		}
		to := min(r.frontier, RangeStart(off)+RangeNanos)
		unheard := make([]bool, r.cfg.Params.N)
		for _, o := range r.order[i:] {
			if o >= to {
				break
			}
			r.rows[o].lastAsk = now
			for _, n := range r.rows[o].askable() {
				unheard[n] = true
			}
		}
		var nodes []int
		for n, u := range unheard {
			if u {
				nodes = append(nodes, n)
			}
		}
		return Scan{From: off, To: to, Nodes: nodes, Rescan: true}, true
	}
	return Scan{}, false
}

func (r *Reader) all() []int {
	nodes := make([]int, r.cfg.Params.N)
	for i := range nodes {
		nodes[i] = i
	}
	return nodes
}

// blocked returns the first buffered row if the drain stopped on it.
func (r *Reader) blocked() *row {
	if len(r.order) == 0 {
		return nil
	}
	return r.rows[r.order[0]]
}

func (rw *row) unheard() []int {
	var out []int
	for i, s := range rw.state {
		if s == cellUnheard {
			out = append(out, i)
		}
	}
	return out
}

// askable lists the nodes a rescan of rw re-asks: those unheardCount
// counts, never heard or holding a corrupt slot (repair may rewrite it).
func (rw *row) askable() []int {
	var out []int
	for i, s := range rw.state {
		if s == cellUnheard || s == cellCorrupt {
			out = append(out, i)
		}
	}
	return out
}

// Apply merges the node results of sc and delivers what became certain.
func (r *Reader) Apply(now int64, sc Scan, results []NodeResult) Output {
	var out Output
	if invariants.Enabled {
		defer r.checkApply(r.pos, r.frontier, &out)
	}
	if sc.Rescan {
		r.merge(now, sc, results, &out, false)
		r.settleDeferred(sc, &out)
	} else if sc.From == r.frontier {
		heard := 0
		for _, res := range results {
			if res.Heard {
				heard++
			}
		}
		// With W or more unheard a committed stripe could be invisible;
		// with more than n-k unheard no stripe can be decoded, so every
		// committed one there would be in doubt: wait for the nodes rather
		// than pass them (finding: three of six down skipped everything).
		p := r.cfg.Params
		if unheard := p.N - heard; unheard >= p.W || (unheard > p.N-p.K && !r.cfg.Bugs.PassQuorumLoss) {
			out.Stalled = fmt.Sprintf("scan [%d,%d): only %d of %d nodes answered; with %d unheard a committed stripe could be hidden or undecodable",
				sc.From, sc.To, heard, p.N, unheard)
			return out
		}
		to := r.closedTo(sc, results)
		out.Short = to < sc.To
		if to > sc.From {
			final := sc
			final.To = to
			r.merge(now, final, results, &out, true)
			r.frontier = to
			if sc.Probe && to == sc.To {
				r.skip(sc, results)
			}
		}
	}
	r.drain(now, &out)
	return out
}

// checkApply asserts that an Apply moved the reader only forward: its
// position and frontier never go back, and neither do its deliveries,
// but for late ones. Those come from deferred rows (reader_deferred.go),
// which the reader passed: below the position it started from and at or
// after its start (deliverLate asserts the row side as it delivers).
func (r *Reader) checkApply(pos Position, frontier uint64, out *Output) {
	if r.pos.Less(pos) || r.frontier < frontier {
		invariants.Failf("reader: moved back, position %s -> %s, frontier %d -> %d", pos, r.pos, frontier, r.frontier)
	}
	var last uint64
	for _, d := range out.Deliveries {
		switch {
		case d.Late && (d.Pos.Offset >= pos.Offset || d.Pos.Less(r.start)):
			invariants.Failf("reader: late delivery at %s not behind the position %s (start %s)", d.Pos, pos, r.start)
		case d.Late:
		case d.Pos.Less(pos) || d.Pos.Offset < last:
			invariants.Failf("reader: delivery at %s goes back (position %s, previous delivery at offset %d) and is not late", d.Pos, pos, last)
		default:
			last = d.Pos.Offset
		}
	}
}

// closedTo is the read frontier a main scan reached
// (docs/design.md#the-read-frontier): the (n-W+1)-th highest offset the
// heard nodes closed, capped at sc.To. Below it at least n-W+1 nodes take
// no new write, so a stripe with no shard on them can reach at most W-1
// and never commits, and one with a shard there was seen; the nodes that
// closed less are unheard at the offsets above their own Closed (merge).
// sc.From when fewer than n-W+1 nodes were heard.
func (r *Reader) closedTo(sc Scan, results []NodeResult) uint64 {
	p := r.cfg.Params
	var closed []uint64
	for _, res := range results {
		if res.Heard && res.Node >= 0 && res.Node < p.N {
			closed = append(closed, min(max(res.Closed, sc.From), sc.To))
		}
	}
	q := p.N - p.W + 1
	if len(closed) < q {
		return sc.From
	}
	sort.Slice(closed, func(i, j int) bool { return closed[i] > closed[j] })
	return closed[q-1]
}

// merge records node results for [sc.From, sc.To). With fresh, rows are
// created for the range and nodes absent from results count as unheard.
// A heard node counts as empty at a buffered offset only below its
// Closed: above it the node may still take a shard there.
func (r *Reader) merge(now int64, sc Scan, results []NodeResult, out *Output, fresh bool) {
	n := r.cfg.Params.N
	heard := make([]bool, n)
	closed := make([]uint64, n)
	for _, res := range results {
		if res.Node < 0 || res.Node >= n || !res.Heard {
			continue
		}
		heard[res.Node], closed[res.Node] = true, res.Closed
		for _, e := range res.Entries {
			if e.Offset < sc.From || e.Offset >= sc.To || (e.Offset < r.pos.Offset && r.deferred.rows[e.Offset] == nil) {
				continue
			}
			rw := r.rowAt(now, e.Offset, fresh, sc)
			if rw == nil {
				continue
			}
			if s := rw.put(res.Node, e, out); s != nil && r.cfg.Params.Decodable(rw.count(s)) {
				r.later[s.ID] = max(r.later[s.ID], rw.offset)
			}
		}
	}
	// A heard node without an entry at a buffered offset is empty there.
	markEmpty := func(rw *row) {
		for i := range n {
			if heard[i] && rw.offset < closed[i] && rw.state[i] == cellUnheard {
				rw.state[i] = cellEmpty
			}
		}
	}
	for _, off := range r.order {
		if off >= sc.From && off < sc.To {
			markEmpty(r.rows[off])
		}
	}
	r.deferred.each(sc.From, sc.To, markEmpty)
}

// rowAt returns the row for off, creating it on a fresh scan.
func (r *Reader) rowAt(now int64, off uint64, fresh bool, sc Scan) *row {
	if rw, ok := r.rows[off]; ok {
		return rw
	}
	if rw := r.deferred.rows[off]; rw != nil {
		return rw
	}
	if !fresh {
		return nil
	}
	n := r.cfg.Params.N
	rw := &row{offset: off, state: make([]uint8, n), shards: make([]*stripe.Shard, n), firstSeen: now, lastAsk: now}
	r.rows[off] = rw
	i := sort.Search(len(r.order), func(i int) bool { return r.order[i] >= off })
	r.order = append(r.order, 0)
	copy(r.order[i+1:], r.order[i:])
	r.order[i] = off
	return rw
}

// count is the number of shards at rw of s's stripe encoding.
func (rw *row) count(s *stripe.Shard) int {
	c := 0
	for _, x := range rw.shards {
		if x != nil && x.SameStripe(&s.ShardHeader) {
			c++
		}
	}
	return c
}

// put stores node's shard at the row after checking it (CRC, index,
// offset) and returns it, or nil if it was corrupt or already known. A
// corrupt cell takes a good shard a rescan brings (repair rewrote the
// slot); one still corrupt is not reported again.
func (rw *row) put(node int, e Entry, out *Output) *stripe.Shard {
	if rw.state[node] == cellShard {
		return nil
	}
	wasCorrupt := rw.state[node] == cellCorrupt
	s, err := stripe.Parse(e.Shard)
	if err == nil && (int(s.Index) != node || s.Offset != e.Offset || int(s.N) != len(rw.state)) {
		err = fmt.Errorf("%w: shard index %d offset %d n=%d stored at node %d offset %d",
			stripe.ErrCorruptShard, s.Index, s.Offset, s.N, node, e.Offset)
	}
	if err != nil {
		rw.state[node] = cellCorrupt
		if !wasCorrupt {
			out.Corrupt = append(out.Corrupt, CorruptReport{Node: node, Offset: e.Offset, Err: err})
		}
		return nil
	}
	rw.state[node] = cellShard
	rw.shards[node] = &s
	return &s
}
