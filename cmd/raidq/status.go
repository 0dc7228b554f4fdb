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

	"github.com/raidq/raidq"
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
		Long: `status reads which nodes should be there (the member records and every
node named in a partition's ensemble) and asks each for its status; it
also finds nodes through their NATS micro service ($SRV.PING.raidq-node)
and lists those too. For each node it prints its health (ok, slow reply,
no answer, store failed, clock off), its raidq version, its clock skew
against this machine (corrected by half the round trip), its disk use,
slot owners alive, requests pending, and its write counters since it
started. A node leaves the expected set only through
` + "`raidq node --replace`" + `. When the nodes that answered run different raidq
versions (a rolling upgrade half done), a WARNING line after the table
names them (--json: versions and version_warning).

Exit codes: 0 every expected node serves; 1 some node is not serving (no
answer, store failed, clock off) or is degraded (disk past the watermark,
JetStream off) but every partition still has W nodes
serving; 3 a partition has fewer than W nodes serving (writes to it fail),
the metadata is unavailable (the rows are then only the nodes that
answered the ping), no node answers, or NATS cannot be reached; 4 the
user may not ask (status needs the admin role). --json has the same
facts: expected, missing, partitions_below_w, metadata.`,
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

// showStatus is `raidq status`: it reads which nodes should be there
// (member records and ensembles), asks every node for its status and
// prints them, silent expected nodes as "no answer" rows. The exit code
// (statusExit) says how bad it is: 1 nodes missing but every partition
// reaches W, 3 a partition cannot or the metadata is unavailable, 4 the
// user may not ask.
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
	refusals := make(chan error, 1)
	nc, err := f.connect(cmd, refusals)
	if err != nil {
		return err
	}
	defer nc.Close()
	exp := readExpected(ctx, nc, f.cluster, f.timeout)
	nodes, err := actors.StatusWith(ctx, nc, f.cluster, actors.StatusOptions{Timeout: f.timeout, Expect: exp.ids()})
	if refused := firstRefusal(refusals); refused != nil && !anyAnswered(nodes) {
		return refused // a *raidq.PermissionError: user, subject, the role it needs (exit 4)
	}
	if errors.Is(err, actors.ErrNoNodes) {
		if len(nodes) == 0 {
			return fmt.Errorf("no raidq node answered on %s (cluster %s): is a node running?%w", f.url, f.cluster, silent{err})
		}
		err = nil // every expected node is a "no answer" row: shown, and judged below
	}
	if err != nil {
		return fmt.Errorf("status of cluster %s on %s: %w", f.cluster, f.url, err)
	}
	nodes = addPeers(nodes, f.timeout)
	v := judge(nodes, exp.topics)
	if err := f.print(cmd.OutOrStdout(), nodes, exp, v); err != nil {
		return err
	}
	return f.exit(cmd.ErrOrStderr(), nodes, exp, v)
}

// exit explains on w what is wrong (not with --json: the object has it)
// and returns the error that picks status's exit code.
func (f *statusFlags) exit(w io.Writer, nodes []bus.NodeStatus, exp expectedSet, v statusVerdict) error {
	say := func(format string, args ...any) {
		if !f.asJSON {
			fmt.Fprintf(w, "raidq: "+format+"\n", args...)
		}
	}
	for _, n := range nodes {
		if n.Health != bus.HealthOK && n.Health != bus.HealthSlow {
			say("node %s: %s", n.Node, n.Health)
		}
	}
	switch {
	case exp.err != nil:
		say("metadata unavailable (%v): JetStream has no leader for it, or too many servers are down (it keeps up to 5 replicas); "+
			"the rows are the nodes that answered and those their ensembles name", exp.err)
		return &markedError{err: errFailed, mark: errUnreachable}
	case len(v.BelowW) > 0:
		for _, p := range v.BelowW {
			say("partition %s: writes fail until more of its nodes are back", p)
		}
		return &markedError{err: errFailed, mark: errUnreachable}
	case len(v.Missing) > 0:
		say("%d node(s) not serving (%s); every partition still reaches its write quorum", len(v.Missing),
			strings.Join(v.Missing, " "))
		return errFailed
	case len(v.Degraded) > 0:
		say("node(s) %s need attention (see NOTES)", strings.Join(v.Degraded, " "))
		return errFailed
	}
	return nil
}

// anyAnswered: some node answered its status request.
func anyAnswered(nodes []bus.NodeStatus) bool {
	for _, n := range nodes {
		if n.Health != bus.HealthNoAnswer {
			return true
		}
	}
	return false
}

// firstRefusal is the first permission refusal the connection reported,
// if any.
func firstRefusal(refusals <-chan error) error {
	select {
	case err := <-refusals:
		return err
	default:
		return nil
	}
}

// connect connects to NATS at --nats with the credentials given. The
// first permission refusal goes to refusals (status returns it when no
// node answered: the user may not ask); other connection errors are
// reported on cmd's stderr.
func (f *statusFlags) connect(cmd *cobra.Command, refusals chan<- error) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("raidq-status"), nats.Timeout(f.timeout)}
	aopts, err := f.auth.natsOptions(f.creds)
	if err != nil {
		return nil, err
	}
	opts = append(opts, aopts...)
	var report nats.Options // the reporter's handler, for the errors that are not refusals
	if err := newRefusalReporter(cmd.ErrOrStderr()).option()(&report); err != nil {
		return nil, err
	}
	opts = append(opts, nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		pe, ok := raidq.DescribeRefusal(f.cluster, nc, err)
		if !ok {
			report.AsyncErrorCB(nc, sub, err)
			return
		}
		select {
		case refusals <- pe:
		default:
		}
	}))
	nc, err := nats.Connect(f.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w (is a raidq node or `raidq dev` running there?)", f.url, err)
	}
	return nc, nil
}

// print writes the nodes' status to w: the --json object or the table.
func (f *statusFlags) print(w io.Writer, nodes []bus.NodeStatus, exp expectedSet, v statusVerdict) error {
	versions, odd := nodeVersions(nodes)
	warning := versionWarning(versions)
	if !f.asJSON {
		printStatus(w, nodes, odd)
		if warning != "" {
			fmt.Fprintln(w, "WARNING:", warning)
		}
		return nil
	}
	metadata := "ok"
	if exp.err != nil {
		metadata = "unavailable: " + exp.err.Error()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(statusReport{Cluster: f.cluster, NATS: f.url, Checked: time.Now().UTC(), Nodes: nodes,
		Versions: versions, VersionWarning: warning, Metadata: metadata, Expected: exp.ids(), statusVerdict: v})
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
	// Metadata is "ok", or "unavailable: why" (then Expected is empty and
	// Nodes are only those that answered the ping).
	Metadata string `json:"metadata"`
	// Expected are the nodes the metadata names (members and ensembles).
	Expected []string `json:"expected"`
	statusVerdict
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
		notes = append(notes, healthNotes(n)...)
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

func fmtBytes(n int64) string { return bus.FormatBytes(uint64(max(n, 0))) }

// healthNotes are the notes of a node's disk, store and JetStream.
func healthNotes(n bus.NodeStatus) []string {
	var notes []string
	if n.DiskFull != "" {
		notes = append(notes, n.DiskFull)
	}
	if n.JetStream != "" {
		notes = append(notes, "JetStream off: "+n.JetStream)
	}
	if n.Counters.StoreErrors > 0 {
		note := fmt.Sprintf("%d store errors", n.Counters.StoreErrors)
		if n.StoreLog != "" {
			note += " (last in the background: " + n.StoreLog + ")"
		}
		notes = append(notes, note)
	}
	return notes
}
