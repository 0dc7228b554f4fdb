package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/raidq/raidq/scenarios/demo"
)

func demoCmd() *cobra.Command {
	var cfg demo.Config
	var asJSON, verbose bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a six-node cluster in this process: produce, kill nodes half-way, consume, report",
		Long: `demo starts an embedded NATS server and six raidq nodes (each with its own
LevelDB in a temporary directory), produces --messages messages from
--producers producers, stops --kill nodes abruptly half-way, consumes
everything back and prints what was acknowledged, delivered and lost.
It runs without authentication: it opens no network port.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDemo(cfg); err != nil {
				return usageErr(err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			if verbose {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			} else {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
			}
			fmt.Fprintln(os.Stderr, "raidq demo runs without authentication (in this process only: it opens no network port)")
			if !asJSON && isTerminal(os.Stderr) {
				bar := progressbar.NewOptions(cfg.Messages, progressbar.OptionSetWriter(os.Stderr),
					progressbar.OptionSetDescription("producing"), progressbar.OptionClearOnFinish(),
					progressbar.OptionThrottle(100*time.Millisecond))
				cfg.Progress = func(a, f, _ int) { _ = bar.Set(a + f) }
			}
			r, err := demo.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				printReport(cmd.OutOrStdout(), &cfg, r)
			}
			if !r.OK {
				return errFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", 6, "storage nodes (the topic uses 4 data + 2 parity shards)")
	f.IntVar(&cfg.Messages, "messages", 20000, "messages to produce")
	f.IntVar(&cfg.Producers, "producers", 4, "concurrent producers")
	f.IntVar(&cfg.Partitions, "partitions", 4, "partitions of the demo topic")
	f.IntVar(&cfg.Size, "size", 1024, "message size in bytes")
	f.IntVar(&cfg.Kill, "kill", 2, "nodes stopped abruptly half-way")
	f.IntVar(&cfg.Slow, "slow", 0, "nodes that answer 50 ms late")
	f.DurationVar(&cfg.SlowDelay, "slow-delay", 50*time.Millisecond, "how late the --slow nodes answer")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed for the producers' random choices")
	f.BoolVar(&cfg.NoSync, "no-fsync", false, "do not fsync before acknowledging (acked data can be lost on power failure)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.BoolVarP(&verbose, "verbose", "v", false, "log what the nodes and clients do")
	return cmd
}

func printReport(w io.Writer, cfg *demo.Config, r *demo.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	verdict := "OK: nothing acknowledged was lost"
	if !r.OK {
		verdict = "FAILED: acknowledged messages were lost or unexpected ones delivered"
	}
	rows := [][2]string{
		{"messages", fmt.Sprint(r.Messages)},
		{"acked", fmt.Sprint(r.Acked)},
		{"failed sends", fmt.Sprint(r.Failed)},
		{"delivered", fmt.Sprint(r.Delivered)},
		{"lost (acked, not delivered)", fmt.Sprint(r.Lost)},
		{"unexpected (never sent)", fmt.Sprint(r.Unexpected)},
		{"duplicates", fmt.Sprint(r.Duplicates)},
		{"in doubt", fmt.Sprint(r.InDoubt)},
		{"killed half-way", strings.Join(r.Killed, " ")},
		{"slow (" + cfg.SlowDelay.String() + ")", strings.Join(r.Slow, " ")},
		{"restarted before consuming", strings.Join(r.Restarted, " ") + restartWhy(r)},
		{"ack latency p50/p99/max", fmt.Sprintf("%.2f / %.2f / %.2f ms", r.AckP50Ms, r.AckP99Ms, r.AckMaxMs)},
		{"longest gap between acks", fmt.Sprintf("%.2f ms", r.LongestAckGapMs)},
		{"throughput", fmt.Sprintf("%.0f msgs/s", r.ThroughputMsgsS)},
		{"disk bytes per payload byte", fmt.Sprintf("%.2f", r.DiskBytesPerPayload)},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	_ = tw.Flush()
	if r.FirstError != "" {
		fmt.Fprintf(w, "first send error: %s\n", r.FirstError)
	}
	fmt.Fprintln(w, verdict)
}

func restartWhy(r *demo.Report) string {
	if len(r.Restarted) == 0 {
		return "none"
	}
	return " (more nodes were down than the 2 parity shards cover)"
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// checkDemo refuses flags the demo cannot run with, before it starts
// anything (exit 2): demo.Config.Validate's rules, and no zero counts
// (demo.Run would take its defaults for them).
func checkDemo(c demo.Config) error {
	if c.Producers < 1 || c.Partitions < 1 {
		return fmt.Errorf("--producers %d, --partitions %d: must be at least 1", c.Producers, c.Partitions)
	}
	return c.Validate()
}
