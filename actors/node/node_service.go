package node

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/slotstore"
)

// Snapshot reads the counters.
func (s *Stats) Snapshot() bus.NodeCounters {
	return bus.NodeCounters{Writes: s.Writes.Load(), Conflicts: s.Conflicts.Load(), Sealed: s.Sealed.Load(),
		ClockAhead: s.ClockAhead.Load(), BadRequests: s.BadRequests.Load(), Busy: s.Busy.Load(),
		Scans: s.Scans.Load(), StoreErrors: s.StoreErrors.Load(),
		ShardsRepaired: s.ShardsRepaired.Load(), RepairFailures: s.RepairFailures.Load(), StripesBelowN: s.StripesBelowN.Load(),
		RepairPending: s.RepairPending.Load(), InDoubtQueued: s.InDoubtQueued.Load(),
		RepairPasses: s.RepairPasses.Load(), RepairPassNanos: s.RepairPassNanos.Load(), Holes: s.Holes.Load(),
		ReAppended: s.ReAppended.Load(), ScrubPasses: s.ScrubPasses.Load(), ScrubbedShards: s.ScrubbedShards.Load(),
		ScrubCorrupt: s.ScrubCorrupt.Load(), RetentionDropped: s.RetentionDropped.Load(),
		Malformed: s.Malformed.Load(), Mismatches: s.Mismatches.Load(), ForgedRepairs: s.ForgedRepairs.Load()}
}

// Status is the node's own view of its status (what its endpoint answers).
func (n *Node) Status() bus.NodeStatus {
	st := bus.NodeStatus{Node: n.cfg.ID, Cluster: n.cfg.Cluster, Version: bus.Version(), Incarnation: n.cfg.Store.Incarnation().String(),
		Started: n.started, DiskBytes: n.cfg.Store.DiskBytes(), Pending: n.pending.Load(), MaxPending: n.cfg.MaxPending,
		Owners: n.owners.Load(), Counters: n.stats.Snapshot(), SlowMode: n.cfg.ReplyDelay, NoSync: n.cfg.NoSync}
	if f := n.failure.Load(); f != nil {
		st.Failure = *f
	}
	if n.clock.off.Load() {
		st.ClockOff = fmt.Sprintf("clock %s cluster time (bound %v): writes refused", clockOffText(n.clock.offset.Load()), n.cfg.ClockBound)
	}
	n.fillHealth(&st)      // disk.go
	st.Clock = n.cfg.Now() // last: as close to the reply as possible
	return st
}

// nodeStatsData is the data of the micro STATS answer of the status endpoint.
type nodeStatsData struct {
	Counters bus.NodeCounters `json:"counters"`
	Pending  int64            `json:"pending"`
	Owners   int64            `json:"owners"`
}

// startMetrics registers the node's metrics (when configured).
func (n *Node) startMetrics() error {
	if n.cfg.Metrics == nil {
		return nil
	}
	m, err := metrics.NewNode(n.cfg.Metrics, n.cfg.ID, metrics.NodeGauges{
		Pending:   func() float64 { return float64(n.pending.Load()) },
		Owners:    func() float64 { return float64(n.owners.Load()) },
		DiskBytes: func() float64 { return float64(n.cfg.Store.DiskBytes()) },
		Funcs:     n.maintenanceMetrics(),
	})
	if err != nil {
		return err
	}
	n.metrics = m
	return nil
}

// maintenanceMetrics exports the repair, scrub and retention counters
// (Stats) to Prometheus, read on each scrape.
func (n *Node) maintenanceMetrics() []metrics.Func {
	s := &n.stats
	f := func(name, help string, counter bool, v *atomic.Int64) metrics.Func {
		return metrics.Func{Name: name, Help: help, Counter: counter, F: func() float64 { return float64(v.Load()) }}
	}
	fs := []metrics.Func{
		f("shards_repaired_total", "Shards this node rebuilt from k others and wrote (repair).", true, &s.ShardsRepaired),
		f("repair_failures_total", "Repair fixes that failed (retried next pass).", true, &s.RepairFailures),
		f("stripes_below_n", "Decodable stripes with fewer than n good shards seen by the last repair pass.", false, &s.StripesBelowN),
		f("repair_pending", "Offset ranges the last repair pass could not finish, plus corrupt shards queued by scrub.", false, &s.RepairPending),
		f("in_doubt_queued", "Readers' in-doubt reports waiting to be re-appended or found never committed.", false, &s.InDoubtQueued),
		f("repair_passes_total", "Repair passes completed.", true, &s.RepairPasses),
		f("repair_holes", "Offsets left unknown for good (a committed shard may have been lost).", false, &s.Holes),
		f("reappended_total", "In-doubt stripes this node re-appended at a fresh offset.", true, &s.ReAppended),
		f("scrub_passes_total", "Scrub passes completed.", true, &s.ScrubPasses),
		f("scrubbed_shards_total", "Shards re-read and CRC-checked by scrub.", true, &s.ScrubbedShards),
		f("scrub_corrupt_total", "Corrupt shards found by scrub.", true, &s.ScrubCorrupt),
		f("retention_dropped_total", "Slots dropped by retention.", true, &s.RetentionDropped),
		{Name: "clock_offset_seconds", Help: "Cluster time minus this node's clock, as the clock watch last judged it " +
			"(beyond the clock bound the node refuses writes with CLOCK_OFF).", F: func() float64 { return float64(n.clock.offset.Load()) / 1e9 }},
		{Name: "clock_off", Help: "1 while the node's clock is off cluster time and it refuses writes.", F: func() float64 {
			return bool01(n.clock.off.Load())
		}},
	}
	return append(fs, n.healthMetrics()...)
}

// healthMetrics export the disk, the store's background errors and the
// embedded JetStream (disk.go), read on each scrape.
func (n *Node) healthMetrics() []metrics.Func {
	diskF := func(f func(DiskUsage) float64) func() float64 {
		return func() float64 {
			u, _ := n.disk()
			return f(u)
		}
	}
	fs := []metrics.Func{
		{Name: "disk_free_bytes", Help: "Bytes free on the file system of the node's data (0: not measured).",
			F: diskF(func(u DiskUsage) float64 { return float64(u.Free) })},
		{Name: "disk_used_ratio", Help: "Share of the file system of the node's data in use (0..1).",
			F: diskF(func(u DiskUsage) float64 { return u.usedFraction() })},
		{Name: "disk_watermark_ratio", Help: "Share in use past which the node reports disk pressure (--disk-watermark).",
			F: func() float64 { return n.cfg.DiskWatermark }},
		{Name: "store_background_errors_total", Help: "Flushes and compactions the slot store's LevelDB failed (it retries; a full disk).",
			Counter: true, F: func() float64 {
				if be, ok := n.cfg.Store.(slotstore.BackgroundErrorer); ok {
					c, _ := be.BackgroundErrors()
					return float64(c)
				}
				return 0
			}},
	}
	if n.cfg.JetStream != nil {
		fs = append(fs, metrics.Func{Name: "jetstream_enabled", Help: "1 while the node's embedded JetStream runs; " +
			"0 once the NATS server turned it off (out of disk).", F: func() float64 { return bool01(n.cfg.JetStream() == "") }})
	}
	return fs
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// startService adds the node's micro service and its status endpoint.
func (n *Node) startService() error {
	svc, err := micro.AddService(n.cfg.Conn, micro.Config{
		Name:        bus.NodeServiceName,
		Version:     bus.SemVer(),
		Description: "raidq storage node",
		Metadata: map[string]string{"node": n.cfg.ID, "cluster": n.cfg.Cluster,
			"incarnation": n.cfg.Store.Incarnation().String()},
		StatsHandler: func(*micro.Endpoint) any {
			return nodeStatsData{Counters: n.stats.Snapshot(), Pending: n.pending.Load(), Owners: n.owners.Load()}
		},
	})
	if err != nil {
		return err
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(r micro.Request) {
		data, err := json.Marshal(n.Status())
		if err != nil {
			_ = r.Error("500", err.Error(), nil)
			return
		}
		_ = r.Respond(data)
	}), micro.WithEndpointSubject(n.subjects.Status(n.cfg.ID)),
		micro.WithEndpointMetadata(map[string]string{"description": "the node's status (JSON: actors.NodeStatus)"}))
	if err != nil {
		_ = svc.Stop()
		return err
	}
	n.svc = svc
	return nil
}

// stopService stops answering discovery and status.
func (n *Node) stopService() {
	if n.svc != nil {
		if err := n.svc.Stop(); err != nil {
			n.cfg.Logger.Debug("stop micro service", "err", err)
		}
	}
}

// commit hands b to the store, recording the commit latency.
func (n *Node) commit(b *slotstore.Batch, done func(error)) {
	if n.metrics == nil {
		n.cfg.Store.Commit(b, done)
		return
	}
	t0 := time.Now()
	n.cfg.Store.Commit(b, func(err error) {
		n.metrics.Commit(time.Since(t0))
		done(err)
	})
}

// observeWrite records one answered write (start is zero when metrics are off).
func (n *Node) observeWrite(start time.Time, s bus.Status) {
	if start.IsZero() || n.metrics == nil {
		return
	}
	n.metrics.Write(statusLabel(s), time.Since(start))
}

// statusLabels are the metric label values of the statuses ("clock_ahead").
var statusLabels = func() map[bus.Status]string {
	m := make(map[bus.Status]string)
	for s := core.StatusOK; s <= core.StatusClockOff; s++ {
		m[bus.Status(s)] = strings.ToLower(s.String())
	}
	return m
}()

func statusLabel(s bus.Status) string {
	if l, ok := statusLabels[s]; ok {
		return l
	}
	return "status_" + strconv.Itoa(int(s))
}
