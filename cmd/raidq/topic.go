package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/bus/meta"
)

func topicCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "topic", Short: "Create, list, describe, alter and delete topics"}
	cmd.AddCommand(topicCreateCmd(), topicListCmd(), topicDescribeCmd(), topicDeleteCmd())
	cmd.AddCommand(topicAlterCmd(), topicAddPartitionsCmd()) // topic_alter.go
	return cmd
}

func topicCreateCmd() *cobra.Command {
	var cf clientFlags
	var tc raidq.TopicConfig
	d := raidq.DefaultParams()
	var parity int
	var latency string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic (ensembles are drawn from the live nodes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tc.Name = args[0]
			if err := applyProfile(cmd, &tc.Params, latency); err != nil {
				return err
			}
			tc.Params.N = tc.Params.K + parity
			if err := tc.Params.Validate(); err != nil {
				return err
			}
			c, err := cf.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := cf.ctx()
			defer cancel()
			info, err := c.CreateTopic(ctx, tc)
			if err != nil {
				return err
			}
			r := topicRecord(info)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created topic %s: %d partitions, %d+%d shards, commit at %d of %d, read delay %v, offset grid %s\n",
				r.Name, r.Partitions, r.K, r.N-r.K, r.W, r.N, time.Duration(r.ReadDelay), grid(r))
			return nil
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.IntVar(&tc.Partitions, "partitions", 1, "partitions")
	f.BoolVar(&asJSON, "json", false, "print the created topic record as JSON")
	f.StringVar(&latency, "latency", "default", "latency profile: default (A=D=250ms, delivery in about 300ms) or low "+
		"(A=D=20ms, delivery in tens of ms, more retries when a disk or producer stalls); --accept-window/--read-delay override it")
	f.IntVar(&tc.Params.K, "data-shards", d.K, "data shards k")
	f.IntVar(&parity, "parity-shards", d.N-d.K, "parity shards (n = k + parity)")
	f.IntVar(&tc.Params.W, "acks", d.W, "write quorum W: acks that commit (must be > n/2 and >= k)")
	f.DurationVar(&tc.Params.ReadDelay, "read-delay", d.ReadDelay, "D: readers propose scans this far behind their clock (at least A)")
	f.DurationVar(&tc.Params.AcceptWindow, "accept-window", d.AcceptWindow, "A: nodes refuse offsets older than now-A")
	f.DurationVar(&tc.Params.FutureBound, "future-bound", d.FutureBound, "F: nodes refuse offsets newer than now+F")
	f.DurationVar(&tc.Params.MaxSkew, "max-skew", d.MaxSkew, "clock skew budgeted for (young nodes' birth margin)")
	f.DurationVar(&tc.Retention, "retention", 0, "drop data older than this (0: keep)")
	f.Int64Var(&tc.RetentionBytes, "retention-bytes", 0, "drop the oldest data beyond this many bytes per partition per node (0: no limit)")
	f.Uint64Var(&tc.Params.Grid, "offset-grid", d.Grid, "offset grid in ns, a power of two: stripe offsets are multiples of it and "+
		"a stripe holds at most this many records, so offset + record index is the Kafka offset (0: none; Kafka clients are not served). "+
		"Fixed at creation")
	return cmd
}

func topicListCmd() *cobra.Command {
	var cf clientFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List topics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := cf.ctx()
			defer cancel()
			infos, err := c.Topics(ctx)
			if err != nil {
				return err
			}
			ts := make([]meta.TopicRecord, len(infos))
			for i, t := range infos {
				ts[i] = topicRecord(t)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(ts)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tSHARDS\tACKS\tREAD DELAY\tOFFSET GRID\tRETENTION\tCREATED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%d\t%d+%d\t%d/%d\t%v\t%s\t%s\t%s\n", t.Name, t.Partitions, t.K, t.N-t.K, t.W, t.N,
					time.Duration(t.ReadDelay), grid(t), retention(t), time.Unix(0, int64(t.Created)).UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func retention(t meta.TopicRecord) string {
	var parts []string
	if t.Retention > 0 {
		parts = append(parts, time.Duration(t.Retention).String())
	}
	if t.RetentionBytes > 0 {
		parts = append(parts, fmt.Sprintf("%d bytes", t.RetentionBytes))
	}
	if len(parts) == 0 {
		return "forever"
	}
	return strings.Join(parts, ", ")
}

// grid shows a topic's offset grid (docs/design.md#kafka-offsets).
func grid(t meta.TopicRecord) string {
	if !t.Params().Gridded() {
		return "none"
	}
	return fmt.Sprintf("%d ns", t.Grid)
}

func topicDescribeCmd() *cobra.Command {
	var cf clientFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a topic's parameters and ensembles",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := cf.ctx()
			defer cancel()
			info, err := c.Topic(ctx, args[0])
			if err != nil {
				return err
			}
			t := topicRecord(info)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(t)
			}
			describe(cmd.OutOrStdout(), t)
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func describe(w io.Writer, t meta.TopicRecord) {
	fmt.Fprintf(w, "topic %s\n  partitions     %d\n  shards         %d data + %d parity (n=%d)\n  write quorum   %d of %d\n",
		t.Name, t.Partitions, t.K, t.N-t.K, t.N, t.W, t.N)
	fmt.Fprintf(w, "  read delay     %v\n  accept window  %v\n  future bound   %v\n  max skew       %v\n",
		time.Duration(t.ReadDelay), time.Duration(t.AcceptWindow), time.Duration(t.FutureBound), time.Duration(t.MaxSkew))
	if t.AcceptFrom != 0 {
		fmt.Fprintf(w, "  accept change  %v for offsets before %s; in force everywhere after %s\n", time.Duration(t.PrevAcceptWindow),
			time.Unix(0, int64(t.AcceptFrom)).UTC().Format(time.RFC3339), meta.SettleTime(t).UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "  offset grid    %s\n  retention      %s\n  created        %s\n",
		grid(t), retention(t), time.Unix(0, int64(t.Created)).UTC().Format(time.RFC3339Nano))
	for p, e := range t.Ensembles {
		fmt.Fprintf(w, "  partition %-4d %s\n", p, strings.Join(e, " "))
	}
}

func topicDeleteCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic (nodes stop accepting its writes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := cf.ctx()
			defer cancel()
			if err := c.DeleteTopic(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted topic %s\n", args[0])
			return nil
		},
	}
	cf.register(cmd)
	return cmd
}

// topicRecord is t in the metadata's own form, which the CLI prints (its
// --json output is the record as stored).
func topicRecord(t raidq.TopicInfo) meta.TopicRecord {
	p := t.Params
	r := meta.TopicRecord{Name: t.Name, Partitions: t.Partitions, N: p.N, K: p.K, W: p.W,
		ReadDelay: meta.Duration(p.ReadDelay), AcceptWindow: meta.Duration(p.AcceptWindow),
		FutureBound: meta.Duration(p.FutureBound), MaxSkew: meta.Duration(p.MaxSkew),
		Retention: meta.Duration(t.Retention), RetentionBytes: t.RetentionBytes, Ensembles: t.Ensembles,
		Created: uint64(t.Created.UnixNano()), Grid: p.Grid}
	if !t.AcceptFrom.IsZero() {
		r.PrevAcceptWindow, r.AcceptFrom = meta.Duration(t.PrevAcceptWindow), uint64(t.AcceptFrom.UnixNano())
	}
	return r
}

// applyProfile sets the timing parameters of the named latency profile
// where their flags were not given, so --latency low --accept-window 30ms
// means the low profile with a 30ms window. An --accept-window alone sets
// the read delay to match, and a --read-delay alone lowers the window to
// fit under it (D >= A; docs/design.md#the-read-frontier).
func applyProfile(cmd *cobra.Command, p *raidq.Params, name string) error {
	prof, err := raidq.ProfileParams(name)
	if err != nil {
		return err
	}
	set := cmd.Flags().Changed
	switch {
	case !set("accept-window") && !set("read-delay"):
		p.AcceptWindow, p.ReadDelay = prof.AcceptWindow, prof.ReadDelay
	case !set("accept-window"):
		p.AcceptWindow = min(prof.AcceptWindow, p.ReadDelay)
	case !set("read-delay"):
		p.ReadDelay = p.AcceptWindow
	}
	return nil
}
