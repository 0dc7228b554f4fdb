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

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/scenarios/drill"
)

// drillFlags are the flags of `raidq drill`.
type drillFlags struct {
	cfg                           drill.Config
	asJSON, verbose, list, docker bool
	seeds                         []uint
	dockerBinary                  string
}

func drillCmd() *cobra.Command {
	var f drillFlags
	cmd := &cobra.Command{
		Use:   "drill NAME... | all",
		Short: "Run failure drills against six `raidq node` processes and check that nothing acked is lost",
		Long: `drill starts six raidq node processes (this binary, or --binary), creates a
topic, runs --producers producers at --rate messages/s for --duration while
it injects the drill's faults, heals them, reads everything back and checks
the history: lost (acked, never delivered), unexpected (delivered, never
sent), duplicates, recovered (failed or unknown, delivered anyway),
reordered (per producer and partition) and in-doubt offsets. Two readers
run through the faults too: an in-process live reader and a live consumer
group of two ` + "`raidq consume --group`" + ` processes of this binary (each given
every node's URL), which must deliver every acked record without a member
process exiting by itself. It prints a
verdict table (--json: one object per drill) and exits non-zero, naming the
seed, when a drill fails. --out DIR writes the ack latency plot (PNG, faults
marked), the full history (JSONL) and the report (JSON).

Drills:
` + drillList() + `
"all" runs every drill in that order. The nodes run without authentication
on 127.0.0.1 (--insecure) and are stopped at the end.`,
		Example: `  raidq drill kill-2
  raidq drill slow-2 --seed 7 --duration 20s --json
  raidq drill all --out ./drills`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDrill(cmd, args, &f)
		},
	}
	f.register(cmd)
	return cmd
}

// register defines the drill flags on cmd.
func (d *drillFlags) register(cmd *cobra.Command) {
	cfg := &d.cfg
	f := cmd.Flags()
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed: which nodes get the faults, producer seeds, corrupted bytes")
	f.UintSliceVar(&d.seeds, "seeds", nil, "run every drill once per seed (e.g. 1,2,3); overrides --seed")
	f.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long the producers send (not given: 30s, hang 45s)")
	f.IntVar(&cfg.Rate, "rate", 1000, "messages per second over all producers")
	f.IntVar(&cfg.Producers, "producers", 4, "producers (each its own client; the conflict drill uses at least 16)")
	f.IntVar(&cfg.Size, "size", 256, "message size in bytes")
	f.IntVar(&cfg.Partitions, "partitions", 4, "partitions of the drill topic")
	f.StringVar(&cfg.Latency, "latency", "default", "latency profile of the drill topic: default or low (topic create --latency)")
	f.IntVar(&cfg.Window, "window", 512, "sends in flight per producer")
	f.StringVar(&cfg.Out, "out", "", "write <drill>-seed<N>.png (ack latency, faults marked), .jsonl (history) and .json here")
	f.StringVar(&cfg.Binary, "binary", "", "the raidq binary the nodes run (default: this one)")
	f.StringVar(&cfg.Dir, "dir", "", "data directory of the nodes (default: a temporary one, removed afterwards)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the temporary data directory")
	f.DurationVar(&cfg.Drain, "drain", 60*time.Second, "bound on reading everything back after the load")
	f.DurationVar(&cfg.RepairInterval, "repair-interval", 2*time.Second, "the nodes' --repair-interval (nodes default to 10s)")
	f.DurationVar(&cfg.RepairWait, "repair-wait", 90*time.Second, "bound on the wait for full redundancy after the read-back")
	f.BoolVar(&cfg.NoSync, "no-fsync", false, "run the nodes with --no-fsync")
	f.StringVar(&cfg.NodeLogLevel, "node-log-level", "warn", "the nodes' --log-level (their logs stay in memory; tails are shown on failures)")
	f.BoolVar(&d.docker, "docker", false, "run the nodes as containers built FROM scratch (needs a Docker engine; docs/drills.md)")
	f.StringVar(&d.dockerBinary, "docker-binary", "", "with --docker: a static (CGO_ENABLED=0) raidq binary for the image (default: build one with go)")
	f.BoolVar(&d.asJSON, "json", false, "print one JSON object per drill")
	f.BoolVarP(&d.verbose, "verbose", "v", false, "log the drill's faults and phases on stderr")
	f.BoolVar(&d.list, "list", false, "list the drills and exit")
}

// runDrill is `raidq drill`: it lists the drills, runs the security
// drill, or runs every drill named in args once per seed. It returns
// errFailed when a drill failed.
func runDrill(cmd *cobra.Command, args []string, f *drillFlags) error {
	if f.list {
		fmt.Fprint(cmd.OutOrStdout(), drillList())
		return nil
	}
	if len(args) == 1 && args[0] == "security" { // security.go: auth, permissions, TLS, hostile input
		o := securityDrillOptions{asJSON: f.asJSON, verbose: f.verbose}
		o.cfg.Dir = f.cfg.Dir
		return runSecurityDrill(cmd, o)
	}
	names, err := drillNames(args)
	if err != nil {
		return err
	}
	if err := f.complete(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var failures []string
	for _, seed := range f.seeds {
		for _, name := range names {
			failure, err := runOneDrill(ctx, cmd, f, name, seed)
			if err != nil {
				return err
			}
			if failure != "" {
				failures = append(failures, failure)
			}
		}
	}
	if len(failures) > 0 {
		if len(failures) > 1 {
			fmt.Fprintf(os.Stderr, "%d drills failed: %s\n", len(failures), strings.Join(failures, "; "))
		}
		return errFailed
	}
	return nil
}

// drillNames returns the drills args name ("all": every drill), or an
// error for none or an unknown one.
func drillNames(args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, usageErr(fmt.Errorf("name a drill (%s) or all", strings.Join(drill.Names(), ", ")))
	}
	names := args
	if len(args) == 1 && args[0] == "all" {
		names = drill.Names()
	}
	for _, n := range names {
		if drill.About(n) == "" {
			return nil, usageErr(fmt.Errorf("unknown drill %q (known: %s, all)", n, strings.Join(drill.Names(), ", ")))
		}
	}
	return names, nil
}

// complete fills in what the flags leave to defaults: the nodes' binary
// (this one), the Docker backend, the seeds (--seed) and the logger.
func (d *drillFlags) complete() error {
	if d.cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary to run the nodes (give --binary): %w", err)
		}
		d.cfg.Binary = exe
	}
	if d.docker {
		d.cfg.Docker = &drill.DockerConfig{Binary: d.dockerBinary}
	}
	if len(d.seeds) == 0 {
		d.seeds = []uint{uint(d.cfg.Seed)}
	}
	level := slog.LevelWarn
	if d.verbose {
		level = slog.LevelInfo
	}
	d.cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return nil
}

// runOneDrill runs drill name with seed and prints its report. It
// returns the failed drill's "name --seed N" ("" if it passed), or an
// error if it could not run.
func runOneDrill(ctx context.Context, cmd *cobra.Command, f *drillFlags, name string, seed uint) (string, error) {
	c := f.cfg
	if _, err := raidq.ProfileParams(c.Latency); err != nil {
		return "", usageErr(fmt.Errorf("--latency: %w", err))
	}
	c.Scenario, c.Seed = name, uint64(seed)
	if !cmd.Flags().Changed("duration") {
		c.Duration = drill.DefaultDuration(name)
	}
	if !f.asJSON && !f.verbose && isTerminal(os.Stderr) {
		c.Progress = drillProgress(name, c.Duration)
	}
	r, err := drill.Run(ctx, c)
	if c.Progress != nil {
		c.Progress(drill.Progress{Phase: "done"})
	}
	if err != nil {
		return "", fmt.Errorf("drill %s (seed %d): %w", name, seed, err)
	}
	if f.asJSON {
		if err := json.NewEncoder(cmd.OutOrStdout()).Encode(r); err != nil {
			return "", err
		}
	} else {
		printDrill(cmd.OutOrStdout(), r)
	}
	if r.OK {
		return "", nil
	}
	fmt.Fprintf(os.Stderr, "drill %s FAILED with seed %d: rerun with `raidq drill %s --seed %d --duration %s`\n",
		name, seed, name, seed, c.Duration)
	return fmt.Sprintf("%s --seed %d", name, seed), nil
}

func drillList() string {
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	for _, n := range drill.Names() {
		fmt.Fprintf(tw, "  %s\t%s\n", n, drill.About(n))
	}
	_ = tw.Flush()
	return sb.String()
}

// drillProgress draws a progress bar on stderr: the load by time, then
// the drain by records delivered.
func drillProgress(name string, d time.Duration) func(drill.Progress) {
	bar := progressbar.NewOptions64(d.Milliseconds(), progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(name+": starting"), progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(false))
	return func(p drill.Progress) {
		switch p.Phase {
		case "load":
			bar.Describe(fmt.Sprintf("%s: load, acked %d, failed %d, pending %d", name, p.Acked, p.Failed, p.Pending))
			_ = bar.Set64(min(p.Elapsed.Milliseconds(), d.Milliseconds()))
		case "draining", "group":
			what := "reading back"
			if p.Phase == "group" {
				what = "live group delivered"
			}
			bar.Describe(fmt.Sprintf("%s: %s %d/%d acked", name, what, p.Got, p.Expected))
			if p.Expected > 0 {
				_ = bar.Set64(d.Milliseconds() * int64(p.Got) / int64(p.Expected))
			}
		case "done":
			_ = bar.Finish()
			_ = bar.Clear()
		default:
			bar.Describe(name + ": " + p.Phase)
		}
	}
}

func shardsRow(m map[string]int) string {
	var parts []string
	for n := 6; n >= 0; n-- {
		if c := m[fmt.Sprint(n)]; c > 0 {
			parts = append(parts, fmt.Sprintf("%d: %d", n, c))
		}
	}
	return strings.Join(parts, ", ")
}

func liveRow(l *drill.LiveReport) string {
	if l == nil {
		return "-"
	}
	return fmt.Sprintf("%d / %d / %d (duplicates %d, reordered %d)", l.Delivered, l.Missing, l.InDoubt, l.Duplicates, l.Reordered)
}

// groupRow is the live group's delivered / missing / duplicates / exits.
func groupRow(g *drill.GroupReport) string {
	if g == nil {
		return "-"
	}
	return fmt.Sprintf("%d / %d / %d / %d (duplicate records %d, across members %d, unexpected %d, waited %.1fs)",
		g.Delivered, g.Missing, g.Duplicates, g.Exits, g.DuplicateRecords, g.AcrossMembers, g.Unexpected, g.WaitS)
}

// groupVerdict is the live group's part of the last line.
func groupVerdict(g *drill.GroupReport) string {
	if g == nil {
		return ""
	}
	return fmt.Sprintf("; live group: %d missing, %d duplicates, %d member exits", g.Missing, g.Duplicates, g.Exits)
}

func repairRow(r *drill.RepairReport) string {
	if r == nil {
		return "-"
	}
	s := fmt.Sprintf("%d / %d / %d", r.ShardsRepaired, r.StripesBelowN, r.Pending)
	if r.Done {
		s += fmt.Sprintf(", full redundancy %.1fs after the last heal (t=%.1fs)", r.AfterHealS, r.DoneS)
	} else {
		s += ", NOT done: " + r.Detail
	}
	if r.Holes > 0 {
		s += fmt.Sprintf(", %d holes", r.Holes)
	}
	return s
}

// printDrill writes a drill's report: its events, the table, the
// samples, notes, lost records and checks, then the verdict line.
func printDrill(w io.Writer, r *drill.Report) {
	if r.Skipped != "" {
		fmt.Fprintf(w, "SKIPPED: drill %s, seed %d: %s\n\n", r.Scenario, r.Seed, r.Skipped)
		return
	}
	fmt.Fprintf(w, "drill %s, seed %d, %s backend, nodes %s", r.Scenario, r.Seed, r.Backend, strings.Join(r.Nodes, " "))
	if len(r.Faulted) > 0 {
		fmt.Fprintf(w, ", faults on %s", strings.Join(r.Faulted, " "))
	}
	fmt.Fprintln(w)
	for _, e := range r.Events {
		fmt.Fprintf(w, "  %7.2fs  %-5s  %s\n", e.T, e.Kind, e.What)
	}
	printDrillTable(w, r)
	printDrillSamples(w, r)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	printLostRecords(w, r.LostRecords)
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s  %s", mark, c.Name)
		if c.Detail != "" {
			fmt.Fprintf(w, " (%s)", c.Detail)
		}
		fmt.Fprintln(w)
	}
	for _, f := range r.Files {
		fmt.Fprintf(w, "  wrote %s\n", f)
	}
	if r.OK {
		fmt.Fprintf(w, "OK: drill %s, seed %d: nothing acknowledged was lost%s\n\n", r.Scenario, r.Seed, groupVerdict(r.Group))
	} else {
		fmt.Fprintf(w, "FAILED: drill %s, seed %d%s\n\n", r.Scenario, r.Seed, groupVerdict(r.Group))
	}
}

// printDrillTable writes the aligned table of the drill's counts,
// latencies and phases.
func printDrillTable(w io.Writer, r *drill.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rows := [][2]string{
		{"load", fmt.Sprintf("%.0fs at %d msgs/s from %d producers", r.DurationS, r.Rate, r.Producers)},
		{"attempted / acked", fmt.Sprintf("%d / %d", r.Attempted, r.Acked)},
		{"failed / unknown sends", fmt.Sprintf("%d / %d", r.FailedSends, r.Unknown)},
		{"delivered", fmt.Sprint(r.Delivered)},
		{"lost (acked, never delivered)", fmt.Sprint(r.Lost)},
		{"unexpected (never sent)", fmt.Sprint(r.Unexpected)},
		{"duplicates", fmt.Sprint(r.Duplicates)},
		{"recovered (failed/unknown, delivered)", fmt.Sprint(r.Recovered)},
		{"reordered (per producer+partition)", fmt.Sprint(r.Reordered)},
		{"in doubt (reader reports)", fmt.Sprint(r.InDoubt)},
		{"live reader: delivered / missing / in doubt", liveRow(r.Live)},
		{"live group: delivered / missing / duplicates / exits", groupRow(r.Group)},
		{"ack latency p50/p99/p99.9/max", fmt.Sprintf("%.1f / %.1f / %.1f / %.1f ms", r.AckP50Ms, r.AckP99Ms, r.AckP999Ms, r.AckMaxMs)},
		{"longest gap between acks", fmt.Sprintf("%.0f ms", r.LongestAckGapMs)},
		{"conflicts / retries / rewrites", fmt.Sprintf("%d / %d / %d", r.Conflicts, r.Retries, r.Rewrites)},
		{"drain", fmt.Sprintf("%.1fs", r.DrainS)},
		{"machine load average (start, end)", fmt.Sprint(r.LoadAvg)},
		{"acked stripes by shards on disk at the end", shardsRow(r.ShardsAtEnd)},
		{"repair: shards rebuilt / below n / pending", repairRow(r.Repair)},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[1])
	}
	for _, ph := range r.Phases {
		fmt.Fprintf(tw, "  %s\t%s\n", fmt.Sprintf("phase %s (%.1f-%.1fs): p50/p99/gap", ph.Name, ph.FromS, ph.ToS),
			fmt.Sprintf("%.1f / %.1f / %.0f ms (%d acked)", ph.AckP50Ms, ph.AckP99Ms, ph.LongestAckGapMs, ph.Acked))
	}
	_ = tw.Flush()
}

// printDrillSamples writes the send errors and the live reader's and
// live group's samples (missing records, duplicates, exits, stderr).
func printDrillSamples(w io.Writer, r *drill.Report) {
	if len(r.Errors) > 0 {
		var es []string
		for k, v := range r.Errors {
			es = append(es, fmt.Sprintf("%s=%d", k, v))
		}
		fmt.Fprintf(w, "  send errors: %s\n  most frequent: %s\n", strings.Join(es, " "), r.FirstError)
	}
	if r.Live != nil {
		for _, m := range r.Live.MissingSamples {
			fmt.Fprintf(w, "  LIVE MISSING %s\n", m)
		}
	}
	g := r.Group
	if g == nil {
		return
	}
	fmt.Fprintf(w, "  live group %s: %s\n", g.Group, strings.Join(g.Members, ", "))
	for _, m := range g.MissingSamples {
		fmt.Fprintf(w, "  GROUP MISSING %s\n", m)
	}
	for _, x := range g.DuplicateSamples {
		fmt.Fprintf(w, "  group duplicate %s\n", x)
	}
	for _, x := range g.ExitSamples {
		fmt.Fprintf(w, "  GROUP EXIT %s\n", x)
	}
	for _, x := range g.StopFailures {
		fmt.Fprintf(w, "  GROUP STOP %s\n", x)
	}
	for _, t := range g.StderrTails {
		fmt.Fprintf(w, "  group member stderr, %s\n", strings.ReplaceAll(strings.TrimRight(t, "\n"), "\n", "\n        "))
	}
}

// printLostRecords writes every lost record analysed, with the shards
// found near it.
func printLostRecords(w io.Writer, lost []drill.LostRecord) {
	for _, lr := range lost {
		fmt.Fprintf(w, "  LOST %s partition %d offset %d index %d stripe %s (acked at %.2fs): %s\n",
			lr.ID, lr.Partition, lr.Offset, lr.Index, lr.Stripe, lr.AckedAtS, lr.Summary)
		for _, s := range lr.Shards {
			fmt.Fprintf(w, "        %s offset %d shard %d same_stripe=%v repair=%v %s %s\n", s.Node, s.Offset, s.Shard, s.Same,
				s.Repair, s.Stripe, s.Err)
		}
	}
}
