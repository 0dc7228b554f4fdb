package drill

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// writeOut writes the --out files: the report (.json), the history
// (.jsonl) and the ack latency plot (.png).
func (r *run) writeOut(rep *Report, dels []delivery) ([]string, error) {
	if err := os.MkdirAll(r.cfg.Out, 0o755); err != nil {
		return nil, err
	}
	base := r.outBase()
	var files []string
	if err := r.writeHistory(base+".jsonl", rep, dels); err != nil {
		return files, err
	}
	files = append(files, base+".jsonl")
	if err := r.writePlot(base+".png", rep); err != nil {
		return files, err
	}
	files = append(files, base+".png")
	rep.Files = append(files, base+".json")
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return files, err
	}
	if err := os.WriteFile(base+".json", append(b, '\n'), 0o644); err != nil {
		return files, err
	}
	return append(files, base+".json"), nil
}

// histLine is one line of the history file.
type histLine struct {
	T       float64 `json:"t"` // seconds since the load started
	Ev      string  `json:"ev"`
	ID      string  `json:"id,omitempty"`
	Part    *int    `json:"part,omitempty"`
	Off     uint64  `json:"off,omitempty"`
	Idx     *int    `json:"idx,omitempty"`
	Stripe  string  `json:"stripe,omitempty"`
	LatMs   float64 `json:"lat_ms,omitempty"`
	Err     string  `json:"err,omitempty"`
	What    string  `json:"what,omitempty"`
	Unheard []int   `json:"unheard,omitempty"`
}

func intp(i int) *int { return &i }

// writeHistory writes every event in time order: sends, their outcomes
// (ack, fail, unknown), deliveries (the read-back's; group_deliver: the
// live group members', what = the member process), in-doubt reports and
// the drill's own events (faults, heals).
func (r *run) writeHistory(path string, rep *Report, dels []delivery) error {
	var lines []histLine
	secs := func(ns int64) float64 { return float64(ns) / 1e9 }
	for pi, p := range r.hist.prods {
		for seq, rec := range p.recs {
			id := fmt.Sprintf("p%d-%d", pi, seq)
			lines = append(lines, histLine{T: secs(rec.sent), Ev: "send", ID: id})
			switch rec.status {
			case statusAcked:
				lines = append(lines, histLine{T: secs(rec.done), Ev: "ack", ID: id, Part: intp(int(rec.part)), Off: rec.off,
					Idx: intp(int(rec.idx)), Stripe: rec.stripe, LatMs: float64(rec.done-rec.sent) / 1e6})
			case statusFailed:
				lines = append(lines, histLine{T: secs(rec.done), Ev: "fail", ID: id, Err: rec.errCls})
			default:
				lines = append(lines, histLine{T: secs(rec.done), Ev: "unknown", ID: id, Err: rec.errCls})
			}
		}
	}
	for _, d := range dels {
		id := d.raw
		if d.known {
			id = fmt.Sprintf("p%d-%d", d.prod, d.seq)
		}
		lines = append(lines, histLine{T: secs(d.at), Ev: "deliver", ID: id, Part: intp(d.part), Off: d.off, Idx: intp(d.idx), Stripe: d.stripe})
	}
	for _, d := range r.groupDels {
		id := d.raw
		if d.known {
			id = fmt.Sprintf("p%d-%d", d.prod, d.seq)
		}
		lines = append(lines, histLine{T: secs(d.at), Ev: "group_deliver", ID: id, Part: intp(d.part), Off: d.off, Idx: intp(d.idx),
			Stripe: d.stripe, What: d.member})
	}
	r.hist.mu.Lock()
	for _, d := range r.hist.inDoubts {
		lines = append(lines, histLine{T: secs(d.at), Ev: "in_doubt", Part: intp(d.part), Off: d.off, Stripe: d.stripe, Unheard: d.unheard})
	}
	r.hist.mu.Unlock()
	for _, d := range r.liveInDoubts {
		lines = append(lines, histLine{T: secs(d.at), Ev: "live_in_doubt", Part: intp(d.part), Off: d.off, Stripe: d.stripe, Unheard: d.unheard})
	}
	for _, e := range rep.Events {
		lines = append(lines, histLine{T: e.T, Ev: e.Kind, What: e.What})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].T < lines[j].T })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range lines {
		if err := enc.Encode(&lines[i]); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writePlot draws every ack's latency at the time it was sent, failed
// sends at the bottom, and the faults as vertical lines with labels.
func (r *run) writePlot(path string, rep *Report) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("raidq drill %s, seed %d: ack latency (p50 %.1f ms, p99 %.1f ms, longest ack gap %.0f ms)",
		rep.Scenario, rep.Seed, rep.AckP50Ms, rep.AckP99Ms, rep.LongestAckGapMs)
	p.X.Label.Text = "seconds since the load started (time of the send)"
	p.Y.Label.Text = "ack latency (ms)"
	acks, fails, ymax := r.latencyPoints()
	if err := addScatter(p, acks, draw.CircleGlyph{}, 0.8, color.RGBA{R: 30, G: 90, B: 200, A: 255}, "acked send"); err != nil {
		return err
	}
	if err := addScatter(p, fails, draw.CrossGlyph{}, 2, color.RGBA{R: 220, G: 30, B: 30, A: 255}, "failed / unknown send"); err != nil {
		return err
	}
	if err := addEventLines(p, rep.Events, ymax); err != nil {
		return err
	}
	p.X.Min = 0
	p.X.Max = max(p.X.Max, r.cfg.Duration.Seconds())
	p.Y.Min = 0
	p.Legend.Top = true
	return p.Save(14*vg.Inch, 6*vg.Inch, path)
}

// latencyPoints returns every acked send as (send time s, latency ms),
// every other send as (send time s, 0), and the largest latency (at
// least 1 ms).
func (r *run) latencyPoints() (acks, fails plotter.XYs, ymax float64) {
	ymax = 1.0
	for _, pr := range r.hist.prods {
		for _, rec := range pr.recs {
			x := float64(rec.sent) / 1e9
			if rec.status == statusAcked {
				y := float64(rec.done-rec.sent) / 1e6
				acks = append(acks, plotter.XY{X: x, Y: y})
				ymax = max(ymax, y)
			} else {
				fails = append(fails, plotter.XY{X: x, Y: 0})
			}
		}
	}
	return acks, fails, ymax
}

// thinPoints returns at most about 60k of xs, evenly spaced, to keep the
// file small.
func thinPoints(xs plotter.XYs) plotter.XYs {
	if len(xs) <= 60000 {
		return xs
	}
	step := len(xs)/60000 + 1
	out := make(plotter.XYs, 0, len(xs)/step+1)
	for i := 0; i < len(xs); i += step {
		out = append(out, xs[i])
	}
	return out
}

// addScatter adds pts (thinned) to p as a scatter with a legend entry;
// no points, no scatter.
func addScatter(p *plot.Plot, pts plotter.XYs, shape draw.GlyphDrawer, radius float64, c color.RGBA, label string) error {
	if len(pts) == 0 {
		return nil
	}
	s, err := plotter.NewScatter(thinPoints(pts))
	if err != nil {
		return err
	}
	s.GlyphStyle.Shape, s.GlyphStyle.Radius, s.GlyphStyle.Color = shape, vg.Points(radius), c
	p.Add(s)
	p.Legend.Add(label, s)
	return nil
}

// addEventLines adds a dashed vertical line, up to ymax, with a label
// for every fault, heal and error event.
func addEventLines(p *plot.Plot, events []Event, ymax float64) error {
	var lbl plotter.XYLabels
	k := 0
	for _, e := range events {
		if e.Kind != "fault" && e.Kind != "heal" && e.Kind != "error" {
			continue
		}
		c := color.RGBA{R: 200, G: 60, B: 0, A: 255}
		if e.Kind == "heal" {
			c = color.RGBA{R: 0, G: 140, B: 60, A: 255}
		}
		l, err := plotter.NewLine(plotter.XYs{{X: e.T, Y: 0}, {X: e.T, Y: ymax * 1.05}})
		if err != nil {
			return err
		}
		l.Color = c
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		lbl.XYs = append(lbl.XYs, plotter.XY{X: e.T, Y: ymax * (1.0 - 0.06*float64(k%8))})
		lbl.Labels = append(lbl.Labels, " "+short(e.What, 48))
		k++
	}
	if len(lbl.XYs) == 0 {
		return nil
	}
	ls, err := plotter.NewLabels(lbl)
	if err != nil {
		return err
	}
	for i := range ls.TextStyle {
		ls.TextStyle[i].Font.Size = vg.Points(8)
	}
	p.Add(ls)
	return nil
}
