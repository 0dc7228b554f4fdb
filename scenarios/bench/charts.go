package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var systemColor = map[string]color.Color{
	"raidq":               color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"raidq-healthy":       color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"raidq-healthy-after": color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"jetstream":           color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"kafka":               color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
}

// WriteCharts writes PNG charts of the run to dir, each file name starting
// with prefix: <prefix>-latency.png (the ack latency distribution by
// percentile), <prefix>-timeline.png (every ack's latency over the run,
// kills marked) and <prefix>-throughput.png (acks per 100 ms over the
// run, kills marked). It returns the files written.
func (r *Report) WriteCharts(dir, prefix string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var results []*Result
	for _, res := range []*Result{r.RaidqHealthy, r.Raidq, r.RaidqHealthyAfter, r.Kafka, r.JetStream} {
		if res != nil && len(res.acks) > 0 {
			results = append(results, res)
		}
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("bench: no acknowledged messages to chart")
	}
	title := r.title()
	var files []string
	for _, c := range []struct {
		name string
		make func(string, []*Result) (*plot.Plot, error)
	}{
		{"latency", latencyChart},
		{"timeline", timelineChart},
		{"throughput", throughputChart},
	} {
		p, err := c.make(title, results)
		if err != nil {
			return files, err
		}
		f := filepath.Join(dir, prefix+"-"+c.name+".png")
		if err := p.Save(9*vg.Inch, 4.5*vg.Inch, f); err != nil {
			return files, fmt.Errorf("bench: chart %s: %w", f, err)
		}
		files = append(files, f)
	}
	return files, nil
}

func (r *Report) title() string {
	wl := r.Workload
	t := fmt.Sprintf("%d x %d B, %d publishers %s, fsync %v", wl.Messages, wl.Size, wl.Publishers, wl.Mode, wl.Fsync)
	if wl.Kill > 0 {
		t += fmt.Sprintf(", kill %d", wl.Kill)
	}
	if wl.Slow > 0 {
		t += fmt.Sprintf(", slow %d x %d ms", wl.Slow, wl.SlowMs)
	}
	return t
}

// nines maps a percentile to the x of the distribution chart: 50% -> 0.3,
// 90% -> 1, 99% -> 2, 99.9% -> 3.
func nines(q float64) float64 { return -math.Log10(1 - q/100) }

func latencyChart(title string, results []*Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "ack latency by percentile: " + title
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "ack latency (ms, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Tick.Marker = plot.ConstantTicks{{Value: nines(0), Label: "0"}, {Value: nines(50), Label: "50"},
		{Value: nines(90), Label: "90"}, {Value: nines(99), Label: "99"}, {Value: nines(99.9), Label: "99.9"},
		{Value: nines(99.99), Label: "99.99"}}
	p.Legend.Top, p.Legend.Left = true, true
	for _, res := range results {
		var pts plotter.XYs
		for q := 0.0; q < 99.995; {
			v := float64(res.hist.ValueAtQuantile(q)) / 1000
			pts = append(pts, plotter.XY{X: nines(q), Y: math.Max(v, 0.001)})
			// Denser towards the tail.
			q += math.Max(0.001, (100-q)/50)
		}
		pts = append(pts, plotter.XY{X: nines(99.99), Y: float64(res.hist.Max()) / 1000})
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = systemColor[res.System]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p50 %.2f, p99 %.2f, max %.1f ms)", res.System, res.AckP50Ms, res.AckP99Ms, res.AckMaxMs), l)
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

func timelineChart(title string, results []*Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "ack latency over the run: " + title
	p.X.Label.Text = "seconds since the workload started (time of the ack)"
	p.Y.Label.Text = "ack latency (ms, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	for _, res := range results {
		step := max(1, len(res.acks)/40000)
		pts := make(plotter.XYs, 0, len(res.acks)/step+1)
		for i := 0; i < len(res.acks); i += step {
			// Keep the worst latency of the thinned points.
			a := res.acks[i]
			for j := i + 1; j < min(i+step, len(res.acks)); j++ {
				if res.acks[j].Latency > a.Latency {
					a = res.acks[j]
				}
			}
			pts = append(pts, plotter.XY{X: a.At.Seconds(), Y: math.Max(float64(a.Latency.Microseconds())/1000, 0.001)})
		}
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: systemColor[res.System], Radius: vg.Points(0.8), Shape: draw.CircleGlyph{}}
		p.Add(s)
		p.Legend.Add(res.System, s)
	}
	if err := addKillLines(p, results); err != nil {
		return nil, err
	}
	return p, nil
}

func throughputChart(title string, results []*Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "acks per 100 ms: " + title
	p.X.Label.Text = "seconds since the workload started"
	p.Y.Label.Text = "acks per second (100 ms buckets)"
	p.Legend.Top = true
	const bucket = 100 * time.Millisecond
	for _, res := range results {
		last := res.acks[len(res.acks)-1].At
		counts := make([]int, int(last/bucket)+1)
		for _, a := range res.acks {
			counts[int(a.At/bucket)]++
		}
		pts := make(plotter.XYs, len(counts))
		for i, c := range counts {
			pts[i] = plotter.XY{X: (time.Duration(i) * bucket).Seconds(), Y: float64(c) * float64(time.Second/bucket)}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = systemColor[res.System]
		l.StepStyle = plotter.PostStep
		p.Add(l)
		p.Legend.Add(res.System, l)
	}
	p.Y.Min = 0
	if err := addKillLines(p, results); err != nil {
		return nil, err
	}
	return p, nil
}

// addKillLines marks the moment each result's nodes were killed with a
// dashed vertical line across the y range of every result on the plot
// (not just its own: one system's line would otherwise hide behind the
// other's points). Call it after all data is added.
func addKillLines(p *plot.Plot, results []*Result) error {
	lo, hi := p.Y.Min, p.Y.Max
	if _, ok := p.Y.Scale.(plot.LogScale); ok {
		lo, hi = latencyRange(results)
	}
	if hi <= lo {
		lo, hi = 0.001, 1
	}
	for _, res := range results {
		if res.KillAtMs <= 0 {
			continue
		}
		x := res.KillAtMs / 1000
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}})
		if err != nil {
			return err
		}
		l.Color = systemColor[res.System]
		l.Width = vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(res.System+" kill", l)
	}
	return nil
}

// latencyRange is the smallest and largest ack latency of all results, in
// ms (at least 0.001, as plotted on a log scale).
func latencyRange(results []*Result) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, res := range results {
		for _, a := range res.acks {
			v := math.Max(float64(a.Latency.Microseconds())/1000, 0.001)
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	return lo, hi
}
