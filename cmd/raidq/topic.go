package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
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
			// Everything checkable here is checked before connecting: a
			// wrong parameter is a usage error (exit 2), not a refusal.
			if err := applyProfile(cmd, &tc.Params, latency); err != nil {
				return usageErr(fmt.Errorf("--latency: %w", err))
			}
			tc.Params.N = tc.Params.K + parity
			if err := raidq.ValidateParams(tc.Params); err != nil {
				return usageErr(err)
			}
			if tc.Partitions < 1 {
				return usageErr(fmt.Errorf("--partitions %d: must be at least 1", tc.Partitions))
			}
			if tc.Retention < 0 || tc.RetentionBytes < 0 {
				return usageErr(fmt.Errorf("--retention %v, --retention-bytes %d: must not be negative", tc.Retention, tc.RetentionBytes))
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
	f.Var(retentionFlag{&tc.Retention}, "retention", retentionHelp)
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
		parts = append(parts, retentionString(time.Duration(t.Retention)))
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

// retentionString shows whole days as days (7d, 9d), anything else as
// Go prints it (1h0m0s, 36h0m0s).
func retentionString(d time.Duration) string {
	if day := 24 * time.Hour; d > 0 && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}

// retentionFlag is a duration flag that also takes Kafka-style days and
// weeks: 7d, 2w, 1w2d, 1d12h, 36h, 90m (parseRetention).
type retentionFlag struct{ d *time.Duration }

func (r retentionFlag) String() string {
	if r.d == nil || *r.d == 0 {
		return "0" // pflag shows no default for "0"
	}
	return retentionString(*r.d)
}

func (r retentionFlag) Set(s string) error {
	d, err := parseRetention(s)
	if err != nil {
		return err
	}
	*r.d = d
	return nil
}

func (retentionFlag) Type() string { return "duration" }

// retentionHelp is --retention's help (topic create and topic alter).
const retentionHelp = "drop data older than this: 7d, 2w, 1w2d, 36h, 90m (d = 24h, w = 7d; 0: keep)"

// parseRetention parses a duration as time.ParseDuration does, also
// accepting the units d (24h) and w (7 days), alone or combined with the
// others: "7d", "1w2d", "1d12h30m". Days are 24 hours: retention counts
// elapsed time, not calendar days.
func parseRetention(s string) (time.Duration, error) {
	in := s
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if s == "" {
		return 0, fmt.Errorf("%q: want a duration such as 7d, 1w2d or 36h", in)
	}
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		j := i
		for j < len(s) && !(s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		num, unit := s[:i], s[i:j]
		s = s[j:]
		var d time.Duration
		switch unit {
		case "d", "w":
			days, err := strconv.ParseFloat(num, 64)
			if err != nil || num == "" {
				return 0, fmt.Errorf("%q: want a duration such as 7d, 1w2d or 36h", in)
			}
			if unit == "w" {
				days *= 7
			}
			h := days * float64(24*time.Hour)
			if h > float64(math.MaxInt64) {
				return 0, fmt.Errorf("%q: too long", in)
			}
			d = time.Duration(h)
		default:
			var err error
			if d, err = time.ParseDuration(num + unit); err != nil {
				return 0, fmt.Errorf("%q: want a duration such as 7d, 1w2d or 36h (units w, d, h, m, s, ms)", in)
			}
		}
		if total > math.MaxInt64-d {
			return 0, fmt.Errorf("%q: too long", in)
		}
		total += d
	}
	if neg {
		total = -total
	}
	return total, nil
}
