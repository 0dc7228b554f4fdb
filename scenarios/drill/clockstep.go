package drill

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus"
)

// The clock-step drill: one node, started with --clock-fault, has its
// clock stepped 5 s forward at 30% of the load, 5 s back behind real time
// at 50% and back to real time at 70% (raidq.<c>.fault.clock.<node>). While
// it is off by more than its --max-clock-offset (1 s) `raidq status` must
// show it "clock off"; nothing acked may be lost, the live readers must
// miss nothing.

// clockSteps are the offsets, in order, and when they are set.
var clockSteps = []struct {
	at     float64
	offset time.Duration
	shows  string // what the node's status says while the step is in force ("": no clock note)
}{{0.3, 5 * time.Second, "ahead of"}, {0.5, -5 * time.Second, "behind"}, {0.7, 0, ""}}

// clockStepResult is what the clock-step drill saw.
type clockStepResult struct {
	node int

	mu      sync.Mutex
	nc      *nats.Conn // the fault requests and status queries
	client  *raidq.Client
	step    int             // index into clockSteps of the step in force; -1 before the first
	setAt   []time.Duration // when each step was set (since the load start); -1: not set
	shownAt []time.Duration // how long after its step the status first showed it; -1: never
	shown   []string        // the status note (or health) seen then
	polls   int             // status answers from the node
	errs    []string
	done    chan struct{} // the monitor ended
}

func setupClockStep(p *plan) {
	i := p.pick(1)[0]
	p.clockFault[i] = true
	r := p.r
	res := &clockStepResult{node: i, step: -1, done: make(chan struct{})}
	for range clockSteps {
		res.setAt, res.shownAt, res.shown = append(res.setAt, -1), append(res.shownAt, -1), append(res.shown, "")
	}
	r.clockStep = res
	p.notes = append(p.notes, "one node runs with --clock-fault: its clock is stepped on raidq.<c>.fault.clock.<node>")
	for k, s := range clockSteps {
		p.add(p.frac(s.at), "clock step", func(ctx context.Context) error {
			if k == 0 {
				if err := r.startClockMonitor(ctx, res); err != nil {
					return err
				}
			}
			return r.stepClock(ctx, res, k)
		})
	}
}

// stepClock sets the clock step k on the node.
func (r *run) stepClock(ctx context.Context, res *clockStepResult, k int) error {
	id := r.be.IDs()[res.node]
	off := clockSteps[k].offset
	if res.nc == nil {
		return fmt.Errorf("step %s's clock to %+v: no clock client", id, off)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := server.SetClockFault(cctx, res.nc, r.be.Cluster(), id, off)
	if err != nil {
		return fmt.Errorf("step %s's clock to %+v: %w", id, off, err)
	}
	res.mu.Lock()
	res.step, res.setAt[k] = k, time.Since(r.start)
	res.mu.Unlock()
	kind := "fault"
	if off == 0 {
		kind = "heal"
	}
	r.event(kind, "step %s's clock to %+v of real time (its clock reads %s)", id, off,
		time.Unix(0, rep.Clock).UTC().Format("15:04:05.000"))
	return nil
}

// startClockMonitor connects the drill's clock client (to the nodes
// without faults) and starts watching the node's status until it is
// back within bound after the last step.
func (r *run) startClockMonitor(ctx context.Context, res *clockStepResult) error {
	c, err := raidq.Connect(r.be.ClientURL(r.plan.stable()), r.clientOpts("raidq-drill-clock")...)
	if err != nil {
		close(res.done)
		return fmt.Errorf("clock client: %w", err)
	}
	res.client, res.nc = c, c.Conn()
	go r.clockMonitor(ctx, res)
	return nil
}

// clockMonitor asks the node's status (as `raidq status` does) every
// 200 ms and records, for each step, how long after it the status first
// showed it: "clock off" ahead or behind, then no clock note. It ends
// once the last step shows, or 10 s after the load's end, setting the
// offset back to 0 if the last step did not run.
func (r *run) clockMonitor(ctx context.Context, res *clockStepResult) {
	defer close(res.done)
	defer res.client.Close()
	id := r.be.IDs()[res.node]
	deadline := r.start.Add(r.cfg.Duration + 10*time.Second)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
watch:
	for !r.clockObserve(ctx, res, id) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			break watch
		case <-t.C:
		}
	}
	res.mu.Lock()
	reset := res.setAt[len(clockSteps)-1] < 0
	res.mu.Unlock()
	if reset { // the load ended early: do not leave the clock off
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := server.SetClockFault(cctx, res.nc, r.be.Cluster(), id, 0)
		cancel()
		r.event("heal", "step %s's clock back to real time (the load ended before the last step): %v", id, err)
	}
}

// clockObserve asks the node's status once and records what it shows; it
// reports whether the last step has shown.
func (r *run) clockObserve(ctx context.Context, res *clockStepResult, id string) bool {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	sts, err := actors.StatusWith(sctx, res.nc, r.be.Cluster(), actors.StatusOptions{Expect: []string{id}, Timeout: 2 * time.Second})
	cancel()
	var st *bus.NodeStatus
	for i := range sts {
		if sts[i].Node == id && sts[i].Health != bus.HealthNoAnswer {
			st = &sts[i]
		}
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	if st == nil {
		if err != nil && len(res.errs) < 5 {
			res.errs = append(res.errs, err.Error())
		}
		return false
	}
	res.polls++
	k := res.step
	if k < 0 || res.shownAt[k] >= 0 {
		return k == len(clockSteps)-1 && res.shownAt[k] >= 0
	}
	want := clockSteps[k].shows
	shown := want == "" && st.ClockOff == "" && st.Health != bus.HealthClockOff ||
		want != "" && st.Health == bus.HealthClockOff && strings.Contains(st.ClockOff, want)
	if shown {
		res.shownAt[k] = time.Since(r.start) - res.setAt[k]
		res.shown[k] = st.Health
		if st.ClockOff != "" {
			res.shown[k] += ": " + st.ClockOff
		}
		r.event("info", "raidq status: %s %s (%.1fs after the step)", id, res.shown[k], res.shownAt[k].Seconds())
	}
	return k == len(clockSteps)-1 && shown
}

// checkClockStep: each step showed in the node's status.
func checkClockStep(r *run, rep *Report) {
	res := r.clockStep
	select {
	case <-res.done:
	case <-time.After(15 * time.Second):
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	id := r.be.IDs()[res.node]
	for k, s := range clockSteps {
		name := fmt.Sprintf("raidq status shows %s \"clock off\" (%s) while its clock is %+v off", id, s.shows, s.offset)
		if s.offset == 0 {
			name = fmt.Sprintf("raidq status shows %s's clock back within bound once it is back to real time", id)
		}
		var detail string
		switch {
		case res.setAt[k] < 0:
			detail = "the step was not set"
		case res.shownAt[k] < 0:
			detail = fmt.Sprintf("never shown (%d status answers; errors: %s)", res.polls, strings.Join(res.errs, "; "))
		default:
			detail = fmt.Sprintf("%.1fs after the step at %.1fs: %s", res.shownAt[k].Seconds(), res.setAt[k].Seconds(), res.shown[k])
		}
		rep.Checks = append(rep.Checks, Check{Name: name, OK: res.shownAt[k] >= 0, Detail: detail})
	}
}
