package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
				return fmt.Errorf("--count %d: must be >= 0", count)
			}
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
			opts := raidq.ConsumerOptions{From: start, Partitions: partitionsOrNil(cmd, partitions)}
			if err := setGroup(&opts, group); err != nil {
				return err
			}
			cons, err := c.Consumer(args[0], opts)
			if err != nil {
				return err
			}
			defer cons.Close()
			sig, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			return printMessages(sig, cmd, cons, count, idle, asJSON, group != "")
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&from, "from", "latest", "where to start: earliest, latest, RFC 3339 time, or -DURATION (e.g. -5m)")
	f.StringVar(&group, "group", "", "consumer group: share partitions with its other members and commit positions")
	f.IntVar(&count, "count", 0, "stop after this many messages (0: no limit)")
	f.DurationVar(&idle, "idle", 0, "stop after this long without a message (0: never)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per message: key, value, headers, partition, offset, index, stripe")
	f.IntSliceVar(&partitions, "partition", nil, "read only these partitions (default all)")
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
	return time.Time{}, fmt.Errorf("--from %q: want earliest, latest, an RFC 3339 time, an offset in ns, or -DURATION like -5m", s)
}

type consumed struct {
	Key       string            `json:"key,omitempty"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers,omitempty"`
	Partition int               `json:"partition"`
	Offset    uint64            `json:"offset"`
	Index     uint32            `json:"index"`
	Stripe    string            `json:"stripe"`
}

func printMessages(ctx context.Context, cmd *cobra.Command, cons *raidq.Consumer, count int, idle time.Duration, asJSON, commit bool) error {
	out := cmd.OutOrStdout()
	enc := json.NewEncoder(out)
	n := 0
	var idleC <-chan time.Time
	for count == 0 || n < count {
		if idle > 0 {
			idleC = time.After(idle)
		}
		select {
		case m, ok := <-cons.Messages():
			if !ok {
				return nil
			}
			n++
			if asJSON {
				c := consumed{Key: string(m.Key), Value: string(m.Value), Partition: m.Partition,
					Offset: m.Position.Offset, Index: m.Position.Index, Stripe: m.Stripe.String()}
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
			if commit {
				if err := commitMessage(ctx, cons, m); err != nil {
					return err
				}
			}
		case <-idleC:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}
