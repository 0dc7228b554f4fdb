package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/raidq/raidq"
)

// raidq group: list, describe, reset and delete consumer groups (the Go
// API is Client.Groups, DescribeGroup, ResetGroup and DeleteGroup;
// docs/consumers.md). Liveness is judged by watching the members'
// heartbeat records for --watch, so every subcommand takes that long.

func groupCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "group", Short: "List, describe, reset and delete consumer groups"}
	cmd.AddCommand(groupListCmd(), groupDescribeCmd(), groupResetCmd(), groupDeleteCmd())
	return cmd
}

// groupFlags are the flags every group subcommand takes.
type groupFlags struct {
	cf     clientFlags
	watch  time.Duration
	asJSON bool
}

func (f *groupFlags) register(cmd *cobra.Command) {
	f.cf.register(cmd)
	cmd.Flags().DurationVar(&f.watch, "watch", raidq.DefaultHeartbeatWatch,
		"watch the members' heartbeats this long: a member is live if its heartbeat record changed meanwhile "+
			"(0: do not watch, every member with a record counts as live)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
}

// run connects and calls fn with a context bounded by --timeout plus the watch.
func (f *groupFlags) run(fn func(c *raidq.Client, ctx context.Context) error) error {
	c, err := f.cf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), f.cf.timeout+2*f.watch)
	defer cancel()
	return fn(c, ctx)
}

// adminErr marks the library's group refusals for the exit code (4; a
// bad --to is a usage error, 2).
func adminErr(err error) error {
	switch {
	case errors.Is(err, raidq.ErrBadReset):
		return usageErr(err)
	case errors.Is(err, raidq.ErrGroupLive):
		return &markedError{err: err, mark: errRefused}
	}
	return err
}

func groupListCmd() *cobra.Command {
	var f groupFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List consumer groups (native and Kafka clients'), their topics and live members",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(func(c *raidq.Client, ctx context.Context) error {
				gs, err := c.Groups(ctx, raidq.WithHeartbeatWatch(f.watch))
				if err != nil {
					return err
				}
				if f.asJSON {
					return writeJSON(cmd.OutOrStdout(), groupsJSON(gs))
				}
				printGroups(cmd.OutOrStdout(), gs)
				return nil
			})
		},
	}
	f.register(cmd)
	return cmd
}

func printGroups(w io.Writer, gs []raidq.GroupInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTYPE\tSTATE\tMEMBERS\tTOPICS")
	for _, g := range gs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", g.Name, groupType(g), g.State, g.LiveMembers, dash(strings.Join(g.Topics, ",")))
	}
	_ = tw.Flush()
}

func groupType(g raidq.GroupInfo) string {
	if g.Kafka {
		return "kafka"
	}
	return "native"
}

func groupDescribeCmd() *cobra.Command {
	var f groupFlags
	var topic string
	var scanLimit int
	var scanTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "describe GROUP",
		Short: "Show a group's members and each partition's position, owner and lag",
		Long: `Show a group's members and, for each partition of its topics, the committed
position (as time, as offset/index and as Kafka offset on a gridded topic),
its owner (the member its position record names: the one holding it) and
the lag behind the readable frontier (now minus the topic's read delay).

LAG is the age of the oldest unread record relative to the frontier when
the scan found one, 0 when the scan reached the frontier and found none,
else the frontier minus the position (an upper bound). LAG-RECORDS counts
the unread records by reading the partition (--scan-limit, --scan-timeout);
">=N" means the scan stopped at its limit, "-" that nothing was counted
(--scan-limit 0, no position, or the scan could not read). Positions are
time, so records cannot be counted from offsets alone, not even Kafka
offsets: they have gaps.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(func(c *raidq.Client, ctx context.Context) error {
				opts := []raidq.GroupAdminOption{raidq.WithHeartbeatWatch(f.watch), raidq.WithLagScan(scanLimit, scanTimeout)}
				if topic != "" {
					opts = append(opts, raidq.WithGroupTopic(topic))
				}
				d, err := c.DescribeGroup(ctx, args[0], opts...)
				if err != nil {
					return adminErr(err)
				}
				if f.asJSON {
					return writeJSON(cmd.OutOrStdout(), describeJSON(d))
				}
				printDescribe(cmd.OutOrStdout(), d)
				return nil
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&topic, "topic", "", "only this topic of the group")
	cmd.Flags().IntVar(&scanLimit, "scan-limit", 10000, "count unread records per partition up to this many (0: do not count)")
	cmd.Flags().DurationVar(&scanTimeout, "scan-timeout", 3*time.Second, "give each partition's count this long")
	return cmd
}

func printDescribe(w io.Writer, d raidq.GroupDescription) {
	fmt.Fprintf(w, "group %s (%s, %s, %d live members)\n\n", d.Name, groupType(d.GroupInfo), d.State, d.LiveMembers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tTOPIC\tLIVE\tSESSION\tCLIENT")
	for _, m := range d.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", m.ID, dash(m.Topic), yesNo(m.Live), m.Session, dash(strings.TrimSpace(m.ClientID+" "+m.ClientHost)))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tPOSITION TIME\tPOSITION\tKAFKA OFFSET\tOWNER\tLAG\tLAG RECORDS")
	for _, p := range d.Partitions {
		owner := dash(p.Owner)
		if p.Owner != "" && !p.OwnerLive {
			owner += " (not live)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, posTime(p.Committed, p.Position),
			posText(p.Committed, p.Position), kafkaText(p.KafkaOffset), owner, lagText(p.Lag), recordsText(p.LagRecords, p.LagRecordsAtLeast))
	}
	_ = tw.Flush()
}

func groupResetCmd() *cobra.Command {
	var f groupFlags
	var r raidq.GroupReset
	var to string
	var force bool
	cmd := &cobra.Command{
		Use:   "reset GROUP --topic T --to earliest|latest|TIME|-DURATION",
		Short: "Move a group's positions in a topic (a dry run unless --execute)",
		Long: `Move a group's committed positions in one topic, as kafka-consumer-groups
--reset-offsets does: without --execute it only prints the new positions.

--to is earliest (the topic's creation or retention floor), latest (the
readable frontier, now minus the read delay), an RFC 3339 time or
-DURATION (e.g. -10m). It refuses while the topic has live members in the
group unless --force (their partitions are then fenced and re-read from
the new positions). Each position is written with a compare-and-set on the
revision read, so a commit made meanwhile is kept and reported. Kafka
clients' groups are reset with Kafka tools through a gateway.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := raidq.ParseResetTo(to)
			if err != nil {
				return usageErr(err)
			}
			r.To = target
			opts := []raidq.GroupAdminOption{raidq.WithHeartbeatWatch(f.watch)}
			if force {
				opts = append(opts, raidq.WithForce())
			}
			return f.run(func(c *raidq.Client, ctx context.Context) error {
				rs, err := c.ResetGroup(ctx, args[0], r, opts...)
				if rs != nil {
					printResets(cmd.OutOrStdout(), f.asJSON, args[0], r, rs)
				}
				return adminErr(err)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&r.Topic, "topic", "", "the topic whose positions move (required)")
	cmd.Flags().StringVar(&to, "to", "", "earliest, latest, an RFC 3339 time or -DURATION such as -10m (required)")
	cmd.Flags().IntSliceVar(&r.Partitions, "partition", nil, "only these partitions (repeat or comma-separate; default all)")
	cmd.Flags().BoolVar(&r.Execute, "execute", false, "write the new positions (without it: a dry run)")
	cmd.Flags().BoolVar(&force, "force", false, "reset even while the group has live members")
	_ = cmd.MarkFlagRequired("topic")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func printResets(w io.Writer, asJSON bool, group string, r raidq.GroupReset, rs []raidq.PartitionReset) {
	if asJSON {
		_ = writeJSON(w, resetJSON(group, r, rs))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT TIME\tCURRENT POSITION\tNEW TIME\tNEW POSITION\tNEW KAFKA OFFSET\tWRITTEN")
	for _, p := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, posTime(p.Committed, p.From), posText(p.Committed, p.From),
			posTime(true, p.To), posText(true, p.To), kafkaText(p.KafkaOffset), yesNo(p.Written))
	}
	_ = tw.Flush()
	if !r.Execute {
		fmt.Fprintf(w, "dry run: nothing written; add --execute to move group %s to %s\n", group, r.To)
	}
}

func groupDeleteCmd() *cobra.Command {
	var f groupFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "delete GROUP",
		Short: "Delete a group's positions and member records (refused while it has live members)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := []raidq.GroupAdminOption{raidq.WithHeartbeatWatch(f.watch)}
			if force {
				opts = append(opts, raidq.WithForce())
			}
			return f.run(func(c *raidq.Client, ctx context.Context) error {
				n, err := c.DeleteGroup(ctx, args[0], opts...)
				if err != nil {
					return adminErr(err)
				}
				if f.asJSON {
					return writeJSON(cmd.OutOrStdout(), map[string]any{"group": args[0], "deleted_records": n})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted group %s (%d records)\n", args[0], n)
				return nil
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "delete even while the group has live members (they write their records again)")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// dash is s, or "-" for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func posTime(ok bool, p raidq.Position) string {
	if !ok {
		return "-"
	}
	return p.Time().UTC().Format(time.RFC3339Nano)
}

func posText(ok bool, p raidq.Position) string {
	if !ok {
		return "-"
	}
	return p.String()
}

func kafkaText(o int64) string {
	if o < 0 {
		return "-"
	}
	return fmt.Sprint(o)
}

func lagText(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func recordsText(n int64, atLeast bool) string {
	switch {
	case n < 0:
		return "-"
	case atLeast:
		return fmt.Sprintf(">=%d", n)
	}
	return fmt.Sprint(n)
}

// The JSON shapes: times as RFC 3339 in UTC, positions as offset (unix
// ns) and index, durations in seconds; -1 or null where there is none.

type groupJSON struct {
	Name        string   `json:"name"`
	Type        string   `json:"type"`
	State       string   `json:"state"`
	LiveMembers int      `json:"live_members"`
	Topics      []string `json:"topics"`
}

type memberJSON struct {
	ID         string  `json:"id"`
	Topic      string  `json:"topic,omitempty"`
	Live       bool    `json:"live"`
	SessionSec float64 `json:"session_seconds"`
	ClientID   string  `json:"client_id,omitempty"`
	ClientHost string  `json:"client_host,omitempty"`
}

type positionJSON struct {
	Offset uint64 `json:"offset"`
	Index  uint32 `json:"index"`
	Time   string `json:"time"`
}

type partitionJSON struct {
	Topic          string        `json:"topic"`
	Partition      int           `json:"partition"`
	Position       *positionJSON `json:"position"`
	KafkaOffset    int64         `json:"kafka_offset"`
	Owner          string        `json:"owner,omitempty"`
	OwnerLive      bool          `json:"owner_live"`
	Head           string        `json:"head,omitempty"`
	LagSeconds     *float64      `json:"lag_seconds"`
	LagRecords     int64         `json:"lag_records"`
	RecordsAtLeast bool          `json:"lag_records_at_least,omitempty"`
}

type describeOut struct {
	groupJSON
	Members    []memberJSON    `json:"members"`
	Partitions []partitionJSON `json:"partitions"`
}

type resetPartJSON struct {
	Topic       string        `json:"topic"`
	Partition   int           `json:"partition"`
	Current     *positionJSON `json:"current"`
	New         *positionJSON `json:"new"`
	KafkaOffset int64         `json:"new_kafka_offset"`
	Written     bool          `json:"written"`
}

type resetOut struct {
	Group      string          `json:"group"`
	Topic      string          `json:"topic"`
	To         string          `json:"to"`
	Execute    bool            `json:"execute"`
	Partitions []resetPartJSON `json:"partitions"`
}

func toGroupJSON(g raidq.GroupInfo) groupJSON {
	topics := g.Topics
	if topics == nil {
		topics = []string{}
	}
	return groupJSON{Name: g.Name, Type: groupType(g), State: g.State, LiveMembers: g.LiveMembers, Topics: topics}
}

func groupsJSON(gs []raidq.GroupInfo) []groupJSON {
	out := make([]groupJSON, len(gs))
	for i, g := range gs {
		out[i] = toGroupJSON(g)
	}
	return out
}

func posJSON(ok bool, p raidq.Position) *positionJSON {
	if !ok {
		return nil
	}
	return &positionJSON{Offset: p.Offset, Index: p.Index, Time: posTime(true, p)}
}

func describeJSON(d raidq.GroupDescription) describeOut {
	out := describeOut{groupJSON: toGroupJSON(d.GroupInfo), Members: []memberJSON{}, Partitions: []partitionJSON{}}
	for _, m := range d.Members {
		out.Members = append(out.Members, memberJSON{ID: m.ID, Topic: m.Topic, Live: m.Live, SessionSec: m.Session.Seconds(),
			ClientID: m.ClientID, ClientHost: m.ClientHost})
	}
	for _, p := range d.Partitions {
		pj := partitionJSON{Topic: p.Topic, Partition: p.Partition, Position: posJSON(p.Committed, p.Position), KafkaOffset: p.KafkaOffset,
			Owner: p.Owner, OwnerLive: p.OwnerLive, LagRecords: p.LagRecords, RecordsAtLeast: p.LagRecordsAtLeast}
		if !p.Head.IsZero() {
			pj.Head = p.Head.UTC().Format(time.RFC3339Nano)
		}
		if p.Lag >= 0 {
			s := p.Lag.Seconds()
			pj.LagSeconds = &s
		}
		out.Partitions = append(out.Partitions, pj)
	}
	return out
}

func resetJSON(group string, r raidq.GroupReset, rs []raidq.PartitionReset) resetOut {
	out := resetOut{Group: group, Topic: r.Topic, To: r.To.String(), Execute: r.Execute, Partitions: []resetPartJSON{}}
	for _, p := range rs {
		out.Partitions = append(out.Partitions, resetPartJSON{Topic: p.Topic, Partition: p.Partition, Current: posJSON(p.Committed, p.From),
			New: posJSON(true, p.To), KafkaOffset: p.KafkaOffset, Written: p.Written})
	}
	return out
}
