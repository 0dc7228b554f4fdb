package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum gathers g and adds up the metric family name over the series whose
// labels include every pair of match: counter and gauge values, histogram
// and summary sample counts. It tells tests and tools what a registry
// holds without parsing the text format; found is false when no series
// matched.
func Sum(g prometheus.Gatherer, name string, match map[string]string) (sum float64, found bool, err error) {
	fams, err := g.Gather()
	if err != nil {
		return 0, false, fmt.Errorf("gather: %w", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for k, v := range match {
				if labelValue(m, k) != v {
					continue series
				}
			}
			found = true
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			case m.Summary != nil:
				sum += float64(m.Summary.GetSampleCount())
			case m.Untyped != nil:
				sum += m.Untyped.GetValue()
			}
		}
	}
	return sum, found, nil
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
