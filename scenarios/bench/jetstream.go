package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/scenarios/cluster"
)

const (
	jsStream  = "BENCH"
	jsSubject = "bench.js"
	jsServers = 3
)

// jsTarget publishes with one NATS connection per publisher (as `nats
// bench js pub --clients C` does).
type jsTarget struct{ js []jetstream.JetStream }

func (t jsTarget) send(ctx context.Context, pub int, msg []byte) error {
	_, err := t.js[pub%len(t.js)].Publish(ctx, jsSubject, msg)
	return err
}

func (t jsTarget) sendAsync(pub int, msg []byte, done func(error)) {
	f, err := t.js[pub%len(t.js)].PublishAsync(jsSubject, msg)
	if err != nil {
		done(err)
		return
	}
	go func() {
		select {
		case <-f.Ok():
			done(nil)
		case err := <-f.Err():
			done(err)
		}
	}()
}

// jsServer is one `raidq natsd` process.
type jsServer struct {
	name, dir           string
	clientPort, cluster int
	proc                *cluster.Proc
}

func (s *jsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.clientPort) }

// jsEnv is a started three-server JetStream cluster with the R3 stream
// created and current: an admin connection, its JetStream context and the
// stream leader's index.
type jsEnv struct {
	servers []*jsServer
	admin   *nats.Conn
	ajs     jetstream.JetStream
	leader  int
	// graceful: kill stops the servers with SIGTERM (they write their CPU
	// profiles on exit) instead of killing them.
	graceful bool
}

// startJetStream starts the servers (fsync as cfg.Fsync says, described
// in res.Setup) and creates the stream. On error everything started is
// killed; otherwise the caller calls kill (or stop) when done.
func startJetStream(ctx context.Context, cfg *Config, dir string, res *Result) (*jsEnv, error) {
	sync := jsSetup(cfg, res)
	servers, err := newJSServers(dir)
	if err != nil {
		return nil, err
	}
	e := &jsEnv{servers: servers, graceful: cfg.ProfileDir != ""}
	if err := e.start(ctx, cfg, sync); err != nil {
		e.kill()
		return nil, err
	}
	return e, nil
}

func (e *jsEnv) start(ctx context.Context, cfg *Config, sync string) error {
	if err := startJSServers(cfg, e.servers, sync); err != nil {
		return err
	}
	var err error
	if e.admin, err = nats.Connect(strings.Join(jsURLs(e.servers, -1), ","), nats.Name("jsbench-admin"), nats.MaxReconnects(-1)); err != nil {
		return err
	}
	if e.ajs, err = jetstream.New(e.admin); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	leader, err := createStream(sctx, e.ajs)
	if err != nil {
		return err
	}
	if e.leader = jsServerIndex(e.servers, leader); e.leader < 0 {
		return fmt.Errorf("jetstream: stream leader %q is not one of the servers", leader)
	}
	return nil
}

// kill closes the admin connection and SIGKILLs every server still
// running (SIGTERM first when graceful).
func (e *jsEnv) kill() {
	if e.admin != nil {
		e.admin.Close()
	}
	for _, s := range e.servers {
		if s.proc != nil && e.graceful && !s.proc.Exited() {
			_, _ = s.proc.Stop(30 * time.Second)
		}
		if s.proc != nil {
			s.proc.Kill()
		}
	}
}

// tracked returns a fresh tracker per server process.
func (e *jsEnv) tracked() []*tracked {
	procs := make([]*tracked, len(e.servers))
	for i, s := range e.servers {
		procs[i] = &tracked{name: s.name, pid: s.proc.Cmd.Process.Pid}
	}
	return procs
}

// runJetStream runs the workload against a three-server JetStream
// cluster and an R3 file stream.
func runJetStream(ctx context.Context, cfg *Config, dir string) (*Result, error) {
	res := &Result{System: "jetstream", Messages: cfg.Messages}
	e, err := startJetStream(ctx, cfg, dir, res)
	if err != nil {
		return nil, err
	}
	defer e.kill()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// Publishers connect to servers that stay up (see runRaidq).
	skip := -1
	if cfg.Kill != 0 {
		skip = e.leader
	}
	t, closeConns, err := connectJSPublishers(cfg, jsURLs(e.servers, skip))
	defer closeConns()
	if err != nil {
		return nil, err
	}
	warm, err := warmUp(sctx, cfg, t)
	if err != nil {
		return nil, fmt.Errorf("jetstream: warm-up: %w", err)
	}
	procs := e.tracked()
	rec, use, err := measure(ctx, cfg, "jetstream", procs, t, func(rec *recorder) {
		if cfg.Kill == 0 {
			return
		}
		killJSLeader(ctx, cfg, e.ajs, e.servers, procs, e.leader, rec, res)
	})
	if err != nil {
		return nil, err
	}
	res.summarize(rec, cfg.Size)
	res.addProcs(procs, use.client, use.machine)
	if cfg.Slow > 0 {
		res.Slow = []string{"(not slowed: nats-server has no reply delay)"}
	}
	e.admin.Close()
	disk := stopJSServers(cfg, e.servers)
	res.setDisk(disk, int64(res.Acked+warm)*int64(cfg.Size))
	return res, nil
}

// jsSetup describes the JetStream setup in res.Setup and returns the
// servers' --sync value.
func jsSetup(cfg *Config, res *Result) string {
	if cfg.Fsync {
		res.Setup = fmt.Sprintf("%d `raidq natsd` processes (nats-server), R3 file stream, sync_interval always", jsServers)
		return "always"
	}
	res.Setup = fmt.Sprintf("%d `raidq natsd` processes (nats-server), R3 file stream, sync_interval default (2 min)", jsServers)
	return "default"
}

// newJSServers lays out the servers (names, data directories, free
// client and cluster ports) without starting them.
func newJSServers(dir string) ([]*jsServer, error) {
	ports, err := cluster.FreePorts(2 * jsServers)
	if err != nil {
		return nil, err
	}
	servers := make([]*jsServer, jsServers)
	for i := range servers {
		servers[i] = &jsServer{name: fmt.Sprintf("js%d", i), dir: filepath.Join(dir, "jetstream", fmt.Sprintf("js%d", i)),
			clientPort: ports[2*i], cluster: ports[2*i+1]}
	}
	return servers, nil
}

// startJSServers starts every server, routed to all the others, and
// waits until each one is ready. Started processes are left in s.proc
// for the caller to kill.
func startJSServers(cfg *Config, servers []*jsServer, sync string) error {
	var routes []string
	for _, s := range servers {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", s.cluster))
	}
	env := cfg.serverEnv()
	cfg.logf("jetstream: starting %d servers (sync_interval %s)", jsServers, sync)
	for _, s := range servers {
		args := []string{"natsd", "--name", s.name, "--data", s.dir, "--listen", fmt.Sprintf("127.0.0.1:%d", s.clientPort),
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", s.cluster), "--routes", strings.Join(routes, ","),
			"--sync", sync}
		var err error
		if s.proc, err = cluster.StartProc(s.name, cfg.Binary, args, env...); err != nil {
			return err
		}
	}
	for _, s := range servers {
		if err := s.proc.WaitStdout("natsd ready", 30*time.Second); err != nil {
			return fmt.Errorf("jetstream: %w\n%s", err, s.proc.Tail(10))
		}
	}
	return nil
}

// jsServerIndex returns the index of the server called name, or -1.
func jsServerIndex(servers []*jsServer, name string) int {
	idx := -1
	for i, s := range servers {
		if s.name == name {
			idx = i
		}
	}
	return idx
}

// jsURLs returns the client URLs of every server but servers[skip]
// (skip < 0 keeps them all).
func jsURLs(servers []*jsServer, skip int) []string {
	var urls []string
	for i, s := range servers {
		if i != skip {
			urls = append(urls, s.url())
		}
	}
	return urls
}

// connectJSPublishers opens one NATS connection (and JetStream context)
// per publisher to urls. The returned close func closes every connection
// opened, also when an error is returned.
func connectJSPublishers(cfg *Config, urls []string) (jsTarget, func(), error) {
	var conns []*nats.Conn
	closeAll := func() {
		for i := len(conns) - 1; i >= 0; i-- {
			conns[i].Close()
		}
	}
	t := jsTarget{}
	for p := range cfg.Publishers {
		nc, err := nats.Connect(strings.Join(urls, ","), nats.Name(fmt.Sprintf("jsbench-%d", p)), nats.MaxReconnects(-1))
		if err != nil {
			return t, closeAll, err
		}
		conns = append(conns, nc)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(cfg.Window, 256)))
		if err != nil {
			return t, closeAll, err
		}
		t.js = append(t.js, js)
	}
	return t, closeAll, nil
}

// killJSLeader SIGKILLs the stream's current leader (lidx unless the
// leader has moved) in the middle of the measured run and records the
// kill in res.
func killJSLeader(ctx context.Context, cfg *Config, ajs jetstream.JetStream, servers []*jsServer, procs []*tracked,
	lidx int, rec *recorder, res *Result) {
	// Ask again: the leader may have moved since the stream was made.
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if s, err := ajs.Stream(ictx, jsStream); err == nil && s.CachedInfo().Cluster != nil {
		for i, sv := range servers {
			if sv.name == s.CachedInfo().Cluster.Leader {
				lidx = i
			}
		}
	}
	at := time.Since(rec.start)
	procs[lidx].finish()
	procs[lidx].killed = true
	servers[lidx].proc.Kill()
	res.Killed = append(res.Killed, servers[lidx].name+" (stream leader)")
	res.KillAtMs = msOf(at)
	cfg.logf("jetstream: killed the stream leader %s (SIGKILL) at %.0f ms", servers[lidx].name, res.KillAtMs)
	if cfg.Kill > 1 {
		cfg.logf("jetstream: --kill %d: only the leader is killed (R3 survives one loss)", cfg.Kill)
	}
}

// stopJSServers stops the servers still running (so they flush and
// exit cleanly) and returns the disk space their data directories use.
func stopJSServers(cfg *Config, servers []*jsServer) int64 {
	for _, s := range servers {
		if !s.proc.Exited() {
			if _, err := s.proc.Stop(30 * time.Second); err != nil {
				cfg.logf("jetstream: stop %s: %v", s.name, err)
			}
		}
	}
	var disk int64
	for _, s := range servers {
		disk += diskUsage(s.dir)
	}
	return disk
}

// createStream creates the R3 file stream (retrying while JetStream's
// meta group forms) and waits until every replica is current; it returns
// the leader's server name.
func createStream(ctx context.Context, js jetstream.JetStream) (string, error) {
	sc := jetstream.StreamConfig{Name: jsStream, Subjects: []string{jsSubject}, Replicas: jsServers,
		Storage: jetstream.FileStorage}
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := js.CreateOrUpdateStream(actx, sc)
		if err == nil {
			var info *jetstream.StreamInfo
			info, err = s.Info(actx)
			if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == jsServers-1 {
				current := true
				for _, r := range info.Cluster.Replicas {
					current = current && r.Current
				}
				if current {
					cancel()
					return info.Cluster.Leader, nil
				}
			}
			if err == nil {
				err = errors.New("stream replicas not current yet")
			}
		}
		cancel()
		last = err
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("jetstream: create the stream: %w (last: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
