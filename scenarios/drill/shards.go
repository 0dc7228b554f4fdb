package drill

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// LostRecord is an acked record that was never delivered, with what the
// nodes' slot stores hold of its stripe.
type LostRecord struct {
	ID        string      `json:"id"`
	Partition int         `json:"partition"`
	Offset    uint64      `json:"offset"`
	Index     int         `json:"index"`
	Stripe    string      `json:"stripe"`
	AckedAtS  float64     `json:"acked_at_s"`
	Summary   string      `json:"summary"`
	Shards    []ShardSeen `json:"shards"`
}

// ShardSeen is one slot found near a lost record's offset: a shard of its
// stripe (at that offset or another: a retry or a rewrite), or another
// stripe's shard at the record's own offset.
type ShardSeen struct {
	Node   string `json:"node"`
	Offset uint64 `json:"offset"`
	Shard  int    `json:"shard"`
	Same   bool   `json:"same_stripe"`
	Stripe string `json:"stripe,omitempty"`
	Repair bool   `json:"repair,omitempty"`
	Err    string `json:"err,omitempty"`
}

// maxAnalyzed bounds the lost records looked up in the stores.
const maxAnalyzed = 50

// analyzeLost opens every node's slot store (the nodes are stopped) and
// lists, for each lost record, the shards of its stripe within [offset-1s,
// offset+5s) and whatever sits at its offset.
func (r *run) analyzeLost(rep *Report) []LostRecord {
	stores, openErrs, closeStores := r.openSlotStores()
	defer closeStores()
	k := raidq.DefaultParams().K
	var out []LostRecord
	for n, lk := range r.lostKeys {
		if n == maxAnalyzed {
			rep.Notes = append(rep.Notes, fmt.Sprintf("shards listed for the first %d of %d lost records", maxAnalyzed, len(r.lostKeys)))
			break
		}
		prod, seq := int(lk>>40), int(lk&(1<<40-1))
		out = append(out, r.lostRecord(stores, openErrs, prod, seq, k))
	}
	return out
}

// nodeStore is one node's slot store, opened after the drill.
type nodeStore struct {
	id string
	s  slotstore.Store
}

// openSlotStores opens every node's slot store that exists; openErrs
// holds one entry per node whose store is missing or failed to open.
// closeStores closes the opened stores.
func (r *run) openSlotStores() (stores []nodeStore, openErrs []ShardSeen, closeStores func()) {
	quiet := slog.New(slog.DiscardHandler)
	for i, id := range r.be.IDs() {
		dir := filepath.Join(r.be.DataDir(i), "slots")
		if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
			openErrs = append(openErrs, ShardSeen{Node: id, Shard: -1, Err: "no slot store (wiped?)"})
			continue
		}
		s, err := slotstore.Open(dir, slotstore.Options{Logger: quiet})
		if err != nil {
			openErrs = append(openErrs, ShardSeen{Node: id, Shard: -1, Err: "open: " + err.Error()})
			continue
		}
		stores = append(stores, nodeStore{id, s})
	}
	return stores, openErrs, func() {
		for i := len(stores) - 1; i >= 0; i-- {
			stores[i].s.Close()
		}
	}
}

// lostRecord describes producer prod's lost send seq: what the stores
// hold near its offset (after openErrs) and a summary of it; k is the
// shards a stripe needs.
func (r *run) lostRecord(stores []nodeStore, openErrs []ShardSeen, prod, seq, k int) LostRecord {
	rec := r.hist.prods[prod].recs[seq]
	lr := LostRecord{ID: fmt.Sprintf("p%d-%d", prod, seq), Partition: int(rec.part), Offset: rec.off, Index: int(rec.idx),
		Stripe: rec.stripe, AckedAtS: time.Duration(rec.done).Seconds()}
	lr.Shards = append(lr.Shards, openErrs...)
	atOffset := make(map[int]bool)
	elsewhere := make(map[uint64]map[int]bool)
	for _, st := range stores {
		lr.Shards = append(lr.Shards, scanNear(st, rec, atOffset, elsewhere)...)
	}
	lr.Summary = r.lostSummary(rec, atOffset, elsewhere, k)
	return lr
}

// scanNear returns what st holds within [offset-1s, offset+5s) of rec:
// the shards of rec's stripe and whatever sits at rec's offset. It adds
// the good shards of the stripe to atOffset (at rec's offset) or
// elsewhere (by offset).
func scanNear(st nodeStore, rec sendRec, atOffset map[int]bool, elsewhere map[uint64]map[int]bool) []ShardSeen {
	var seen []ShardSeen
	from := rec.off - min(rec.off, uint64(time.Second))
	to := rec.off + uint64(5*time.Second)
	err := st.s.Scan(Topic, uint32(rec.part), from, to, func(off uint64, b []byte) bool {
		h, err := stripe.ParseHeader(b)
		if err != nil {
			if off == rec.off {
				seen = append(seen, ShardSeen{Node: st.id, Offset: off, Shard: -1, Err: err.Error()})
			}
			return true
		}
		same := h.ID.String() == rec.stripe
		if !same && off != rec.off {
			return true
		}
		ss := ShardSeen{Node: st.id, Offset: off, Shard: int(h.Index), Same: same, Repair: h.Flags&stripe.FlagRepair != 0}
		if !same {
			ss.Stripe = h.ID.String()
		}
		if _, err := stripe.Parse(b); err != nil {
			ss.Err = err.Error()
		} else if same && off == rec.off {
			atOffset[int(h.Index)] = true
		} else if same {
			if elsewhere[off] == nil {
				elsewhere[off] = make(map[int]bool)
			}
			elsewhere[off][int(h.Index)] = true
		}
		seen = append(seen, ss)
		return true
	})
	if err != nil && !errors.Is(err, slotstore.ErrNotFound) {
		seen = append(seen, ShardSeen{Node: st.id, Shard: -1, Err: "scan: " + err.Error()})
	}
	return seen
}

// lostSummary sums up where rec's stripe's good shards are and what that
// suggests.
func (r *run) lostSummary(rec sendRec, atOffset map[int]bool, elsewhere map[uint64]map[int]bool, k int) string {
	parts := []string{fmt.Sprintf("%d good shards of the stripe at its acked offset (%d needed)", len(atOffset), k)}
	var offs []uint64
	for o := range elsewhere {
		offs = append(offs, o)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	for _, o := range offs {
		parts = append(parts, fmt.Sprintf("%d at offset %+.3fms", len(elsewhere[o]), float64(int64(o-rec.off))/1e6))
	}
	if c := r.topicCreated; c > 0 && rec.off < c {
		parts = append(parts, fmt.Sprintf("the offset is %.1fms before the topic's creation, where readers start: "+
			"a node accepted a write no reader will ever read", float64(c-rec.off)/1e6))
	} else if len(atOffset) >= k {
		parts = append(parts, "decodable on disk: a read-path problem")
	}
	return strings.Join(parts, "; ")
}

// redundancy opens every node's slot store (the nodes are stopped) and
// counts, for every acked stripe, the good shards of it at the offset
// that holds the most of them: its acked offset, or a full copy the
// producer's rewrite (docs/design.md#write-path step 7) or an in-doubt re-append wrote
// elsewhere when a racing stripe holds slots at the acked one. docs/design.md#the-arithmetic
// promises n-k losses once the remaining shards land or are repaired, W-k
// (0 by default) at the ack. The keys are shard counts ("6", "5", ...).
func (r *run) redundancy() (map[string]int, []string, error) {
	want, acked, lo, hi := r.ackedStripes()
	if len(want) == 0 {
		return nil, nil, nil
	}
	hi += uint64(30 * time.Second) // rewrites and re-appends land later
	count, err := r.countCopies(acked, lo, hi)
	best := make(map[string]int)
	bestCopy := make(map[string]copyKey)
	for k, shards := range count {
		if b, ok := best[k.stripe]; !ok || len(shards) > b {
			best[k.stripe], bestCopy[k.stripe] = len(shards), k
		}
	}
	out := make(map[string]int)
	for _, st := range want {
		out[fmt.Sprint(best[st])]++
	}
	return out, r.whereShort(want, count, bestCopy), err
}

// whereShort says where the acked stripes below n at the end miss
// shards: per partition and missing position (the node there), how many
// and at which offsets (seconds since the load start).
func (r *run) whereShort(want map[slotKey]string, count map[copyKey]map[int]bool, bestCopy map[string]copyKey) []string {
	type miss struct {
		part int32
		pos  int
	}
	type span struct {
		n      int
		lo, hi float64
	}
	n := raidq.DefaultParams().N
	spans := make(map[miss]*span)
	seen := make(map[string]bool)
	for _, st := range want {
		k, ok := bestCopy[st]
		if !ok || seen[st] || len(count[k]) >= n {
			continue
		}
		seen[st] = true
		t := float64(int64(k.off)-r.start.UnixNano()) / 1e9
		for pos := range n {
			if count[k][pos] {
				continue
			}
			m := miss{k.part, pos}
			if spans[m] == nil {
				spans[m] = &span{lo: t, hi: t}
			}
			sp := spans[m]
			sp.n, sp.lo, sp.hi = sp.n+1, min(sp.lo, t), max(sp.hi, t)
		}
	}
	var out []string
	for m, sp := range spans {
		node := fmt.Sprintf("position %d", m.pos)
		if int(m.part) < len(r.ensembles) && m.pos < len(r.ensembles[m.part]) {
			node = r.ensembles[m.part][m.pos] + " (position " + fmt.Sprint(m.pos) + ")"
		}
		out = append(out, fmt.Sprintf("%d acked stripes of partition %d miss the shard of %s, at offsets %.1f-%.1fs into the load",
			sp.n, m.part, node, sp.lo, sp.hi))
	}
	sort.Strings(out)
	return out
}

// slotKey is a slot of a partition.
type slotKey struct {
	part int32
	off  uint64
}

// copyKey is a copy of a stripe: its partition, ID and offset.
type copyKey struct {
	part   int32
	stripe string
	off    uint64
}

// ackedStripes returns every acked stripe at its acked slot (want), each
// acked stripe's partition (acked), and the lowest and highest acked
// offsets.
func (r *run) ackedStripes() (want map[slotKey]string, acked map[string]int32, lo, hi uint64) {
	want = make(map[slotKey]string)
	acked = make(map[string]int32)
	for _, recs := range r.sends() {
		for i := range recs {
			if recs[i].status != statusAcked {
				continue
			}
			want[slotKey{recs[i].part, recs[i].off}] = recs[i].stripe
			acked[recs[i].stripe] = recs[i].part
			if lo == 0 || recs[i].off < lo {
				lo = recs[i].off
			}
			hi = max(hi, recs[i].off)
		}
	}
	return want, acked, lo, hi
}

// countCopies scans every node's slot store within [lo, hi] and returns,
// for every copy of an acked stripe in its partition, the indices of its
// good shards found; the error joins the nodes' open and scan errors.
func (r *run) countCopies(acked map[string]int32, lo, hi uint64) (map[copyKey]map[int]bool, error) {
	count := make(map[copyKey]map[int]bool)
	quiet := slog.New(slog.DiscardHandler)
	var errs []error
	for i, id := range r.be.IDs() {
		dir := filepath.Join(r.be.DataDir(i), "slots")
		if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
			continue
		}
		s, err := slotstore.Open(dir, slotstore.Options{Logger: quiet})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		}
		for p := range r.cfg.Partitions {
			err := s.Scan(Topic, uint32(p), lo, hi+1, func(off uint64, b []byte) bool {
				sh, err := stripe.Parse(b)
				if err != nil {
					return true
				}
				st := sh.ID.String()
				if part, ok := acked[st]; !ok || part != int32(p) {
					return true
				}
				k := copyKey{int32(p), st, off}
				if count[k] == nil {
					count[k] = make(map[int]bool)
				}
				count[k][int(sh.Index)] = true
				return true
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			}
		}
		_ = s.Close()
	}
	return count, errors.Join(errs...)
}
