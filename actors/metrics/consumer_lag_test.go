package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestConsumerLag: one series per topic, partition and group with the
// largest lag reported; a removed source's series vanish; two clients on
// one registry share the gauge; nil records nothing.
func TestConsumerLag(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewClient(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewClient(reg)
	if err != nil || b.ConsumerLag() != a.ConsumerLag() {
		t.Fatalf("a second client of the registry: %v, shared gauge %v", err, b.ConsumerLag() == a.ConsumerLag())
	}
	removeA := a.ConsumerLag().Add(func(emit func(string, int, string, float64)) {
		emit("orders", 0, "billing", 1.5)
		emit("orders", 1, "billing", 0)
	})
	removeB := b.ConsumerLag().Add(func(emit func(string, int, string, float64)) { emit("orders", 0, "billing", 3) })
	if n := countSeries(t, reg); n != 2 {
		t.Fatalf("%d series, want 2", n)
	}
	want := func(v float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == ConsumerLagName && m.GetLabel()[1].GetValue() == "0" { // labels sorted: group, partition, topic
					if got := m.GetGauge().GetValue(); got != v {
						t.Fatalf("orders/0: %v, want %v", got, v)
					}
					return
				}
			}
		}
		t.Fatal("no series for orders/0")
	}
	want(3)
	removeB()
	want(1.5)
	removeA()
	if n := countSeries(t, reg); n != 0 {
		t.Fatalf("%d series after every consumer closed", n)
	}
	var none *Client
	none.ConsumerLag().Add(func(func(string, int, string, float64)) {})()
}

func countSeries(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == ConsumerLagName {
			return len(mf.GetMetric())
		}
	}
	return 0
}
