package bench

import (
	"strings"
	"testing"
)

// TestCompareKafka: the comparison divides CPU by acked messages, splits
// the gateway from the nodes, and judges gateway + nodes against native
// producer + nodes.
func TestCompareKafka(t *testing.T) {
	r := &Report{
		Raidq: &Result{System: "raidq", Acked: 1000, ServerCPUS: 0.08, ClientCPUS: 0.02, CPUS: 0.1, ThroughputMsgsS: 2000,
			AckP99Ms: 2, RecordsPerStripe: 16},
		Kafka: &Result{System: "kafka", Acked: 1000, ServerCPUS: 0.12, ClientCPUS: 0.03, CPUS: 0.15, ThroughputMsgsS: 1000,
			AckP99Ms: 4, RecordsPerStripe: 8, Processes: []ProcStat{{Name: "n0", CPUS: 0.09}, {Name: "gateway", CPUS: 0.03}}},
	}
	r.compareKafka()
	c := r.KafkaVsNative
	if c == nil {
		t.Fatal("no comparison")
	}
	want := map[string][2]float64{
		"kafka_server":  {c.KafkaServerCPUUsPerMsg, 120},
		"gateway":       {c.KafkaGatewayCPUUsPerMsg, 30},
		"nodes":         {c.KafkaNodesCPUUsPerMsg, 90},
		"kgo client":    {c.KgoClientCPUUsPerMsg, 30},
		"native server": {c.NativeServerCPUUsPerMsg, 80},
		"native":        {c.NativeCPUUsPerMsg, 100},
		"ratio":         {c.KafkaCPURatio, 1.2},
		"vs nodes":      {c.KafkaServerVsNativeNodes, 1.5},
		"series ratio":  {r.Ratio["kafka_cpu_ratio"], 1.2},
		"msgs ratio":    {r.Ratio["kafka_msgs_s_vs_native"], 0.5},
	}
	for name, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s = %v, want %v", name, v[0], v[1])
		}
	}
	if !c.TargetMet {
		t.Error("1.2x does not meet the 1.3x target")
	}
	var b strings.Builder
	r.PrintTable(&b)
	if !strings.Contains(b.String(), "met at 1.20x") || !strings.Contains(b.String(), "kafka") {
		t.Errorf("table:\n%s", b.String())
	}
	(&Report{Raidq: r.Raidq}).compareKafka() // no Kafka run: nothing to compare, no panic
}
