package node

import (
	"testing"
	"time"

	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe"
)

// TestClockOffNodeRefusesWrites: a node whose clock is 10 s behind its
// peers' judges itself off and answers writes CLOCK_OFF, which producers
// count like a dead node: every stripe is written once. Before, its
// CLOCK_AHEAD refusals made producers rewrite every stripe (finding 7:
// twice the writes, landing on the same nodes).
func TestClockOffNodeRefusesWrites(t *testing.T) {
	c := newRepairCluster(t, RepairConfig{Disabled: true})
	tp := c.createTopic("clk", 1)
	const off = 2
	c.kill(off)
	c.nodes[off].now = func() int64 { return time.Now().Add(-10 * time.Second).UnixNano() }
	c.start(off)
	testkit.WaitFor(t, "the skewed node judging its clock off", func() bool {
		return c.nodes[off].node.Status().ClockOff != ""
	})
	t.Logf("status: %s", c.nodes[off].node.Status().ClockOff)
	if st := c.nodes[0].node.Status(); st.ClockOff != "" {
		t.Fatalf("a healthy node judged itself off: %s", st.ClockOff)
	}
	c.produce(tp, 0, 300)
	pos := tp.Position(0, c.nodes[off].id)
	copies := make(map[stripe.ID]int)
	for _, b := range c.slots(0, tp)[0] {
		s, err := stripe.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		copies[s.ID]++
	}
	for id, n := range copies {
		if n > 1 {
			t.Fatalf("stripe %v stored %d times on a healthy node: rewritten because of the skewed node", id, n)
		}
	}
	if got := len(c.slots(off, tp)[0]); got != 0 || pos < 0 {
		t.Fatalf("the clock-off node (position %d) stored %d shards", pos, got)
	}
}
