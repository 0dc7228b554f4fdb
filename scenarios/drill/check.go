package drill

import (
	"fmt"
	"sort"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// checked is what the checker found in a history.
type checked struct {
	attempted, acked, failed, unknown int
	delivered, lost, unexpected       int
	duplicates, recovered, reordered  int
	lost_                             []uint64 // keys of the lost records
	unexpectedSamples                 []string
}

// checkHistory compares the sends (per producer, by sequence) with the
// deliveries, in the order the consumer delivered them.
//
//   - lost: acked and never delivered;
//   - unexpected: delivered but never attempted (or not a drill value);
//   - duplicates: deliveries beyond the first of a record;
//   - recovered: failed or unknown sends that were delivered;
//   - reordered: a record delivered after a later send of the same
//     producer in the same partition (first deliveries only).
func checkHistory(prods [][]sendRec, dels []delivery) checked {
	var c checked
	count := make(map[uint64]int)
	type pp struct{ prod, part int }
	maxSeq := make(map[pp]int)
	seenUnexpected := make(map[string]bool)
	for _, d := range dels {
		if !d.known || d.seq >= len(prods[d.prod]) {
			id := d.raw
			if d.known {
				id = fmt.Sprintf("p%d-%d", d.prod, d.seq)
			}
			if !seenUnexpected[id] {
				seenUnexpected[id] = true
				c.unexpected++
				if len(c.unexpectedSamples) < 10 {
					c.unexpectedSamples = append(c.unexpectedSamples, id)
				}
			}
			continue
		}
		k := key(d.prod, d.seq)
		count[k]++
		if count[k] > 1 {
			c.duplicates++
			continue
		}
		c.delivered++
		g := pp{d.prod, d.part}
		if m, ok := maxSeq[g]; ok && d.seq < m {
			c.reordered++
		} else {
			maxSeq[g] = d.seq
		}
	}
	for pi, recs := range prods {
		for seq := range recs {
			c.attempted++
			got := count[key(pi, seq)] > 0
			switch recs[seq].status {
			case statusAcked:
				c.acked++
				if !got {
					c.lost++
					c.lost_ = append(c.lost_, key(pi, seq))
				}
			case statusFailed:
				c.failed++
				if got {
					c.recovered++
				}
			default:
				c.unknown++
				if got {
					c.recovered++
				}
			}
		}
	}
	return c
}

// sends returns every producer's send records (after the load).
func (r *run) sends() [][]sendRec {
	prods := make([][]sendRec, len(r.hist.prods))
	for i, p := range r.hist.prods {
		p.mu.Lock()
		prods[i] = p.recs
		p.mu.Unlock()
	}
	return prods
}

// verdict fills the report from the history and the deliveries.
func (r *run) verdict(rep *Report, dels []delivery) {
	h := r.hist
	prods := r.sends()
	c := checkHistory(prods, dels)
	rep.Attempted, rep.Acked, rep.FailedSends, rep.Unknown = c.attempted, c.acked, c.failed, c.unknown
	rep.Delivered, rep.Lost, rep.Unexpected = c.delivered, c.lost, c.unexpected
	rep.Duplicates, rep.Recovered, rep.Reordered = c.duplicates, c.recovered, c.reordered
	r.lostKeys = c.lost_
	if len(c.unexpectedSamples) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("unexpected deliveries, e.g. %v", c.unexpectedSamples))
	}

	lat := hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
	var acks []int64
	for _, recs := range prods {
		for i := range recs {
			if recs[i].status == statusAcked {
				_ = lat.RecordValue(max(1, (recs[i].done-recs[i].sent)/1000))
				acks = append(acks, recs[i].done)
			}
		}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	rep.AckP50Ms, rep.AckP99Ms = ms(lat.ValueAtQuantile(50)), ms(lat.ValueAtQuantile(99))
	rep.AckP999Ms, rep.AckMaxMs = ms(lat.ValueAtQuantile(99.9)), ms(lat.Max())
	sort.Slice(acks, func(i, j int) bool { return acks[i] < acks[j] })
	var gap int64
	for i := 1; i < len(acks); i++ {
		gap = max(gap, acks[i]-acks[i-1])
	}
	rep.LongestAckGapMs = float64(gap/1000) / 1000
	if n := len(acks); n > 1 && acks[n-1] > acks[0] {
		rep.AckedPerS = float64(n) / (float64(acks[n-1]-acks[0]) / 1e9)
	}

	h.mu.Lock()
	rep.InDoubt = len(h.inDoubts)
	if len(h.errCount) > 0 {
		rep.Errors = make(map[string]int)
		best := ""
		for cls, n := range h.errCount {
			rep.Errors[cls] = n
			if best == "" || n > h.errCount[best] || (n == h.errCount[best] && cls < best) {
				best = cls
			}
		}
		rep.FirstError = h.errFirst[best]
		rep.ErrorSamples = make(map[string]string)
		for cls, m := range h.errFirst {
			rep.ErrorSamples[cls] = m
		}
	}
	if h.corrupt > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("readers reported %d corrupt shards (treated as missing)", h.corrupt))
	}
	h.mu.Unlock()
}

// PhaseStats are the ack latencies of the sends made in one phase of the
// load: before the first fault, while faults were in place, after the
// last heal. Comparing phases of one run is less noisy than comparing runs
// on a shared machine.
type PhaseStats struct {
	Name            string  `json:"name"`
	FromS           float64 `json:"from_s"`
	ToS             float64 `json:"to_s"`
	Acked           int     `json:"acked"`
	AckP50Ms        float64 `json:"ack_p50_ms"`
	AckP99Ms        float64 `json:"ack_p99_ms"`
	LongestAckGapMs float64 `json:"longest_ack_gap_ms"`
}

// phases splits the load at the first fault and the last heal.
func phases(prods [][]sendRec, events []Event, load time.Duration) []PhaseStats {
	first, last := -1.0, -1.0
	for _, e := range events {
		if e.Kind == "fault" && first < 0 {
			first = e.T
		}
		if e.Kind == "heal" || e.Kind == "fault" {
			last = e.T
		}
	}
	end := load.Seconds()
	if first < 0 || first >= end {
		return nil
	}
	last = min(max(last, first), end)
	bounds := []PhaseStats{{Name: "before", FromS: 0, ToS: first}, {Name: "faults", FromS: first, ToS: last},
		{Name: "after", FromS: last, ToS: end}}
	var out []PhaseStats
	for _, ph := range bounds {
		if ph.ToS-ph.FromS < 0.5 {
			continue
		}
		out = append(out, phaseStats(prods, ph))
	}
	return out
}

// phaseStats fills in the acks, latency and longest gap of the sends made
// in [ph.FromS, ph.ToS).
func phaseStats(prods [][]sendRec, ph PhaseStats) PhaseStats {
	lat := hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
	var acks []int64
	from, to := int64(ph.FromS*1e9), int64(ph.ToS*1e9)
	for _, recs := range prods {
		for i := range recs {
			if recs[i].status == statusAcked && recs[i].sent >= from && recs[i].sent < to {
				_ = lat.RecordValue(max(1, (recs[i].done-recs[i].sent)/1000))
				acks = append(acks, recs[i].done)
			}
		}
	}
	sort.Slice(acks, func(i, j int) bool { return acks[i] < acks[j] })
	var gap int64
	for i := 1; i < len(acks); i++ {
		gap = max(gap, acks[i]-acks[i-1])
	}
	ph.Acked = len(acks)
	ph.AckP50Ms, ph.AckP99Ms = float64(lat.ValueAtQuantile(50))/1000, float64(lat.ValueAtQuantile(99))/1000
	ph.LongestAckGapMs = float64(gap/1000) / 1000
	return ph
}
