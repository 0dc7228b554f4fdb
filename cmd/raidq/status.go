package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/bus"
)

// statusFlags are the flags of `raidq status`.
type statusFlags struct {
	url, creds, cluster string
	timeout             time.Duration
	asJSON              bool
	auth                clientAuthFlags // security_flags.go
}

func statusCmd() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the nodes of a cluster: health, clock skew, disk, load, write counters",
		Long: `status finds the cluster's nodes through their NATS micro service
($SRV.PING.raidq-node, every answer within --timeout) and asks each one for
its status. For each node it prints its health (ok, slow reply, no answer,
store failed), its raidq version, its clock skew against this machine (corrected by half the
round trip), its disk use, slot owners alive, requests pending, and its
write counters since it started. When the nodes that answered run
different raidq versions (a rolling upgrade half done), a WARNING line
after the table names them (--json: versions and version_warning).

It exits non-zero when NATS cannot be reached, when no node answers, or
when a node that was found does not answer its status or reports a failed
store.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return showStatus(cmd, &f)
		},
	}
	f.register(cmd)
	return cmd
}

// register defines the status flags on cmd.
func (s *statusFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.url, "nats", defaultNATSURL(), natsFlagHelp)
	f.StringVar(&s.creds, "creds", defaultCreds(), credsFlagHelp)
	f.StringVar(&s.cluster, "cluster", envOr("RAIDQ_CLUSTER", "raidq"), "raidq cluster name (env RAIDQ_CLUSTER)")
	f.DurationVar(&s.timeout, "timeout", 2*time.Second, "how long to listen for nodes and their answers")
	s.auth.register(f)
	f.BoolVar(&s.asJSON, "json", false, "print one JSON object: cluster, nats, checked, nodes (each node's full status)")
}

// showStatus is `raidq status`: it asks every node for its status and
// prints them. It returns errFailed when a node did not answer or
// reports a failed store.
func showStatus(cmd *cobra.Command, f *statusFlags) error {
	if f.timeout <= 0 {
		return usageErr(fmt.Errorf("--timeout %v: must be positive", f.timeout))
	}
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt)
	defer stop()
	nc, err := f.connect(cmd)
	if err != nil {
		return err
	}
	defer nc.Close()
	nodes, err := actors.StatusWith(ctx, nc, f.cluster, actors.StatusOptions{Timeout: f.timeout})
	if errors.Is(err, actors.ErrNoNodes) {
		return fmt.Errorf("no raidq node answered on %s (cluster %s): is a node running?%w", f.url, f.cluster, silent{err})
	}
	if err != nil {
		return fmt.Errorf("status of cluster %s on %s: %w", f.cluster, f.url, err)
	}
	if err := f.print(cmd.OutOrStdout(), nodes); err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Health == bus.HealthNoAnswer || n.Health == bus.HealthFailed {
			if !f.asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "raidq: node %s: %s\n", n.Node, n.Health)
			}
			return errFailed
		}
	}
	return nil
}

// connect connects to NATS at --nats with the credentials given,
// reporting permission refusals on cmd's stderr.
func (f *statusFlags) connect(cmd *cobra.Command) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("raidq-status"), nats.Timeout(f.timeout)}
	aopts, err := f.auth.natsOptions(f.creds)
	if err != nil {
		return nil, err
	}
	opts = append(opts, aopts...)
	opts = append(opts, newRefusalReporter(cmd.ErrOrStderr()).option())
	nc, err := nats.Connect(f.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w (is a raidq node or `raidq dev` running there?)", f.url, err)
	}
	return nc, nil
}

// print writes the nodes' status to w: the --json object or the table.
func (f *statusFlags) print(w io.Writer, nodes []bus.NodeStatus) error {
	versions, odd := nodeVersions(nodes)
	warning := versionWarning(versions)
	if !f.asJSON {
		printStatus(w, nodes, odd)
		if warning != "" {
			fmt.Fprintln(w, "WARNING:", warning)
		}
		return nil
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(statusReport{Cluster: f.cluster, NATS: f.url, Checked: time.Now().UTC(), Nodes: nodes,
		Versions: versions, VersionWarning: warning})
}

// statusReport is the --json output.
type statusReport struct {
	Cluster string           `json:"cluster"`
	NATS    string           `json:"nats"`
	Checked time.Time        `json:"checked"`
	Nodes   []bus.NodeStatus `json:"nodes"`
	// Versions maps each raidq version to the nodes that run it (nodes
	// that answered); VersionWarning is set when there is more than one.
	Versions       map[string][]string `json:"versions"`
	VersionWarning string              `json:"version_warning,omitempty"`
}

// silent wraps err for errors.Is without adding to the message.
type silent struct{ err error }

func (s silent) Error() string { return "" }
func (s silent) Unwrap() error { return s.err }

// printStatus writes the table; odd are the nodes whose version differs
// from most nodes' (nodeVersions).
func printStatus(w io.Writer, nodes []bus.NodeStatus, odd map[string]bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHEALTH\tVERSION\tRTT\tSKEW\tDISK\tOWNERS\tPENDING\tWRITES\tCONFLICTS\tSEALED\tREPAIRED\tBELOW_N\tNOTES")
	for _, n := range nodes {
		if n.Health == bus.HealthNoAnswer {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", n.Node, n.Health, n.Error)
			continue
		}
		var notes []string
		if odd[n.Node] {
			notes = append(notes, "version differs from the other nodes'")
		}
		if n.Failure != "" {
			notes = append(notes, "store failed: "+n.Failure)
		}
		if n.Instances > 1 {
			notes = append(notes, fmt.Sprintf("%d processes claim this node id", n.Instances))
		}
		if n.SlowMode > 0 {
			notes = append(notes, "slow mode "+n.SlowMode.String())
		}
		if n.NoSync {
			notes = append(notes, "no-fsync")
		}
		if n.Counters.StoreErrors > 0 {
			notes = append(notes, fmt.Sprintf("%d store errors", n.Counters.StoreErrors))
		}
		if n.Counters.RepairPending > 0 {
			notes = append(notes, fmt.Sprintf("repair: %d ranges pending", n.Counters.RepairPending))
		}
		if n.Counters.Holes > 0 {
			notes = append(notes, fmt.Sprintf("%d offsets unknown for good (see logs)", n.Counters.Holes))
		}
		if note := refusalNote(n.Counters); note != "" { // security_flags.go
			notes = append(notes, note)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", n.Node, n.Health, orDash(n.Version),
			fmtDuration(n.RTT), fmtSkew(n.Skew),
			fmtBytes(n.DiskBytes), n.Owners, n.Pending, n.Counters.Writes, n.Counters.Conflicts, n.Counters.Sealed,
			n.Counters.ShardsRepaired, n.Counters.StripesBelowN, strings.Join(notes, "; "))
	}
	_ = tw.Flush()
}

// nodeVersions maps each version to the nodes that report it, and
// returns the nodes off the most common version (ties: the greatest
// version string wins, so the odd ones are the older in a plain upgrade).
func nodeVersions(nodes []bus.NodeStatus) (map[string][]string, map[string]bool) {
	versions := map[string][]string{}
	for _, n := range nodes {
		if n.Health != bus.HealthNoAnswer && n.Version != "" {
			versions[n.Version] = append(versions[n.Version], n.Node)
		}
	}
	common := ""
	for v, ids := range versions {
		if common == "" || len(ids) > len(versions[common]) || len(ids) == len(versions[common]) && v > common {
			common = v
		}
	}
	odd := map[string]bool{}
	for v, ids := range versions {
		for _, id := range ids {
			odd[id] = v != common
		}
	}
	return versions, odd
}

// versionWarning says which nodes run which version, when they differ.
func versionWarning(versions map[string][]string) string {
	if len(versions) < 2 {
		return ""
	}
	vs := make([]string, 0, len(versions))
	for v := range versions {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v + " on " + strings.Join(versions[v], " ")
	}
	return "nodes run different raidq versions: " + strings.Join(parts, "; ") +
		" (finish or roll back the upgrade)"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fmtDuration rounds d for a table cell.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// fmtSkew is a signed duration: + means the node's clock is ahead of ours.
func fmtSkew(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDuration(-d)
	}
	return "+" + fmtDuration(d)
}

func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
