package core

import (
	"testing"

	"github.com/raidq/raidq/stripe/invariants/invariantstest"
)

// The group cores' assertions: one owner per partition in a native
// group's plan (group.go), one leader and one reply per member for each
// Kafka generation, handed out only once durable (kafka_group*.go).

// TestGroupInvariantPlanOneOwner: a plan that claims a partition whose
// record names a live member (the simulation's claimEarly bug: no revoke
// before assign) or reads one it is not assigned fires; PlanGroup's own
// plans never do (TestPlanGroup*, the simulation).
func TestGroupInvariantPlanOneOwner(t *testing.T) {
	v := GroupView{Group: "g", Topic: "t", Partitions: 4, Me: "a", Live: []string{"a", "b"},
		Owners: map[int]string{}, Held: map[int]bool{}}
	want := map[int]bool{}
	for _, p := range AssignPartitions(v.Group, v.Topic, v.Partitions, v.Live, v.Me) {
		want[p] = true
	}
	mine, theirs := -1, -1
	for p := range v.Partitions {
		if want[p] && mine < 0 {
			mine = p
		}
		if !want[p] && theirs < 0 {
			theirs = p
		}
	}
	if mine < 0 || theirs < 0 {
		t.Fatalf("assignment %v: want a partition each", want)
	}
	v.Owners[mine] = "b" // b still holds it: a must wait
	plan := PlanGroup(v)
	if len(plan.Wait) != 1 || plan.Wait[0] != mine {
		t.Fatalf("plan %+v, want a wait for %d", plan, mine)
	}
	early := plan
	early.Claim, early.Wait = append(early.Claim, early.Wait...), nil
	invariantstest.Fires(t, `whose record names "b"`, func() { checkPlan(v, want, early) })

	stray := plan
	stray.Claim = append(stray.Claim, theirs)
	invariantstest.Fires(t, "assigned=false", func() { checkPlan(v, want, stray) })

	twice := plan
	twice.Release = append(twice.Release, mine)
	invariantstest.Fires(t, "in plan list", func() { checkPlan(v, want, twice) })

	v.Held[theirs] = true
	v.Owners[theirs] = "b" // b claimed it from a, judged dead
	keep := PlanGroup(v)
	keep.Fenced = nil // a would read on beside b
	invariantstest.Fires(t, "reads partition", func() { checkPlan(v, want, keep) })
}

// kafkaStable is a Stable group of a and b at generation 1.
func kafkaStable(t *testing.T) *kgh {
	h := newKGH(t, kafkaCfg())
	ra := h.join(0, "", "a", false)
	rb := h.join(0, "", "b", false)
	h.tick(20 * sec) // the join phase ends at the rebalance timeout
	h.stable(20*sec, map[string]uint64{"a": ra, "b": rb})
	return h
}

// TestKafkaGroupInvariantHeldUntilDurable: a join reply of a generation
// whose write is not durable yet never goes out.
func TestKafkaGroupInvariantHeldUntilDurable(t *testing.T) {
	h := kafkaStable(t)
	follower := "a"
	if h.g.leader == "a" {
		follower = "b"
	}
	h.g.holding = true // as if generation 1 still waited for its write
	invariantstest.Fires(t, "answered before its write is durable", func() {
		h.g.Join(21*sec, KafkaJoin{Req: 99, Member: follower, ProtocolType: "consumer", Protocols: protos, Session: 10 * sec, Rebalance: 20 * sec})
	})
}

// TestKafkaGroupInvariantOneGeneration: the replies a durable write
// releases are the group's generation's, one per member.
func TestKafkaGroupInvariantOneGeneration(t *testing.T) {
	h := newKGH(t, kafkaCfg())
	h.join(0, "", "a", false)
	h.join(0, "", "b", false)
	h.tick(20 * sec)
	if !h.g.holding || len(h.g.held) != 2 {
		t.Fatalf("holding=%v with %d replies, want both held", h.g.holding, len(h.g.held))
	}
	h.g.held[1].Generation-- // a reply of the previous generation
	invariantstest.Fires(t, "released reply to", func() { h.g.Persisted(20*sec, h.persist.Seq) })

	h = newKGH(t, kafkaCfg())
	h.join(0, "", "a", false)
	h.join(0, "", "b", false)
	h.tick(20 * sec)
	h.g.held = append(h.g.held, h.g.held[1]) // b told twice
	invariantstest.Fires(t, "twice=true", func() { h.g.Persisted(20*sec, h.persist.Seq) })

	h = newKGH(t, kafkaCfg())
	h.join(0, "", "a", false)
	h.join(0, "", "b", false)
	h.tick(20 * sec)
	h.g.held = h.g.held[:1] // b never told
	invariantstest.Fires(t, "1 replies at generation 2 for 2 members", func() { h.g.Persisted(20*sec, h.persist.Seq) })
}

// TestKafkaGroupInvariantSyncWhenStable: an assignment is handed out
// only in Stable.
func TestKafkaGroupInvariantSyncWhenStable(t *testing.T) {
	h := kafkaStable(t)
	h.g.state = KafkaPreparingRebalance
	invariantstest.Fires(t, "a sync answered in state PreparingRebalance", func() {
		h.g.finish(KafkaOutput{Syncs: []KafkaSyncReply{{Req: 1, Assignment: []byte("x")}}})
	})
}
