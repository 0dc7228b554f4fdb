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
	var o natsserver.ServerOptions
	var listen, clusterListen, sync, logLevel string
	var routes []string
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
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			if o.Name == "" || o.StoreDir == "" {
				return fmt.Errorf("natsd: --name and --data are required")
			}
			o.StoreDir = filepath.Join(o.StoreDir, "jetstream")
			o.JetStream, o.Logger = true, log
			if o.Host, o.Port, err = natsdHostPort(listen); err != nil {
				return fmt.Errorf("natsd: --listen: %w", err)
			}
			if clusterListen != "" {
				if o.ClusterHost, o.ClusterPort, err = natsdHostPort(clusterListen); err != nil {
					return fmt.Errorf("natsd: --cluster-listen: %w", err)
				}
				if o.ClusterName == "" {
					o.ClusterName = "jsbench"
				}
				o.Routes = splitList(routes)
			}
			switch s := strings.ToLower(sync); s {
			case "", "default":
			case "always":
				o.SyncAlways = true
			default:
				if o.SyncInterval, err = time.ParseDuration(s); err != nil || o.SyncInterval <= 0 {
					return fmt.Errorf("natsd: --sync %q: want always, default or a duration", sync)
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv, err := natsserver.StartServer(o)
			if err != nil {
				return err
			}
			defer srv.Shutdown()
			fmt.Fprintln(cmd.OutOrStdout(), "natsd ready", srv.ClientURL())
			<-ctx.Done()
			stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", "", "server name (required; unique in the cluster)")
	f.StringVar(&o.StoreDir, "data", "", "data directory (required): JetStream files in DATA/jetstream")
	f.StringVar(&listen, "listen", "127.0.0.1:-1", "client address host:port (-1: any free port)")
	f.StringVar(&clusterListen, "cluster-listen", "", "route address host:port (empty: a single server)")
	f.StringSliceVar(&routes, "routes", nil, "route URLs of every server, comma-separated")
	f.StringVar(&o.ClusterName, "cluster", "", "NATS cluster name (default jsbench)")
	f.StringVar(&sync, "sync", "default", "JetStream sync: always, default, or a flush interval")
	f.Int64Var(&o.MaxStore, "max-store", 8<<30, "JetStream file storage limit in bytes")
	f.StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error (text on stderr)")
	return cmd
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
