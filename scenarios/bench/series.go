package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"text/tabwriter"
)

// Series is the same comparison run several times in one invocation
// (`raidq bench --repeat N`). On a machine whose speed drifts from one
// minute to the next (a shared VM), one run's ratio can be off by a
// quarter either way; the spread over runs, each taken raidq then
// JetStream back to back, is what to quote.
type Series struct {
	Runs []*Report `json:"runs"`
	// Ratio is, per field of Report.Ratio, its spread over the runs.
	Ratio map[string]Spread `json:"ratio"`
	// Read is, per read-side figure (Report.Read), its spread over the runs.
	Read map[string]Spread `json:"read,omitempty"`
}

// Spread is the median, minimum and maximum of one ratio over runs.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// RunSeries runs the comparison n times, each with fresh processes and
// data directories, and stops at the first error or when ctx ends.
func RunSeries(ctx context.Context, cfg Config, n int) (*Series, error) {
	if n < 1 {
		return nil, fmt.Errorf("--repeat %d: must be >= 1", n)
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	s := &Series{}
	for i := range n {
		c := cfg
		if cfg.Dir != "" {
			c.Dir = filepath.Join(cfg.Dir, fmt.Sprintf("run-%d", i+1))
		}
		cfg.logf("run %d of %d", i+1, n)
		r, err := Run(ctx, c)
		if err != nil {
			return s, fmt.Errorf("run %d of %d: %w", i+1, n, err)
		}
		s.Runs = append(s.Runs, r)
	}
	s.Ratio = spreads(s.Runs)
	s.Read = spreadsOf(s.Runs, func(r *Report) map[string]float64 { return r.Read })
	if len(s.Read) == 0 {
		s.Read = nil
	}
	return s, nil
}

// spreads gathers every ratio field over the runs.
func spreads(runs []*Report) map[string]Spread {
	return spreadsOf(runs, func(r *Report) map[string]float64 { return r.Ratio })
}

// spreadsOf gathers every field of the map get returns over the runs.
func spreadsOf(runs []*Report, get func(*Report) map[string]float64) map[string]Spread {
	vals := make(map[string][]float64)
	for _, r := range runs {
		for k, v := range get(r) {
			vals[k] = append(vals[k], v)
		}
	}
	out := make(map[string]Spread, len(vals))
	for k, v := range vals {
		slices.Sort(v)
		m := v[len(v)/2]
		if len(v)%2 == 0 {
			m = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		out[k] = Spread{Median: m, Min: v[0], Max: v[len(v)-1], N: len(v)}
	}
	return out
}

// readHeadlines are the read-side figures PrintSummary shows per run.
var readHeadlines = []string{"e2e_p99_ms", "e2e_sub_p99_ms", "js_e2e_p99_ms", "js_e2e_sub_p99_ms", "catchup_msgs_s",
	"catchup_ratio", "fanout_cpu_ratio_16", "fanout_consumer_cpu_ratio_16"}

// PrintSummary writes one line per run and the spread of every ratio.
func (s *Series) PrintSummary(w io.Writer) {
	for i, r := range s.Runs {
		line := fmt.Sprintf("run %d:", i+1)
		for _, res := range []*Result{r.Raidq, r.Kafka, r.JetStream} {
			if res != nil {
				line += fmt.Sprintf(" %s %.0f msgs/s p99 %.2f ms;", res.System, res.ThroughputMsgsS, res.AckP99Ms)
			}
		}
		if v, ok := r.Ratio["throughput_msgs_s"]; ok {
			line += fmt.Sprintf(" throughput ratio %.2fx", v)
		}
		if v, ok := r.Ratio["kafka_cpu_ratio"]; ok {
			line += fmt.Sprintf(" kafka CPU ratio %.2fx", v)
		}
		if v, ok := r.Ratio["slow_p99_vs_healthy"]; ok {
			line += fmt.Sprintf(" slow/healthy p99 %.2fx", v)
		}
		if v, ok := r.Ratio["healthy_p99_after_vs_before"]; ok {
			line += fmt.Sprintf(" (healthy after/before %.2fx)", v)
		}
		if c := r.DiskPaceMsgsS(); c > 0 {
			line += fmt.Sprintf(" (disk's pace for raidq %.0f msgs/s)", c)
		}
		for _, k := range readHeadlines {
			if v, ok := r.Read[k]; ok {
				line += fmt.Sprintf(" %s %.2f;", k, v)
			}
		}
		fmt.Fprintln(w, line)
	}
	printSpreads(w, "ratio over runs", "x", s.Ratio)
	printSpreads(w, "read-side figure over runs", "", s.Read)
}

// printSpreads writes one line per spread, sorted by name, each value
// followed by unit (nothing for no spreads).
func printSpreads(w io.Writer, head, unit string, sp map[string]Spread) {
	if len(sp) == 0 {
		return
	}
	keys := make([]string, 0, len(sp))
	for k := range sp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tmedian\tmin\tmax\truns\t\n", head)
	for _, k := range keys {
		v := sp[k]
		fmt.Fprintf(tw, "%s\t%.2f%s\t%.2f%s\t%.2f%s\t%d\t\n", k, v.Median, unit, v.Min, unit, v.Max, unit, v.N)
	}
	tw.Flush()
}
