package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/raidq/raidq/bus/natsserver"
)

// natsdCmd is the hidden `raidq natsd`: a plain nats-server (the one
// embedded in raidq, built from this tree) with clustering and JetStream,
// for `raidq bench --vs jetstream`. It is not part of a raidq cluster.
func natsdCmd() *cobra.Command {
	var f natsdFlags
	cmd := &cobra.Command{
		Use:    "natsd",
		Short:  "Run a plain clustered JetStream nats-server (benchmark baseline)",
		Hidden: true,
		Long: `natsd runs the nats-server embedded in raidq as a standalone server with
JetStream (files in DATA/jetstream) and, with --cluster-listen and --routes,
clustering: the baseline of raidq bench --vs jetstream. --sync always fsyncs
every JetStream write before acknowledging it (nats-server sync_interval:
always); a duration sets the flush interval; "default" keeps nats-server's
default (2 minutes). It prints "natsd ready <client URL>" on stdout and
runs until SIGTERM or SIGINT.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runNatsd(cmd, &f)
		},
	}
	f.register(cmd)
	return cmd
}

// natsdFlags are the flags of `raidq natsd`.
type natsdFlags struct {
	o                                     natsserver.ServerOptions
	listen, clusterListen, sync, logLevel string
	routes                                []string
}

// register defines the natsd flags on cmd.
func (n *natsdFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&n.o.Name, "name", "", "server name (required; unique in the cluster)")
	f.StringVar(&n.o.StoreDir, "data", "", "data directory (required): JetStream files in DATA/jetstream")
	f.StringVar(&n.listen, "listen", "127.0.0.1:-1", "client address host:port (-1: any free port)")
	f.StringVar(&n.clusterListen, "cluster-listen", "", "route address host:port (empty: a single server)")
	f.StringSliceVar(&n.routes, "routes", nil, "route URLs of every server, comma-separated")
	f.StringVar(&n.o.ClusterName, "cluster", "jsbench", "NATS cluster name")
	f.StringVar(&n.sync, "sync", "default", "JetStream sync: always, default, or a flush interval")
	f.Int64Var(&n.o.MaxStore, "max-store", 8<<30, "JetStream file storage limit in bytes")
	f.StringVar(&n.logLevel, "log-level", "warn", "log level: debug, info, warn or error (text on stderr)")
}

// runNatsd is `raidq natsd`: it runs the server until SIGTERM or SIGINT.
func runNatsd(cmd *cobra.Command, f *natsdFlags) error {
	if err := f.complete(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := natsserver.StartServer(f.o)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	fmt.Fprintln(cmd.OutOrStdout(), "natsd ready", srv.ClientURL())
	<-ctx.Done()
	stop()
	return nil
}

// complete checks the flags and turns them into the server's options
// (f.o): logger, JetStream directory, addresses, routes, sync.
func (f *natsdFlags) complete() error {
	o := &f.o
	log, err := newLogger(f.logLevel)
	if err != nil {
		return err
	}
	if o.Name == "" || o.StoreDir == "" {
		return usageErr(fmt.Errorf("natsd: --name and --data are required"))
	}
	o.StoreDir = filepath.Join(o.StoreDir, "jetstream")
	o.JetStream, o.Logger = true, log
	if o.Host, o.Port, err = natsdHostPort(f.listen); err != nil {
		return usageErr(fmt.Errorf("natsd: --listen: %w", err))
	}
	if f.clusterListen != "" {
		if o.ClusterHost, o.ClusterPort, err = natsdHostPort(f.clusterListen); err != nil {
			return usageErr(fmt.Errorf("natsd: --cluster-listen: %w", err))
		}
		o.Routes = splitList(f.routes)
	} else {
		o.ClusterName = "" // a single server: the name would turn clustering on
	}
	switch s := strings.ToLower(f.sync); s {
	case "", "default":
	case "always":
		o.SyncAlways = true
	default:
		if o.SyncInterval, err = time.ParseDuration(s); err != nil || o.SyncInterval <= 0 {
			return usageErr(fmt.Errorf("natsd: --sync %q: want always, default or a duration", f.sync))
		}
	}
	return nil
}

// natsdHostPort parses host:port (port -1: any free port).
func natsdHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: want host:port: %w", addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", addr)
	}
	return host, port, nil
}
