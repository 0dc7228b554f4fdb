package bench

import (
	"context"
	"strings"
	"testing"
)

func TestSpreads(t *testing.T) {
	runs := []*Report{
		{Ratio: map[string]float64{"throughput_msgs_s": 2.0, "cpu_s": 0.5}},
		{Ratio: map[string]float64{"throughput_msgs_s": 3.0}},
		{Ratio: map[string]float64{"throughput_msgs_s": 2.5, "cpu_s": 0.7}},
	}
	sp := spreads(runs)
	if got := sp["throughput_msgs_s"]; got != (Spread{Median: 2.5, Min: 2.0, Max: 3.0, N: 3}) {
		t.Errorf("throughput spread %+v", got)
	}
	if got := sp["cpu_s"]; got != (Spread{Median: 0.6, Min: 0.5, Max: 0.7, N: 2}) {
		t.Errorf("cpu spread %+v (an even count takes the mean of the middle two)", got)
	}
	var b strings.Builder
	(&Series{Runs: runs, Ratio: sp}).PrintSummary(&b)
	if !strings.Contains(b.String(), "throughput ratio 3.00x") || !strings.Contains(b.String(), "2.50x") {
		t.Errorf("summary:\n%s", b.String())
	}
}

func TestRunSeriesRefusesZero(t *testing.T) {
	if _, err := RunSeries(context.Background(), Config{}, 0); err == nil {
		t.Fatal("no error for 0 runs")
	}
}
