package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/spf13/cobra"
)

// devFlags are the flags of `raidq dev`.
type devFlags struct {
	cfg                   server.LocalClusterConfig
	logLevel, metricsAddr string
	logFormat             string
	sec                   devSecurityFlags // security_dev.go
	kafka                 kafkaFlags       // kafka.go
}

func devCmd() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a development cluster in this process: one NATS server, N nodes, metadata in KV",
		Long: `dev runs a whole raidq cluster in one process, like nats-server -js: one
embedded NATS server listening on --listen (JetStream on, files in
DATA/nats, metadata buckets with one replica) and --nodes storage
nodes, each with its own slot store in DATA/node-i. Any client can then
create topics and produce and consume, for example with the CLI:

  raidq topic create orders --partitions 4
  echo hello | raidq produce orders
  raidq consume orders --from earliest

Without --data the cluster lives in a temporary directory removed at exit;
with it, topics and data survive a restart. SIGINT or SIGTERM stops it.

It runs without authentication unless --auth FILE gives users and their
permissions (docs/security.md). --tls makes clients use TLS: it generates
a local CA and a server certificate in DATA/tls (kept across restarts)
and prints the CA file to pass to clients with --tls-ca.

--http-listen HOST:PORT serves the NATS server's monitoring endpoints
(/varz, /jsz, /connz, /routez, /healthz, ...). The dev cluster has one
NATS server (its nodes share it), so it is one address; no port scheme.
NATS monitoring has no authentication: bind it to a loopback or private
address. The nats CLI's server commands need a system user in --auth
(roles: [system]); without --auth no one can reach the system account.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd, &f)
		},
	}
	f.register(cmd)
	return cmd
}

// register defines the dev flags on cmd.
func (d *devFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&d.cfg.Nodes, "nodes", 6, "storage nodes")
	f.StringVar(&d.cfg.Dir, "data", "", "data directory (default: a temporary directory removed at exit)")
	f.StringVar(&d.cfg.Listen, "listen", server.DefaultNodeListen, "NATS client address host:port")
	f.StringVar(&d.cfg.Cluster, "cluster", server.DefaultCluster, "raidq cluster name")
	f.BoolVar(&d.cfg.NoSync, "no-fsync", false, "acknowledge writes before fsync (acknowledged data can be lost on power failure)")
	f.StringVar(&d.logLevel, "log-level", "warn", "log level: debug, info, warn or error (on stderr)")
	f.StringVar(&d.logFormat, "log-format", "text", "log format: text or json (slog; the NATS server's and actors' logs too)")
	f.StringVar(&d.metricsAddr, "metrics", "", "serve Prometheus metrics and /healthz on this address (host:port)")
	f.StringVar(&d.cfg.HTTPListen, "http-listen", "", httpListenHelp+"; the one NATS server of the dev cluster")
	d.sec.register(f)
	d.kafka.register(f, "kafka-")
}

// runDev is `raidq dev`: it starts the local cluster (in a temporary
// directory without --data), describes it and runs it until a signal.
func runDev(cmd *cobra.Command, f *devFlags) error {
	cfg := &f.cfg
	log, err := newLoggerFormat(f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	cfg.Logger = log
	if cfg.Listen == "" {
		return usageErr(fmt.Errorf("--listen: a host:port is required"))
	}
	if _, _, err := natsserver.SplitMonitorListen(cfg.HTTPListen); err != nil {
		return usageErr(fmt.Errorf("--http-listen: %w", err))
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "raidq-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	if err := f.sec.apply(cfg); err != nil {
		return err
	}
	if cfg.Kafka, err = f.kafka.options(f.sec.authFile); err != nil {
		return err
	}
	// /healthz says "starting" until every node serves: raidq health
	// --wait then returns only once clients find all of them.
	var started atomic.Bool
	reg, stopMetrics, err := serveMetricsReady(f.metricsAddr, func() error {
		if !started.Load() {
			return errors.New("starting: not every node of the dev cluster serves yet")
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer stopMetrics()
	if err := metrics.RegisterBuildInfo(reg); err != nil {
		return err
	}
	cfg.Metrics = reg
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lc, err := server.StartLocalCluster(*cfg)
	if err != nil {
		return fmt.Errorf("dev cluster: %w", err)
	}
	defer lc.Close()
	started.Store(true)
	out := cmd.OutOrStdout()
	f.describe(out, lc)
	fmt.Fprintln(out, "press Ctrl-C to stop")
	<-ctx.Done()
	stop() // a second signal exits at once
	fmt.Fprintln(out, "stopping")
	return nil
}

// describe prints where the running cluster lc listens, its nodes and
// data directory, and how it is secured.
func (f *devFlags) describe(out io.Writer, lc *server.LocalCluster) {
	cfg := &f.cfg
	ids := lc.NodeIDs()
	fmt.Fprintf(out, "raidq dev: cluster %q listening on %s (JetStream on, metadata in KV)\n", cfg.Cluster, lc.ClientURL())
	fmt.Fprintf(out, "nodes: %s (data in %s)\n", strings.Join(ids, " "), cfg.Dir)
	if u := lc.NATSServer().MonitorURL(); u != "" {
		fmt.Fprintf(out, "NATS monitoring: %s/varz /jsz /connz /routez /healthz (no authentication)\n", u)
	}
	f.sec.describe(out, cfg, lc.ClientURL()) // security_dev.go: auth, TLS and a command to try
	if gw := lc.Kafka(); gw != nil {
		fmt.Fprintf(out, "kafka: listening on %s (clients told %s); try: kcat -b %s -L\n", gw.Addr(), gw.Advertised(), gw.Advertised())
	}
}
