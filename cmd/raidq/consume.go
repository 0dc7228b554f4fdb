package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/raidq/raidq"
)

func consumeCmd() *cobra.Command {
	var cf clientFlags
	var from, group string
	var count int
	var idle time.Duration
	var asJSON bool
	var partitions []int
	var commitEvery, session time.Duration
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print a topic's messages, one value per line",
		Long: `consume reads a topic from --from (earliest, latest, an RFC 3339 time, or a
duration ago such as -5m) and prints one value per line, or one JSON object
per message with --json. It stops after --count messages, after --idle
without a message, or on Ctrl-C. With --group the group's committed
positions are used and advanced.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			start, err := parseFrom(from, time.Now())
			if err != nil {
				return err
			}
			if count < 0 {
				return usageErr(fmt.Errorf("--count %d: must be >= 0", count))
			}
			if idle < 0 {
				return usageErr(fmt.Errorf("--idle %v: must be >= 0 (0: never stop)", idle))
			}
			reg, stopMetrics, err := serveMetrics(metricsAddr)
			if err != nil {
				return err
			}
			defer stopMetrics()
			cf.metrics = reg
			c, err := cf.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := cf.ctx()
			err = c.WaitTopic(ctx, args[0])
			cancel()
			if err != nil {
				return err
			}
			opts := []raidq.ConsumerOption{raidq.WithStart(start), raidq.WithPartitions(partitionsOrNil(cmd, partitions)...)}
			if err := setGroup(&opts, group, commitEvery, session); err != nil {
				return err
			}
			cons, err := c.Consumer(args[0], opts...)
			if err != nil {
				return err
			}
			sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			err = printMessages(sig, cmd, cons, count, idle, asJSON)
			// Close commits what was printed and leaves the group.
			if cerr := cons.Close(); err == nil {
				err = cerr
			}
			return err
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&from, "from", "latest", "where to start: earliest, latest, RFC 3339 time, or -DURATION (e.g. -5m)")
	f.StringVar(&metricsAddr, "metrics", "", "serve the consumer's Prometheus metrics (raidq_reader_*, raidq_consumer_lag_seconds) and /healthz on this address (host:port)")
	f.StringVar(&group, "group", "", "consumer group: share partitions with its other members and commit positions")
	f.IntVar(&count, "count", 0, "stop after this many messages (0: no limit)")
	f.DurationVar(&idle, "idle", 0, "stop after this long without a message (0: never)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per message: key, value, headers, partition, offset, index, stripe")
	f.IntSliceVar(&partitions, "partition", nil, "read only these partitions (default all)")
	f.DurationVar(&commitEvery, "commit-interval", time.Second, "with --group: commit the printed messages' positions this often (and on exit)")
	f.DurationVar(&session, "session-timeout", 0, "with --group: how long the others wait for this member's heartbeat before taking its partitions (default 15s)")
	return cmd
}

func partitionsOrNil(cmd *cobra.Command, ps []int) []int {
	if !cmd.Flags().Changed("partition") {
		return nil
	}
	return ps
}

// parseFrom turns --from into a start time.
func parseFrom(s string, now time.Time) (time.Time, error) {
	switch s {
	case "earliest":
		return time.Unix(0, 1), nil
	case "latest", "now", "":
		return now, nil
	}
	if strings.HasPrefix(s, "-") {
		d, err := time.ParseDuration(s[1:])
		if err == nil && d >= 0 {
			return now.Add(-d), nil
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if ns, err := strconv.ParseUint(s, 10, 64); err == nil {
		return time.Unix(0, int64(ns)), nil
	}
	return time.Time{}, usageErr(fmt.Errorf("--from %q: want earliest, latest, an RFC 3339 time, an offset in ns, or -DURATION like -5m", s))
}

type consumed struct {
	Key       string            `json:"key,omitempty"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers,omitempty"`
	Partition int               `json:"partition"`
	Offset    uint64            `json:"offset"`
	Index     uint32            `json:"index"`
	Stripe    string            `json:"stripe"`
	Late      bool              `json:"late,omitempty"`
}

// printMessages prints until count, idle, ctx or a fatal consumer error.
// Transient trouble (nodes, NATS servers, metadata) never ends it: the
// consumer rides through and logs it.
func printMessages(ctx context.Context, cmd *cobra.Command, cons *raidq.Consumer, count int, idle time.Duration, asJSON bool) error {
	out := cmd.OutOrStdout()
	enc := json.NewEncoder(out)
	for n := 0; count == 0 || n < count; n++ {
		wait, cancel := ctx, context.CancelFunc(func() {})
		if idle > 0 {
			wait, cancel = context.WithTimeout(ctx, idle)
		}
		m, err := cons.Next(wait)
		idled := idle > 0 && errors.Is(wait.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
		case idled, ctx.Err() != nil:
			return nil
		default:
			return err
		}
		if asJSON {
			c := consumed{Key: string(m.Key), Value: string(m.Value), Partition: m.Partition,
				Offset: m.Position.Offset, Index: m.Position.Index, Stripe: m.Stripe.String(), Late: m.Late}
			for _, h := range m.Headers {
				if c.Headers == nil {
					c.Headers = map[string]string{}
				}
				c.Headers[h.Name] = string(h.Value)
			}
			if err := enc.Encode(c); err != nil {
				return err
			}
		} else if _, err := fmt.Fprintf(out, "%s\n", m.Value); err != nil {
			return err
		}
	}
	return nil
}
