package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raidq/raidq"
)

// alterFlags are `topic alter`'s flags; only those given change.
type alterFlags struct {
	retention, readDelay, accept time.Duration
	retentionBytes               int64
	latency                      string
	wait, asJSON                 bool
}

func topicAlterCmd() *cobra.Command {
	var cf clientFlags
	var af alterFlags
	cmd := &cobra.Command{
		Use:   "alter NAME",
		Short: "Change a topic's retention, read delay, accept window or latency profile",
		Long: "Change a topic. Retention changes at once. The accept window A changes by offset, " +
			raidq.AlterLead.String() + " ahead, so every node switches at the same place, and one change must be in force " +
			"before the next; the read delay D must stay at or above every A in force. Lowering both (e.g. --latency low) " +
			"therefore takes two steps, A first and D once A is in force, and alter does both, waiting in between (about " +
			raidq.AlterLead.String() + ") and printing each step on stderr. Ctrl-C during the wait keeps the first step, which is consistent on " +
			"its own (D still covers every A), and prints the command that finishes the change; --wait=false sends one " +
			"change only, refused when D must wait.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ch, err := af.change(cmd)
			if err != nil {
				return err
			}
			c, err := cf.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			return runAlter(ctx, cmd, &cf, c, args[0], ch, af)
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.Var(retentionFlag{&af.retention}, "retention", retentionHelp)
	f.Int64Var(&af.retentionBytes, "retention-bytes", 0, "drop the oldest data beyond this many bytes per partition per node (0: no limit)")
	f.DurationVar(&af.readDelay, "read-delay", 0, "D: readers propose scans this far behind their clock (at least every accept window in force)")
	f.DurationVar(&af.accept, "accept-window", 0, "A: nodes refuse offsets older than now-A (takes effect "+raidq.AlterLead.String()+" ahead)")
	f.StringVar(&af.latency, "latency", "", "latency profile to switch to: default or low (sets A and D unless given)")
	f.BoolVar(&af.wait, "wait", true, "when D must wait for a lower A to be in force, apply A, wait, then apply D (false: one change, refused then)")
	f.BoolVar(&af.asJSON, "json", false, "print the resulting topic record as JSON")
	return cmd
}

// change turns the flags given into a TopicChange.
func (af alterFlags) change(cmd *cobra.Command) (raidq.TopicChange, error) {
	var ch raidq.TopicChange
	set := cmd.Flags().Changed
	if af.latency != "" {
		prof, err := raidq.ProfileParams(af.latency)
		if err != nil {
			return ch, usageErr(err)
		}
		if !set("accept-window") {
			af.accept = prof.AcceptWindow
		}
		if !set("read-delay") {
			af.readDelay = prof.ReadDelay
		}
		ch.AcceptWindow, ch.ReadDelay = &af.accept, &af.readDelay
	}
	if set("accept-window") {
		ch.AcceptWindow = &af.accept
	}
	if set("read-delay") {
		ch.ReadDelay = &af.readDelay
	}
	if set("retention") {
		if af.retention < 0 {
			return ch, usageErr(fmt.Errorf("--retention %v: must not be negative", af.retention))
		}
		ch.Retention = &af.retention
	}
	if set("retention-bytes") {
		if af.retentionBytes < 0 {
			return ch, usageErr(fmt.Errorf("--retention-bytes %d: must not be negative", af.retentionBytes))
		}
		ch.RetentionBytes = &af.retentionBytes
	}
	if ch == (raidq.TopicChange{}) {
		return ch, usageErr(errors.New("nothing to change: give --retention, --retention-bytes, --read-delay, --accept-window or --latency"))
	}
	return ch, nil
}

// runAlter applies ch. A read delay that must wait for a lower accept
// window (ErrAlterOrder) is applied in a second change once the first is
// in force, unless --wait=false; ctx ending (Ctrl-C) during the wait
// leaves the first change, which is consistent on its own.
func runAlter(ctx context.Context, cmd *cobra.Command, cf *clientFlags, c *raidq.Client, name string, ch raidq.TopicChange, af alterFlags) error {
	rctx, cancel := cf.ctx()
	info, err := c.AlterTopic(rctx, name, ch)
	cancel()
	if errors.Is(err, raidq.ErrAlterOrder) && af.wait && ch.AcceptWindow != nil && ch.ReadDelay != nil {
		first := ch
		first.ReadDelay = nil
		fmt.Fprintf(cmd.ErrOrStderr(), "step 1 of 2: the accept window first (the read delay %v must wait until it is in force)\n", *ch.ReadDelay)
		rctx, cancel = cf.ctx()
		info, err = c.AlterTopic(rctx, name, first)
		cancel()
		if err == nil {
			printAlter(cmd.ErrOrStderr(), info, false) // the first step, as progress
			info, err = alterAfterSettle(ctx, cmd, cf, c, name, info, raidq.TopicChange{ReadDelay: ch.ReadDelay})
		}
	}
	if err != nil {
		return err
	}
	printAlter(cmd.OutOrStdout(), info, af.asJSON)
	return nil
}

// alterAfterSettle waits until info's accept-window change is in force on
// every node, then applies ch (the second step). When ctx ends first, the
// first step stands and the error says how to finish.
func alterAfterSettle(ctx context.Context, cmd *cobra.Command, cf *clientFlags, c *raidq.Client, name string, info raidq.TopicInfo, ch raidq.TopicChange) (raidq.TopicInfo, error) {
	wait := time.Until(info.AcceptSettles) + 100*time.Millisecond
	fmt.Fprintf(cmd.ErrOrStderr(), "step 2 of 2: waiting %v until the accept window %v is in force everywhere, then setting the read delay to %v "+
		"(Ctrl-C keeps step 1, which is consistent: the read delay stays %v)\n",
		wait.Round(time.Millisecond), info.Params.AcceptWindow, *ch.ReadDelay, info.Params.ReadDelay)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		after := info.AcceptSettles.Truncate(time.Second).Add(time.Second) // whole seconds, rounded up
		return info, fmt.Errorf("interrupted before step 2: step 1 stands and is consistent (accept window %v, read delay %v, delivery as before); "+
			"finish after %s with: raidq topic alter %s --read-delay %v", info.Params.AcceptWindow, info.Params.ReadDelay,
			after.UTC().Format(time.RFC3339), name, *ch.ReadDelay)
	}
	rctx, cancel := cf.ctx()
	defer cancel()
	return c.AlterTopic(rctx, name, ch)
}

func printAlter(w io.Writer, t raidq.TopicInfo, asJSON bool) {
	if asJSON {
		_ = json.NewEncoder(w).Encode(topicRecord(t))
		return
	}
	p := t.Params
	fmt.Fprintf(w, "altered topic %s: read delay %v, accept window %v", t.Name, p.ReadDelay, p.AcceptWindow)
	if !t.AcceptFrom.IsZero() {
		fmt.Fprintf(w, " for offsets from %s (%v before; in force everywhere after %s)", t.AcceptFrom.UTC().Format(time.RFC3339),
			t.PrevAcceptWindow, t.AcceptSettles.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, ", retention %s\n", retention(topicRecord(t)))
}

func topicAddPartitionsCmd() *cobra.Command {
	var cf clientFlags
	var count int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "add-partitions NAME --count N",
		Short: "Raise a topic's partition count to N (new partitions go to the live nodes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return usageErr(fmt.Errorf("--count %d: give the new partition count", count))
			}
			c, err := cf.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := cf.ctx()
			defer cancel()
			before, err := c.Topic(ctx, args[0])
			if err != nil {
				return err
			}
			info, err := c.AddPartitions(ctx, args[0], count)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: keyed messages map to partitions by the partition count: from now on a key may go "+
				"to a different partition than its earlier messages, so order per key is not kept across this change.\n")
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(topicRecord(info))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "topic %s: %d partitions (was %d)\n", info.Name, info.Partitions, before.Partitions)
			for p := before.Partitions; p < info.Partitions; p++ {
				fmt.Fprintf(cmd.OutOrStdout(), "  partition %-4d %s\n", p, strings.Join(info.Ensembles[p], " "))
			}
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().IntVar(&count, "count", 0, "the new partition count (more than now)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the resulting topic record as JSON")
	return cmd
}
