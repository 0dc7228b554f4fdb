package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/actors/node"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// nodeStopTimeout bounds a graceful stop after SIGTERM/SIGINT.
const nodeStopTimeout = 30 * time.Second

// nodeFlags are the flags of `raidq node`.
type nodeFlags struct {
	o                                 server.NodeOptions
	sec                               nodeSecurityFlags // security_flags.go
	kafka                             kafkaFlags        // kafka.go
	logLevel, configFile, metricsAddr string
	logFormat                         string
	diskWatermark                     float64 // percent
}

func nodeCmd() *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run one storage node (slot store + embedded NATS server) until SIGTERM or SIGINT",
		Long: `node runs one raidq storage node: its LevelDB slot store in DATA/slots and
an embedded NATS server with JetStream (files in DATA/nats) that holds
the cluster's metadata. Give every server of a cluster the same full route
list (clustered JetStream sizes its meta group from it); the metadata
buckets get min(5, servers) replicas, so they survive two of six servers
down. With --nats the node joins an existing NATS system (JetStream on)
instead of embedding a server.

The node refreshes its member record every 2s and serves from its cached
topic catalog while the metadata is unavailable. SIGTERM or SIGINT stops it
gracefully (in-flight writes finish and are fsynced) and it exits 0; a
second signal exits at once. A damaged data directory makes it exit 1.

Security (docs/security.md): --auth FILE lists the users and their roles
(node, admin, producer and consumer of given topics) as NATS users with
subject permissions; --tls-cert, --tls-key and --tls-ca make clients use
TLS and the routes between nodes mutual TLS. Without --auth the node
refuses to start unless --insecure says to run without authentication.

--http-listen HOST:PORT serves the embedded NATS server's monitoring
endpoints (/varz, /jsz, /connz, /routez, /healthz, ...), separate from
--metrics. NATS monitoring has no authentication: bind it to a loopback
or private address. The nats CLI's server commands (nats server ls,
nats server report jetstream, nats server raft peer-remove) use the
system account instead: an auth file user with roles: [system].

--config FILE reads the flags from a file, keyed by flag name (id, data,
listen, cluster-listen, routes, ...): JSON, or flat "key: value" lines
(NATS config syntax; lists as [a, b]; # comments). An unquoted value
starting with ./ or ../ (data: ./data/n3) is a path relative to the config
file's directory. Flags given on the command line win; an unknown key is
an error.`,
		Example: `  raidq node --auth auth.conf --tls-cert n1.pem --tls-key n1-key.pem --tls-ca ca.pem \
    --id n1 --data /var/lib/raidq --listen 0.0.0.0:4222 --cluster-listen 0.0.0.0:6222 \
    --routes nats-route://h1:6222,nats-route://h2:6222,nats-route://h3:6222

  raidq node --insecure --id n1 --data /var/lib/raidq \
    --listen 0.0.0.0:4222 --cluster-listen 0.0.0.0:6222 \
    --routes nats-route://h1:6222,nats-route://h2:6222,nats-route://h3:6222`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runNodeCmd(cmd, &f)
		},
	}
	f.register(cmd)
	return cmd
}

// register defines the node flags on cmd.
func (n *nodeFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&n.o.ID, "id", "", "node id (required; unique in the cluster; also the NATS server name)")
	f.StringVar(&n.o.DataDir, "data", "", "data directory (required): slot store in DATA/slots, JetStream in DATA/nats")
	f.StringVar(&n.o.Cluster, "cluster", server.DefaultCluster, "raidq cluster name (subjects, metadata buckets, NATS cluster name)")
	f.StringVar(&n.o.Listen, "listen", "", "NATS client address host:port (default "+server.DefaultNodeListen+")")
	f.StringVar(&n.o.ClusterListen, "cluster-listen", "", "NATS route address host:port (empty: a single server)")
	f.StringSliceVar(&n.o.Routes, "routes", nil, "route URLs of every server of the cluster, comma-separated (nats-route://host:port,...)")
	f.StringVar(&n.o.ClusterAdvertise, "cluster-advertise", "", "route address host:port peers are told to dial (default: this host's interface addresses; "+
		"with TLS give a name the node certificate holds)")
	f.StringVar(&n.o.ClientAdvertise, "client-advertise", "", "client address host:port clients are told to fail over to (default: this host's interface addresses)")
	f.StringVar(&n.o.NATSURL, "nats", "", "join this existing NATS system (JetStream on) instead of embedding a server")
	f.IntVar(&n.o.MetaReplicas, "meta-replicas", 0, "replicas of the metadata buckets (0: min(5, servers))")
	f.DurationVar(&n.o.MetaTimeout, "meta-timeout", server.DefaultMetaTimeout, "how long to wait at start for JetStream and the metadata")
	f.BoolVar(&n.o.NoSync, "no-fsync", false, "acknowledge writes before fsync (acknowledged data can be lost on power failure)")
	f.Float64Var(&n.o.Repair.RateMBps, "repair-rate", 20, "cap on repair traffic (header scans, shard fetches, rebuilt shards) in MB/s, so repair never starves writes")
	f.DurationVar(&n.o.Repair.Interval, "repair-interval", 10*time.Second, "time between repair passes")
	f.DurationVar(&n.o.Repair.ScrubInterval, "scrub-interval", time.Hour, "time between scrub passes (re-read every shard, check CRCs); negative: no scrub")
	f.Float64Var(&n.o.Repair.ScrubRateMBps, "scrub-rate", 10, "cap on scrub reads in MB/s")
	f.StringVar(&n.o.Replace, "replace", "", "take over the ensemble positions of this dead node (start on an empty --data; repair refills them)")
	f.BoolVar(&n.o.Insecure, "insecure", false, "run without authentication (required unless --auth is given)")
	n.sec.register(f)
	n.kafka.register(f, "kafka-")
	f.StringVar(&n.logLevel, "log-level", "info", "log level: debug, info, warn or error (on stderr)")
	f.StringVar(&n.logFormat, "log-format", "text", "log format: text or json (slog; the NATS server's and actors' logs too)")
	f.StringVar(&n.metricsAddr, "metrics", "", "serve Prometheus metrics and /healthz on this address (host:port)")
	f.StringVar(&n.o.HTTPListen, "http-listen", "", httpListenHelp)
	f.StringVar(&n.configFile, "config", "", "read flags from this file (JSON or NATS-style key: value)")
	// Failure drills only (raidq drill slow-2): answer every request late.
	f.DurationVar(&n.o.ReplyDelay, "reply-delay", 0, "answer every request this late (failure drills: a slow node)")
	f.DurationVar(&n.o.ClockBound, "max-clock-offset", node.DefaultClockBound, "refuse writes (CLOCK_OFF) while this node's clock is further than this from its peers' (negative: never check)")
	f.Float64Var(&n.diskWatermark, "disk-watermark", 100*bus.DefaultDiskWatermark,
		"percent of the data file system in use past which the node reports disk pressure (status, metrics, log)")
	// Failure drills only (raidq drill clock-step): the node's clock can be offset at run time.
	f.BoolVar(&n.o.ClockFault, "clock-fault", false, "let admins offset this node's clock at run time on raidq.<cluster>.fault.clock.<id> (failure drills)")
	_ = f.MarkHidden("reply-delay")
	_ = f.MarkHidden("clock-fault")
}

// runNodeCmd is `raidq node`: it reads --config, turns the flags into the
// node's options, serves --metrics and runs the node (runNode).
func runNodeCmd(cmd *cobra.Command, f *nodeFlags) error {
	o := &f.o
	if f.configFile != "" {
		if err := applyConfigFile(cmd.Flags(), f.configFile); err != nil {
			return usageErr(err)
		}
	}
	log, err := newLoggerFormat(f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	o.Logger = log
	if _, _, err := natsserver.SplitMonitorListen(o.HTTPListen); err != nil {
		return usageErr(fmt.Errorf("--http-listen: %w", err))
	}
	o.Routes = splitList(o.Routes)
	if f.diskWatermark <= 0 || f.diskWatermark >= 100 {
		return usageErr(fmt.Errorf("--disk-watermark %g: must be a percentage above 0 and below 100", f.diskWatermark))
	}
	o.DiskWatermark = f.diskWatermark / 100
	if err := f.sec.apply(o); err != nil {
		return err
	}
	if o.Kafka, err = f.kafka.options(f.sec.authFile); err != nil {
		return err
	}
	reg, stopMetrics, err := serveMetrics(f.metricsAddr)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if err := metrics.RegisterBuildInfo(reg); err != nil {
		return err
	}
	o.Metrics = reg
	return runNode(*o)
}

// runNode starts the node and runs it until a signal (graceful stop, nil)
// or a store failure (error).
func runNode(o server.NodeOptions) error {
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	if o.Insecure && o.Auth == nil && o.NATSURL == "" {
		o.Logger.Warn("running without authentication (--insecure): anyone who can reach the NATS ports can read and write every topic")
	}
	n, err := server.StartNodeContext(ctx, o)
	if err != nil {
		if ctx.Err() != nil {
			o.Logger.Info("interrupted while starting", "err", err)
			return nil
		}
		return err
	}
	var fatal error
	select {
	case <-ctx.Done():
		o.Logger.Info("signal received: stopping gracefully (a second signal exits at once)")
	case fatal = <-n.Fatal():
		o.Logger.Error("node failed: stopping (exit 1; the supervisor restarts it)", "err", fatal)
	}
	stopSignals() // a second signal now gets the default action: exit at once
	sctx, cancel := context.WithTimeout(context.Background(), nodeStopTimeout)
	defer cancel()
	serr := n.Stop(sctx)
	if fatal != nil {
		return fmt.Errorf("node %s: failed: %w", o.ID, fatal)
	}
	if serr != nil {
		return fmt.Errorf("node %s: stop: %w", o.ID, serr)
	}
	return nil
}

// httpListenHelp is the help of --http-listen (node and dev).
const httpListenHelp = "serve the NATS server's monitoring endpoints (/varz, /jsz, /connz, /routez, /healthz) on host:port; " +
	"NO authentication: bind to loopback or a private address (port -1: any free port)"

// newLogger returns a text logger on stderr at the named level.
func newLogger(level string) (*slog.Logger, error) { return newLoggerFormat(level, "text") }

// newLoggerFormat returns a logger on stderr at the named level, in the
// named format (text or json; slog's handlers), and makes it slog's
// default so that whatever logs through slog.Default (or the log
// package) comes out the same way. Bad names are usage errors.
func newLoggerFormat(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErr(fmt.Errorf("--log-level %q: want debug, info, warn or error", level))
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	default:
		return nil, usageErr(fmt.Errorf("--log-format %q: want text or json", format))
	}
	log := slog.New(h)
	slog.SetDefault(log)
	return log, nil
}

// splitList splits comma-separated entries and drops blanks.
func splitList(in []string) []string {
	var out []string
	for _, s := range in {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// Relative paths in a config file: the NATS config lexer reads an
// unquoted value starting with "." as a number and fails ("Floats must
// start with a digit"), so configText quotes such values, resolved
// against the file's directory, and inlines includes (each relative to
// its own file) so they get the same treatment.
var (
	configRelPath = regexp.MustCompile(`(?m)^(\s*[A-Za-z0-9_-]+(?:\s*[:=]\s*|\s+))(\.\.?/[^\s#;,}\]"']*)`)
	configInclude = regexp.MustCompile(`(?m)^\s*include\s+["']?([^"'\s;]+)["']?\s*;?[ \t]*$`)
)

// parseConfigFile parses a JSON or NATS-syntax config file. An unquoted
// value starting with ./ or ../ (data: ./data/n3) is a path relative to
// the file's directory, whatever the node's working directory; a quoted
// one is taken as written.
func parseConfigFile(path string) (map[string]any, error) {
	text, err := configText(path, 0)
	if err != nil {
		return nil, err
	}
	return conf.Parse(text)
}

// configText is path's text with unquoted relative paths resolved and
// quoted and its includes inlined.
func configText(path string, depth int) (string, error) {
	if depth > 10 {
		return "", fmt.Errorf("include %s: includes nested more than 10 deep", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(path)
	text := configRelPath.ReplaceAllStringFunc(string(b), func(line string) string {
		sm := configRelPath.FindStringSubmatch(line)
		return sm[1] + strconv.Quote(filepath.Join(dir, sm[2]))
	})
	var ierr error
	text = configInclude.ReplaceAllStringFunc(text, func(line string) string {
		inc := configInclude.FindStringSubmatch(line)[1]
		if !filepath.IsAbs(inc) {
			inc = filepath.Join(dir, inc)
		}
		t, err := configText(inc, depth+1)
		if err != nil && ierr == nil {
			ierr = err
		}
		return t
	})
	return text, ierr
}

// applyConfigFile sets the flags named by the keys of a JSON or
// NATS-config-syntax file, unless they were given on the command line.
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	m, err := parseConfigFile(path)
	if err != nil {
		return usageErr(fmt.Errorf("--config %s: %w", path, err))
	}
	var known []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" && f.Name != "help" {
			known = append(known, f.Name)
		}
	})
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || k == "config" || k == "help" {
			return fmt.Errorf("--config %s: unknown key %q (known keys: %s)", path, k, strings.Join(known, ", "))
		}
		if f.Changed {
			continue // the command line wins
		}
		var vals []string
		switch v := m[k].(type) {
		case []any:
			if _, ok := f.Value.(pflag.SliceValue); !ok {
				return fmt.Errorf("--config %s: key %q takes one value, not a list", path, k)
			}
			for _, e := range v {
				vals = append(vals, fmt.Sprint(e))
			}
		case map[string]any:
			return fmt.Errorf("--config %s: key %q takes a value, not a map", path, k)
		default:
			vals = []string{fmt.Sprint(v)}
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			err = sv.Replace(vals)
			f.Changed = true
		} else {
			err = fs.Set(k, vals[0])
		}
		if err != nil {
			return fmt.Errorf("--config %s: key %q: %w", path, k, err)
		}
	}
	return nil
}
