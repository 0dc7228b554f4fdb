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

// runJetStream runs the workload against a three-server JetStream
// cluster and an R3 file stream.
func runJetStream(ctx context.Context, cfg *Config, dir string) (*Result, error) {
	res := &Result{System: "jetstream", Messages: cfg.Messages}
	sync := "default"
	res.Setup = fmt.Sprintf("%d `raidq natsd` processes (nats-server), R3 file stream, sync_interval default (2 min)", jsServers)
	if cfg.Fsync {
		sync = "always"
		res.Setup = fmt.Sprintf("%d `raidq natsd` processes (nats-server), R3 file stream, sync_interval always", jsServers)
	}
	ports, err := cluster.FreePorts(2 * jsServers)
	if err != nil {
		return nil, err
	}
	servers := make([]*jsServer, jsServers)
	var routes []string
	for i := range servers {
		servers[i] = &jsServer{name: fmt.Sprintf("js%d", i), dir: filepath.Join(dir, "jetstream", fmt.Sprintf("js%d", i)),
			clientPort: ports[2*i], cluster: ports[2*i+1]}
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[2*i+1]))
	}
	env := cfg.serverEnv()
	defer func() {
		for _, s := range servers {
			if s.proc != nil {
				s.proc.Kill()
			}
		}
	}()
	cfg.logf("jetstream: starting %d servers (sync_interval %s)", jsServers, sync)
	for _, s := range servers {
		args := []string{"natsd", "--name", s.name, "--data", s.dir, "--listen", fmt.Sprintf("127.0.0.1:%d", s.clientPort),
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", s.cluster), "--routes", strings.Join(routes, ","),
			"--sync", sync}
		if s.proc, err = cluster.StartProc(s.name, cfg.Binary, args, env...); err != nil {
			return nil, err
		}
	}
	for _, s := range servers {
		if err := s.proc.WaitStdout("natsd ready", 30*time.Second); err != nil {
			return nil, fmt.Errorf("jetstream: %w\n%s", err, s.proc.Tail(10))
		}
	}
	var all []string
	for _, s := range servers {
		all = append(all, s.url())
	}
	admin, err := nats.Connect(strings.Join(all, ","), nats.Name("jsbench-admin"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	ajs, err := jetstream.New(admin)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	leader, err := createStream(sctx, ajs)
	if err != nil {
		return nil, err
	}
	lidx := -1
	for i, s := range servers {
		if s.name == leader {
			lidx = i
		}
	}
	if lidx < 0 {
		return nil, fmt.Errorf("jetstream: stream leader %q is not one of the servers", leader)
	}

	// Publishers connect to servers that stay up (see runRaidq).
	var urls []string
	for i, s := range servers {
		if cfg.Kill == 0 || i != lidx {
			urls = append(urls, s.url())
		}
	}
	t := jsTarget{}
	for p := range cfg.Publishers {
		nc, err := nats.Connect(strings.Join(urls, ","), nats.Name(fmt.Sprintf("jsbench-%d", p)), nats.MaxReconnects(-1))
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(cfg.Window, 256)))
		if err != nil {
			return nil, err
		}
		t.js = append(t.js, js)
	}
	warm, err := warmUp(sctx, cfg, t)
	if err != nil {
		return nil, fmt.Errorf("jetstream: warm-up: %w", err)
	}

	procs := make([]*tracked, len(servers))
	for i, s := range servers {
		procs[i] = &tracked{name: s.name, pid: s.proc.Cmd.Process.Pid}
	}
	rec, use, err := measure(ctx, cfg, "jetstream", procs, t, func(rec *recorder) {
		if cfg.Kill == 0 {
			return
		}
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
	})
	if err != nil {
		return nil, err
	}
	res.summarize(rec, cfg.Size)
	res.addProcs(procs, use.client, use.machine)
	if cfg.Slow > 0 {
		res.Slow = []string{"(not slowed: nats-server has no reply delay)"}
	}
	admin.Close()
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
	res.setDisk(disk, int64(res.Acked+warm)*int64(cfg.Size))
	return res, nil
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
