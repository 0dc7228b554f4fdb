package drill

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/bus"
)

// The drill's view of repair (issue: "keep full redundancy after
// faults"): a watcher polls every node's status through the whole drill,
// so the report can say when repair restored full redundancy, how long it
// took after the last heal, and what the write path's latency was while
// repair ran.

// RepairReport is what the nodes' repair loops said during the drill.
type RepairReport struct {
	// Done: every node finished two repair passes after the last write was
	// past the repair horizon with no stripe below n and nothing pending.
	Done bool `json:"done"`
	// DoneS is when that was first seen (seconds since the load started);
	// AfterHealS is DoneS minus the time of the last fault or heal event
	// (the wiped node's restart, the corrupted node's restart, ...).
	DoneS      float64 `json:"done_s,omitempty"`
	AfterHealS float64 `json:"after_heal_s,omitempty"`
	// StripesBelowN and Pending are the largest values any node reported
	// in the last poll (0 and 0 with Done).
	StripesBelowN int64 `json:"stripes_below_n"`
	Pending       int64 `json:"repair_pending"`
	// ShardsRepaired, Holes and Failures add up every node's counters
	// (restarted nodes count from their restart).
	ShardsRepaired int64 `json:"shards_repaired"`
	Failures       int64 `json:"repair_failures"`
	Holes          int64 `json:"holes"`
	// ActiveFromS/ActiveToS: the first and last poll that saw the shards
	// repaired go up (the time repair was writing).
	ActiveFromS float64 `json:"active_from_s,omitempty"`
	ActiveToS   float64 `json:"active_to_s,omitempty"`
	Detail      string  `json:"detail,omitempty"`
}

// repairPollEvery is the watcher's poll period.
const repairPollEvery = 500 * time.Millisecond

// repairSample is one poll: each node's repair counters (nil: no answer).
type repairSample struct {
	t     float64
	nodes map[string]*bus.NodeCounters
}

// repairWatch polls node status from the load start until stopped.
type repairWatch struct {
	r       *run
	c       *raidq.Client
	mu      sync.Mutex
	samples []repairSample
	stop    chan struct{}
	done    chan struct{}
}

// startRepairWatch connects a client and starts polling.
func (r *run) startRepairWatch() (*repairWatch, error) {
	c, err := raidq.Connect(r.be.ClientURL(nil), r.clientOpts("raidq-drill-status")...)
	if err != nil {
		return nil, fmt.Errorf("repair watcher: %w", err)
	}
	w := &repairWatch{r: r, c: c, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w, nil
}

func (w *repairWatch) run() {
	defer close(w.done)
	t := time.NewTicker(repairPollEvery)
	defer t.Stop()
	for {
		w.poll()
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
	}
}

func (w *repairWatch) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, _ := actors.StatusWith(ctx, w.c.Conn(), w.r.be.Cluster(), actors.StatusOptions{Timeout: time.Second, Expect: w.r.be.IDs()})
	s := repairSample{t: w.r.since(), nodes: make(map[string]*bus.NodeCounters)}
	for i := range st {
		if st[i].Health != bus.HealthNoAnswer {
			c := st[i].Counters
			s.nodes[st[i].Node] = &c
		}
	}
	w.mu.Lock()
	w.samples = append(w.samples, s)
	w.mu.Unlock()
}

// close stops the watcher and its client.
func (w *repairWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.c.Close()
}

// wait returns once every node shows full redundancy after horizon (the
// time the last write is past every node's repair horizon), or by
// deadline, and sums up what the polls saw.
func (w *repairWatch) wait(ctx context.Context, horizon, deadline time.Time, lastEvent float64) RepairReport {
	var base map[string]int64 // passes at the first poll after horizon
	for {
		w.mu.Lock()
		last := w.samples[len(w.samples)-1]
		w.mu.Unlock()
		if base == nil && time.Now().After(horizon) {
			base = make(map[string]int64)
			for id, c := range last.nodes {
				base[id] = c.RepairPasses
			}
		}
		if base != nil {
			if ok, _ := fullRedundancy(w.r.be.IDs(), last, base); ok {
				rep := w.summary(last)
				rep.Done, rep.DoneS, rep.AfterHealS = true, last.t, max(last.t-lastEvent, 0)
				return rep
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			rep := w.summary(last)
			_, rep.Detail = fullRedundancy(w.r.be.IDs(), last, base)
			return rep
		}
		select {
		case <-ctx.Done():
		case <-time.After(repairPollEvery):
		}
	}
}

// fullRedundancy says whether every node answered, finished two passes
// since base, and reports nothing below n and nothing pending; if not, why.
func fullRedundancy(ids []string, s repairSample, base map[string]int64) (bool, string) {
	if base == nil {
		return false, "the last writes were not yet past the repair horizon"
	}
	for _, id := range ids {
		c := s.nodes[id]
		switch {
		case c == nil:
			return false, id + " did not answer status"
		case c.RepairPasses < base[id]+2:
			return false, fmt.Sprintf("%s finished %d repair passes since the horizon, want 2", id, c.RepairPasses-base[id])
		case c.StripesBelowN > 0 || c.RepairPending > 0:
			return false, fmt.Sprintf("%s: %d stripes below n, %d ranges pending", id, c.StripesBelowN, c.RepairPending)
		}
	}
	return true, ""
}

// summary adds up the last sample and finds when repair was writing.
func (w *repairWatch) summary(last repairSample) RepairReport {
	var rep RepairReport
	for _, c := range last.nodes {
		rep.StripesBelowN = max(rep.StripesBelowN, c.StripesBelowN)
		rep.Pending = max(rep.Pending, c.RepairPending)
		rep.ShardsRepaired += c.ShardsRepaired
		rep.Failures += c.RepairFailures
		rep.Holes += c.Holes
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := make(map[string]int64)
	for _, s := range w.samples {
		for id, c := range s.nodes {
			if p, ok := prev[id]; ok && c.ShardsRepaired > p {
				if rep.ActiveFromS == 0 {
					rep.ActiveFromS = s.t - repairPollEvery.Seconds()
				}
				rep.ActiveToS = s.t
			}
			prev[id] = c.ShardsRepaired
		}
	}
	return rep
}

// lastFaultOrHeal is the time of the last fault or heal event (seconds
// since the load started; 0 if none).
func (r *run) lastFaultOrHeal() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := 0.0
	for _, e := range r.events {
		if e.Kind == "fault" || e.Kind == "heal" {
			last = max(last, e.T)
		}
	}
	return last
}

// repairVerdict adds the repair phase to the latency phases and the full
// redundancy check (every acked stripe back at n shards on disk, and the
// nodes' repair loops agree).
func (r *run) repairVerdict(rep *Report) {
	rr := rep.Repair
	if rr == nil {
		return
	}
	lastHeal := rr.DoneS - rr.AfterHealS
	load := r.cfg.Duration.Seconds()
	if from, to := rr.ActiveFromS, min(rr.ActiveToS, load); to-from >= 0.5 && len(rep.Phases) > 0 && rep.Phases[0].Name == "before" {
		ph := phaseStats(r.sends(), PhaseStats{Name: "repairing", FromS: from, ToS: to})
		rep.Phases = append(rep.Phases, ph)
		if b := rep.Phases[0].AckP99Ms; b > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("ack p99 while repair wrote (%.1f-%.1fs): %.1f ms, %.2fx the p99 before the first fault (%.1f ms)",
				from, to, ph.AckP99Ms, ph.AckP99Ms/b, b))
		}
	}
	short := 0
	for k, v := range rep.ShardsAtEnd {
		if k != fmt.Sprint(raidq.DefaultParams().N) {
			short += v
		}
	}
	detail := fmt.Sprintf("repair: %d shards rebuilt, confirmed %.1fs after the last heal; %d acked stripes below n on disk",
		rr.ShardsRepaired, rr.AfterHealS, short)
	if rr.ActiveToS > 0 {
		detail = fmt.Sprintf("repair: %d shards rebuilt between %.1fs and %.1fs (%.1fs after the last heal), full redundancy confirmed at %.1fs; "+
			"%d acked stripes below n on disk", rr.ShardsRepaired, rr.ActiveFromS, rr.ActiveToS, max(rr.ActiveToS-lastHeal, 0), rr.DoneS, short)
	}
	if !rr.Done {
		detail = fmt.Sprintf("repair not done after %s: %s; %d acked stripes below n on disk", r.cfg.RepairWait, rr.Detail, short)
	}
	c := Check{Name: "full redundancy restored", OK: rr.Done && short == 0, Detail: detail}
	rep.Checks = append(rep.Checks, c)
	rep.OK = rep.OK && c.OK
}
