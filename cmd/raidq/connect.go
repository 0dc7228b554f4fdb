package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/metrics"
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	url     string
	creds   string
	cluster string
	timeout time.Duration
	verbose bool
	auth    clientAuthFlags // security_flags.go
	// metrics, when set, receives the client's metrics (raidq kafka --metrics).
	metrics *prometheus.Registry
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Flag help of --nats and --creds, shared by every client command.
const (
	natsFlagHelp  = "NATS URL of the cluster (env RAIDQ_NATS, else NATS_URL)"
	credsFlagHelp = "NATS credentials file (env RAIDQ_CREDS, else NATS_CREDS)"
)

// defaultNATSURL is --nats's default: RAIDQ_NATS, else the nats CLI's
// NATS_URL (so one environment serves both tools), else the local port.
func defaultNATSURL() string {
	return envOr("RAIDQ_NATS", envOr("NATS_URL", "nats://127.0.0.1:4222"))
}

// defaultCreds is --creds's default: RAIDQ_CREDS, else NATS_CREDS.
func defaultCreds() string { return envOr("RAIDQ_CREDS", envOr("NATS_CREDS", "")) }

func (f *clientFlags) register(cmd *cobra.Command) {
	p := cmd.Flags()
	p.StringVar(&f.url, "nats", defaultNATSURL(), natsFlagHelp)
	p.StringVar(&f.creds, "creds", defaultCreds(), credsFlagHelp)
	p.StringVar(&f.cluster, "cluster", envOr("RAIDQ_CLUSTER", "raidq"), "raidq cluster name (env RAIDQ_CLUSTER)")
	p.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for the cluster to answer")
	p.BoolVarP(&f.verbose, "verbose", "v", false, "log what the client does (stderr)")
	f.auth.register(p)
}

func (f *clientFlags) logger() *slog.Logger {
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// connect dials the cluster with a clear error when nothing answers.
func (f *clientFlags) connect() (*raidq.Client, error) {
	if f.timeout <= 0 {
		return nil, usageErr(fmt.Errorf("--timeout %v: must be positive", f.timeout))
	}
	// A refusal that ends an operation is that operation's error (exit 4);
	// the reporter prints the others once each.
	opts := append([]raidq.Option{raidq.WithCluster(f.cluster), raidq.WithAuth(f.auth.auth(f.creds)),
		raidq.WithTimeout(f.timeout), raidq.WithLogger(f.logger()), raidq.WithName("raidq-cli")},
		newRefusalReporter(os.Stderr).clientOptions(f.cluster)...)
	if f.metrics != nil {
		if err := metrics.RegisterBuildInfo(f.metrics); err != nil {
			return nil, err
		}
		opts = append(opts, raidq.WithMetrics(f.metrics))
	}
	c, err := raidq.Connect(f.url, opts...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (f *clientFlags) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), f.timeout)
}
