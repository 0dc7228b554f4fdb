// Package security is the security drill (`raidq drill security`, also
// `raidq security drill`): it starts a cluster of raidq nodes in this
// process, each with its own NATS server on real TCP ports, with an auth
// file (users and roles), TLS on the client ports and mutual TLS on the
// routes. Then clients try what their permissions do not allow: a producer
// of topic A writes topic B, reads topic B, writes raw slots with a
// payload that names another topic, forges a repair write, creates a
// topic, forges a node heartbeat, sniffs other users' replies, steps a
// node's clock (node n0 runs with a clock fault, which the admin may
// use); a consumer
// writes through the scan subject; anonymous, wrong-password and plaintext
// clients connect; a server without a certificate joins the routes; an
// attacker floods a node with garbage and oversized requests. Each attempt
// must be refused (a NATS permission violation, an authentication or TLS
// failure, or the node's BAD_REQUEST) and counted, while a legitimate
// producer keeps writing topic A throughout, and a legitimate producer and
// consumer round trip works at the end.
//
// Run(ctx, Config{}) returns a Report: one Check per attempt, the
// refusals counted by the servers and the nodes, and the verdict.
package security

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/cluster"
)

// Config are the drill's knobs (the flags of `raidq drill security`).
type Config struct {
	// Nodes in the cluster (default 3: topics use n=3, k=2, W=2; with 6
	// or more, the default 4+2 shards).
	Nodes int
	// Cluster name (default "secdrill").
	Cluster string
	// Dir holds the nodes' data and the TLS files; empty: a temporary
	// directory, removed afterwards.
	Dir string
	// Flood is how many garbage requests the flood sends (default 2000).
	Flood int
	// Logger receives the nodes' logs (nil: errors only, on stderr).
	Logger *slog.Logger
	// Progress, if set, is told each check as it is decided.
	Progress func(Check)
}

// Check is one attempt and what came of it.
type Check struct {
	Name  string `json:"name"`
	Who   string `json:"who"`   // the user (or "anonymous", "rogue server")
	Tried string `json:"tried"` // what it tried
	Want  string `json:"want"`  // "refused" or "works"
	Got   string `json:"got"`   // what happened
	Pass  bool   `json:"pass"`
}

// Report is the drill's outcome.
type Report struct {
	Cluster string  `json:"cluster"`
	Nodes   int     `json:"nodes"`
	TLS     string  `json:"tls"`
	Checks  []Check `json:"checks"`
	Passed  int     `json:"passed"`
	Failed  int     `json:"failed"`
	// Refused by the NATS servers (summed over the nodes) and by the
	// nodes themselves (their status counters).
	Servers      natsserver.Refusals `json:"servers"`
	NodeRefusals struct {
		BadRequests   int64 `json:"bad_requests"`
		Malformed     int64 `json:"malformed"`
		Mismatches    int64 `json:"mismatches"`
		ForgedRepairs int64 `json:"forged_repairs"`
	} `json:"node_refusals"`
	// The legitimate producer that wrote topic A during the attacks.
	BackgroundSent   int64 `json:"background_sent"`
	BackgroundAcked  int64 `json:"background_acked"`
	BackgroundFailed int64 `json:"background_failed"`
	// Permission violations of the nodes' own connections (must be 0).
	InternalViolations int64   `json:"internal_violations"`
	Seconds            float64 `json:"seconds"`
	OK                 bool    `json:"ok"`
}

// Topic names of the drill.
const (
	TopicA = "alpha"
	TopicB = "bravo"
)

type run struct {
	cfg     Config
	log     *slog.Logger
	dir     string
	tls     natsserver.TLSBundle
	auth    *natsserver.AuthConfig
	pw      map[string]string // user -> password
	nodes   []*server.Node
	urls    []string
	routes  []string
	subj    bus.Subjects
	params  raidq.Params
	report  *Report
	started time.Time
	conns   []*actor
}

// Run runs the drill.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Nodes < 3 || cfg.Nodes > 16 {
		return nil, fmt.Errorf("security drill: %d nodes, want 3..16", cfg.Nodes)
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "secdrill"
	}
	if cfg.Flood <= 0 {
		cfg.Flood = 2000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	}
	subj, err := bus.NewSubjects(cfg.Cluster)
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, log: cfg.Logger, subj: subj, pw: map[string]string{}, started: time.Now(),
		report: &Report{Cluster: cfg.Cluster, Nodes: cfg.Nodes, TLS: "clients: TLS required; routes: mutual TLS"}}
	r.params = raidq.DefaultParams()
	if cfg.Nodes < 6 {
		r.params.N, r.params.K, r.params.W = 3, 2, 2
	}
	r.dir = cfg.Dir
	if r.dir == "" {
		d, err := os.MkdirTemp("", "raidq-security-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		r.dir = d
	}
	defer r.close()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	if err := r.attacks(ctx); err != nil {
		return nil, err
	}
	r.finish(ctx)
	return r.report, nil
}

func secret() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// setup writes the TLS files and the auth file, and starts the nodes.
func (r *run) setup(ctx context.Context) error {
	var err error
	r.tls, _, err = natsserver.EnsureDevTLS(filepath.Join(r.dir, "tls"), nil)
	if err != nil {
		return err
	}
	if err := r.writeAuth(); err != nil {
		return err
	}
	if err := r.startNodes(ctx); err != nil {
		return err
	}
	return r.createTopics(ctx)
}

// writeAuth picks the users' passwords, writes the auth file and loads
// it into r.auth.
func (r *run) writeAuth() error {
	for _, u := range []string{"ops", "writer-a", "reader-a", "writer-b", "route"} {
		r.pw[u] = secret()
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.pw["ops"]), bcrypt.MinCost)
	if err != nil {
		return err
	}
	// The admin's password is stored as a bcrypt hash, as an operator would.
	text := fmt.Sprintf(`# security drill users
users: [
  {user: ops, password: "%s", roles: [admin]}
  {user: writer-a, password: "%s", producer: [%s]}
  {user: reader-a, password: "%s", consumer: [%s], groups: [drill]}
  {user: writer-b, password: "%s", producer: [%s], consumer: [%s]}
]
routes: {user: route, password: "%s"}
`, hash, r.pw["writer-a"], TopicA, r.pw["reader-a"], TopicA, r.pw["writer-b"], TopicB, TopicB, r.pw["route"])
	file := filepath.Join(r.dir, "auth.conf")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		return err
	}
	r.auth, err = natsserver.LoadAuthFile(file)
	return err
}

// startNodes starts the nodes (TLS, the auth file) in parallel and
// records their client URLs and routes.
func (r *run) startNodes(ctx context.Context) error {
	ports, err := cluster.FreePorts(2 * r.cfg.Nodes)
	if err != nil {
		return err
	}
	for i := range r.cfg.Nodes {
		r.urls = append(r.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		r.routes = append(r.routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[r.cfg.Nodes+i]))
	}
	r.nodes = make([]*server.Node, r.cfg.Nodes)
	errs := make([]error, r.cfg.Nodes)
	var wg sync.WaitGroup
	for i := range r.cfg.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.nodes[i], errs[i] = server.StartNodeContext(ctx, server.NodeOptions{ID: fmt.Sprintf("n%d", i),
				DataDir: filepath.Join(r.dir, fmt.Sprintf("n%d", i)), Cluster: r.cfg.Cluster,
				Listen:        fmt.Sprintf("127.0.0.1:%d", ports[i]),
				ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[r.cfg.Nodes+i]), Routes: r.routes,
				Auth: r.auth, TLS: r.tls.Files(), NoSync: true, Logger: r.log, MetaTimeout: 90 * time.Second,
				ClockFault: i == 0}) // clockNode (clock.go)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("security drill: start the nodes: %w", err)
	}
	return nil
}

// createTopics creates the two topics as the admin, retrying (up to
// 60s) until every node is a member.
func (r *run) createTopics(ctx context.Context) error {
	admin, err := r.connect("ops", raidq.ClientAuth{User: "ops", Password: r.pw["ops"]})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, t := range []string{TopicA, TopicB} {
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = admin.c.CreateTopic(cctx, raidq.TopicConfig{Name: t, Partitions: 2, Params: r.params})
			cancel()
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("security drill: the admin creates topic %s: %w", t, err)
		}
	}
	return nil
}

func (r *run) url() string { return strings.Join(r.urls, ",") }

// actor is one client connection and the errors the server sent it.
type actor struct {
	name string
	c    *raidq.Client
	// meta is the metadata over c's connection, with c's permissions:
	// the attacks try writes a client API never offers.
	meta *meta.Store
	mu   sync.Mutex
	errs []string
}

func (a *actor) record(err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err.Error())
	a.mu.Unlock()
}

// violation waits up to d for a server error containing every part.
func (a *actor) violation(d time.Duration, parts ...string) (string, bool) {
	deadline := time.Now().Add(d)
	for {
		a.mu.Lock()
		for _, e := range a.errs {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(e, p)
			}
			if all {
				a.mu.Unlock()
				return e, true
			}
		}
		a.mu.Unlock()
		if time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// connect connects a client as user (TLS with the drill's CA).
func (r *run) connect(name string, a raidq.ClientAuth) (*actor, error) {
	act := &actor{name: name}
	a.TLSCA = r.tls.CA
	c, err := raidq.Connect(r.url(), raidq.WithCluster(r.cfg.Cluster), raidq.WithAuth(a), raidq.WithName("drill-"+name),
		raidq.WithTimeout(5*time.Second), raidq.WithLogger(r.log),
		raidq.WithNATSOptions(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { act.record(err) })))
	if err != nil {
		return nil, fmt.Errorf("security drill: connect as %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := meta.Open(ctx, c.Conn(), r.cfg.Cluster, meta.Options{Timeout: 5 * time.Second, Logger: r.log})
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("security drill: metadata as %s: %w", name, err)
	}
	act.c, act.meta = c, m
	r.conns = append(r.conns, act)
	return act, nil
}

func (r *run) check(c Check) {
	if c.Want == "" {
		c.Want = "refused"
	}
	r.report.Checks = append(r.report.Checks, c)
	if c.Pass {
		r.report.Passed++
	} else {
		r.report.Failed++
	}
	if r.cfg.Progress != nil {
		r.cfg.Progress(c)
	}
}

// close stops the clients and the nodes.
func (r *run) close() {
	for _, a := range r.conns {
		a.c.Close()
	}
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = n.Stop(ctx)
		}()
	}
	wg.Wait()
}

// background runs a legitimate producer of topic A until stop is closed.
func (r *run) background(ctx context.Context, w *actor, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	p, err := w.c.Producer(TopicA)
	if err != nil {
		r.report.BackgroundFailed++
		return
	}
	defer p.Close()
	var sent, acked, failed atomic.Int64
	defer func() {
		r.report.BackgroundSent, r.report.BackgroundAcked, r.report.BackgroundFailed = sent.Load(), acked.Load(), failed.Load()
	}()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent.Add(1)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := p.Send(sctx, raidq.Message{Value: fmt.Appendf(nil, "background %d", i)})
		cancel()
		if err != nil {
			failed.Add(1)
			r.log.Warn("background producer: send failed", "err", err)
		} else {
			acked.Add(1)
		}
	}
}

// finish: the legitimate round trip, the counters, the verdict.
func (r *run) finish(ctx context.Context) {
	rep := r.report
	for _, n := range r.nodes {
		rep.InternalViolations += n.InternalViolations()
		s := n.Refusals()
		rep.Servers.Publish += s.Publish
		rep.Servers.Subscribe += s.Subscribe
		rep.Servers.Auth += s.Auth
		rep.Servers.TLS += s.TLS
		c := n.Stats().Snapshot()
		rep.NodeRefusals.BadRequests += c.BadRequests
		rep.NodeRefusals.Malformed += c.Malformed
		rep.NodeRefusals.Mismatches += c.Mismatches
		rep.NodeRefusals.ForgedRepairs += c.ForgedRepairs
	}
	r.check(Check{Name: "nodes' own permissions", Who: "nodes", Tried: "run the cluster (writes, scans, fan-out, repair, metadata, status)",
		Want: "no violation", Got: fmt.Sprintf("%d permission violations on the nodes' connections", rep.InternalViolations),
		Pass: rep.InternalViolations == 0})
	r.check(Check{Name: "refusals counted", Who: "nodes", Tried: "count what was refused",
		Want: "counted", Got: fmt.Sprintf("servers: %d publish, %d subscribe, %d auth, %d TLS; nodes: %d bad requests (%d malformed, %d mismatches, %d forged repairs)",
			rep.Servers.Publish, rep.Servers.Subscribe, rep.Servers.Auth, rep.Servers.TLS, rep.NodeRefusals.BadRequests,
			rep.NodeRefusals.Malformed, rep.NodeRefusals.Mismatches, rep.NodeRefusals.ForgedRepairs),
		Pass: rep.Servers.Publish > 0 && rep.Servers.Subscribe > 0 && rep.Servers.Auth > 0 && rep.NodeRefusals.Mismatches > 0 &&
			rep.NodeRefusals.ForgedRepairs > 0 && rep.NodeRefusals.Malformed > 0})
	rep.Seconds = time.Since(r.started).Seconds()
	rep.OK = rep.Failed == 0
}
