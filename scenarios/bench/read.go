package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/bus"
)

// The read-side modes of `raidq bench` (Config.E2E, CatchUp, FanOut).
// Each runs against fresh raidq nodes and, with VsJetStream, a fresh
// JetStream cluster, one after the other, and adds its figures to
// Report.Read under flat names (documented in e2e.go, catchup.go and
// fanout.go; docs/bench.md, "Read side"). raidq is reached through the
// public API (raidq.Producer, raidq.Consumer) and the deliver subject the
// nodes' fan-out publishes to, nothing else, so the modes keep working
// while the read path changes underneath.

// DefaultFanOutRate is the fan-out producer's rate when Config.Rate is 0.
const DefaultFanOutRate = 1000

// MaxFanOut bounds a fan-out reader count (each is a connection or a
// consumer in this process).
const MaxFanOut = 64

// readModes reports whether any read-side mode is asked for.
func (c *Config) readModes() bool { return c.E2E || c.CatchUp || len(c.FanOut) > 0 }

// readSide measures one system's half of a read mode in dir and returns
// the setup line saying what it measured.
type readSide func(dir string) (setup string, err error)

// runSides runs a read mode's raidq half, then its JetStream half, as cfg
// asks, each in its own directory under dir, and keeps their setup lines.
func (r *Report) runSides(cfg *Config, dir string, raidqSide, jsSide readSide) error {
	for _, s := range []struct {
		on   bool
		name string
		run  readSide
	}{{cfg.raidqSide(), "raidq", raidqSide}, {cfg.jsSide(), "jetstream", jsSide}} {
		if !s.on {
			continue
		}
		setup, err := s.run(dir + "-" + s.name)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		r.ReadSetup = append(r.ReadSetup, setup)
	}
	return nil
}

// raidqSide and jsSide say which systems a read mode runs against.
func (c *Config) raidqSide() bool { return !c.JetStreamOnly }
func (c *Config) jsSide() bool    { return c.VsJetStream || c.JetStreamOnly }

// fanOutRate is the fan-out producer's rate in messages per second.
func (c *Config) fanOutRate() float64 {
	if c.Rate > 0 {
		return c.Rate
	}
	return DefaultFanOutRate
}

// fanOutTick is how often the fan-out producer sends a burst: a steady
// producer that lets both systems batch a little (at 1000 msgs/s, ten
// messages every 10 ms), so the write path does not drown the readers'
// cost in per-message overhead.
const fanOutTick = 10 * time.Millisecond

// fanOutBurst is how many messages the fan-out producer sends per tick.
func (c *Config) fanOutBurst() int {
	return max(1, int(math.Round(c.fanOutRate()*fanOutTick.Seconds())))
}

// readModeName describes the read modes asked for (WorkloadInfo.Mode).
func (c *Config) readModeName() string {
	var m []string
	if c.E2E {
		how := "sync sends"
		if c.Rate > 0 {
			how = fmt.Sprintf("%g msgs/s", c.Rate)
		}
		m = append(m, "e2e ("+how+")")
	}
	if c.CatchUp {
		m = append(m, "catch-up")
	}
	if len(c.FanOut) > 0 {
		m = append(m, fmt.Sprintf("fan-out %s at %g msgs/s in bursts of %d", joinInts(c.FanOut), c.fanOutRate(), c.fanOutBurst()))
	}
	return "read: " + strings.Join(m, ", ")
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// checkRead validates the read modes' settings (and refuses --rate
// without them).
func (c *Config) checkRead() error {
	if !c.readModes() {
		if c.Rate != 0 {
			return errors.New("--rate: only with --e2e or --fanout")
		}
		return nil
	}
	const modes = "the read modes (--e2e, --catchup, --fanout)"
	switch {
	case c.Kill > 0 || c.Slow > 0:
		return fmt.Errorf("--kill and --slow: not with %s", modes)
	case c.VsKafka:
		return fmt.Errorf("--kafka: not with %s", modes)
	case c.Async:
		return fmt.Errorf("--async: not with %s (catch-up fills asynchronously anyway, --publishers × --window outstanding; --rate paces e2e and fan-out)", modes)
	case c.Size < 16:
		return fmt.Errorf("--size %d: %s need at least 16 bytes (send time and index)", c.Size, modes)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("--rate %v: messages per second, >= 0 (0: --e2e sends one at a time, --fanout sends %d/s)", c.Rate, DefaultFanOutRate)
	case c.Rate > 0 && !c.E2E && len(c.FanOut) == 0:
		return errors.New("--rate: only with --e2e or --fanout (--catchup fills its backlog as fast as it can)")
	case c.E2ETimeout < 0:
		return fmt.Errorf("--e2e-timeout %v: must be > 0", c.E2ETimeout)
	}
	seen := make(map[int]bool)
	for _, n := range c.FanOut {
		if n < 0 || n > MaxFanOut {
			return fmt.Errorf("--fanout %d: reader counts must be 0..%d", n, MaxFanOut)
		}
		if seen[n] {
			return fmt.Errorf("--fanout: %d given twice", n)
		}
		seen[n] = true
	}
	return nil
}

// runRead runs the read modes asked for, each in its own directory under
// dir, filling r.Read, r.ReadSetup and r.FanOut.
func runRead(ctx context.Context, cfg *Config, dir string, r *Report) error {
	r.Read = make(map[string]float64)
	stop, err := profileClient(cfg)
	if err != nil {
		return err
	}
	defer stop()
	if cfg.E2E {
		if err := runE2E(ctx, cfg, filepath.Join(dir, "e2e"), r); err != nil {
			return fmt.Errorf("e2e: %w", err)
		}
	}
	if cfg.CatchUp {
		if err := runCatchUp(ctx, cfg, filepath.Join(dir, "catchup"), r); err != nil {
			return fmt.Errorf("catch-up: %w", err)
		}
	}
	if len(cfg.FanOut) > 0 {
		if err := runFanOut(ctx, cfg, filepath.Join(dir, "fanout"), r); err != nil {
			return fmt.Errorf("fan-out: %w", err)
		}
	}
	return nil
}

// profileClient starts this process's CPU profile for the read modes
// (client-read.pprof) when cfg.ProfileDir is set; stop ends it.
func profileClient(cfg *Config) (stop func(), err error) {
	if cfg.ProfileDir == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(cfg.ProfileDir, "client-read.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}, nil
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// deliverSubject is where the nodes of cluster publish every partition
// of the bench topic (the fan-out; bus.Subjects.DeliverAll).
func deliverSubject(cluster string) (string, error) {
	s, err := bus.NewSubjects(cluster)
	if err != nil {
		return "", err
	}
	return s.DeliverAll("bench"), nil
}

// subscribeSink subscribes nc to subject, every message observed by s
// (no pending limit: a slow moment shows as latency, not as drops).
func subscribeSink(nc *nats.Conn, subject string, s *deliverySink) error {
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { s.observe(m.Data, time.Now()) })
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	return nc.Flush()
}

// drainConsumer observes every message c delivers until c is closed.
func drainConsumer(c *raidq.Consumer, s *deliverySink) {
	for m := range c.Messages() {
		s.observe(m.Value, time.Now())
	}
}

// conns holds NATS connections to close together.
type conns []*nats.Conn

func (cs *conns) connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	*cs = append(*cs, nc)
	return nc, nil
}

func (cs conns) close() {
	for _, nc := range cs {
		nc.Close()
	}
}

// paramsText describes the timing of the cfg.Latency profile.
func paramsText(cfg *Config) string {
	p, _ := raidq.ProfileParams(cfg.Latency)
	name := cfg.Latency
	if name == "" {
		name = "default"
	}
	return fmt.Sprintf("topic latency profile %s (accept window %v, read delay %v)", name, p.AcceptWindow, p.ReadDelay)
}

// putRatio sets fig[name] = fig[a] / fig[b] when both are there and b > 0.
func putRatio(fig map[string]float64, name, a, b string) {
	x, okA := fig[a]
	y, okB := fig[b]
	if okA && okB && y > 0 {
		fig[name] = round3(x / y)
	}
}

// printRead writes the read modes' tables and what each measured.
func (r *Report) printRead(w io.Writer) {
	wl := r.Workload
	fs := "fsync on both sides"
	if !wl.Fsync {
		fs = "no fsync"
	}
	fmt.Fprintf(w, "%s; %d messages of %d B per phase; raidq latency profile %s; %s; %d CPUs\n", wl.Mode, wl.Messages, wl.Size,
		wl.Latency, fs, wl.CPUs)
	r.printE2E(w)
	r.printCatchUp(w)
	r.printFanOut(w)
	for _, s := range r.ReadSetup {
		fmt.Fprintln(w, s)
	}
}
