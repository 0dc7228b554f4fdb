package metrics

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/bus"
)

// TestBuildInfo: raidq_build_info is 1 with the version labels, and
// registering it twice in one registry is fine (several nodes share one).
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		if err := RegisterBuildInfo(reg); err != nil {
			t.Fatal(err)
		}
	}
	if err := RegisterBuildInfo(nil); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != BuildInfoName || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v", mfs)
	}
	m := mfs[0].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if m.GetGauge().GetValue() != 1 || labels["version"] != bus.Version() || labels["goversion"] != runtime.Version() {
		t.Errorf("raidq_build_info %v = %v", labels, m.GetGauge().GetValue())
	}
	if _, ok := labels["revision"]; !ok {
		t.Errorf("no revision label: %v", labels)
	}
}
