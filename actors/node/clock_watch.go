package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/internal/actorsys"
	"github.com/raidq/raidq/bus"
)

// The node's check of its own clock against its peers' (core.ClockWatch).
// Every ClockCheckEvery a loop actor asks the other nodes of its ensembles
// for their status (over the links of the node's client), takes each
// clock corrected by half the round trip, and feeds the offsets to the
// core. While the clock is off, writes are answered CLOCK_OFF (node.go
// route) and repair passes do nothing; scans are served as usual (the
// data is good; the nodes' seal rules still hold on their own clocks).

// Defaults of Config.ClockBound and ClockCheckEvery.
const (
	DefaultClockBound      = time.Second
	DefaultClockCheckEvery = 5 * time.Second
)

// clockState is what the loop publishes to the request path.
type clockState struct {
	off    atomic.Bool
	offset atomic.Int64 // cluster time minus this node's clock (ns), last judged

	mu    sync.Mutex // the watch (loop goroutine; Status reads it)
	watch core.ClockWatch
}

// spawnClockWatch starts the clock loop as a child of the node actor.
func (n *Node) spawnClockWatch(ctx actor.Context) {
	if n.cfg.ClockBound < 0 {
		return
	}
	n.clock.watch = core.ClockWatch{Bound: int64(n.cfg.ClockBound), MinPeers: 2}
	every := n.cfg.ClockCheckEvery
	ctx.Spawn(actorsys.Props(n.pool, func() actor.Actor {
		return &loopActor{name: "clock", first: min(every, time.Second), every: every, run: n.clockPass, log: n.cfg.Logger}
	}))
}

// clockPass asks the peers for their clocks once and judges.
func (n *Node) clockPass(ctx context.Context) {
	offsets := n.peerOffsets(ctx)
	c := &n.clock
	c.mu.Lock()
	changed := c.watch.Observe(offsets)
	off, median := c.watch.Off()
	c.mu.Unlock()
	c.offset.Store(median)
	c.off.Store(off)
	if !changed {
		return
	}
	d := time.Duration(median).Round(time.Millisecond)
	if off {
		n.cfg.Logger.Error("node clock is off cluster time: refusing writes (CLOCK_OFF) and pausing repair until it is corrected (check NTP)",
			"cluster_minus_node", d, "bound", n.cfg.ClockBound, "peers", len(offsets))
		return
	}
	n.cfg.Logger.Warn("node clock back within bound of cluster time: taking writes again", "cluster_minus_node", d, "peers", len(offsets))
}

// peerOffsets asks every other node of this node's ensembles for its
// status, through the links of the node's client (peerClient), and
// returns, for each that answered in time, its clock minus this node's
// clock at the middle of the round trip.
func (n *Node) peerOffsets(ctx context.Context) []int64 {
	ids := map[string]bool{}
	for _, t := range n.maint.topics() {
		for _, e := range t.Ensembles {
			if !slices.Contains(e, n.cfg.ID) {
				continue
			}
			for _, id := range e {
				if id != n.cfg.ID {
					ids[id] = true
				}
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	c, err := n.peers.get(n)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var mu sync.Mutex
	var out []int64
	var wg sync.WaitGroup
	for id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := n.cfg.Now()
			data, err := c.Request(ctx, id, n.subjects.Status(id), nil, time.Second)
			recv := n.cfg.Now()
			var st bus.NodeStatus
			if err != nil || json.Unmarshal(data, &st) != nil || st.Clock <= 0 {
				return
			}
			mu.Lock()
			out = append(out, st.Clock-(sent+recv)/2)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// clockOffText says how far the node's clock is from cluster time, given
// offset = cluster time minus the node's clock.
func clockOffText(offset int64) string {
	d := time.Duration(offset).Round(time.Millisecond)
	if d >= 0 {
		return fmt.Sprintf("%v behind", d)
	}
	return fmt.Sprintf("%v ahead of", -d)
}
