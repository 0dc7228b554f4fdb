package sim

import (
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/stripe"
)

// In-doubt re-append (docs/design.md#read-path). A reader's
// core.InDoubtReport is published by the reader actor as a
// bus.InDoubtReport (over the simulated bus: a lossy message to every
// node); the shipped repair loop of a node that is up queues it as a
// target (actors/node/reappend.go: onInDoubt, then repairTarget and
// resolveInDoubt on its passes, the hand-over to the lowest live
// position through Publish, recentlyReappended) and writes the decoded
// stripe again through the shipped actors.Client.Reappend (the producer
// actor in re-append mode, repairProc.Reappend): the same stripe id at a
// fresh offset from the node's clock, all n shards, acked at W. Readers
// dedupe by stripe id: the copy is a "moved" or "redelivered" stripe for
// the checks, and its offsets join the truth's offsets (simBus.noteWrite).

// publishInDoubt delivers a reader's in-doubt report (a bus.InDoubtReport
// the reader actor published) to every node, a lossy message each.
func (s *sim) publishInDoubt(from, subject string, data []byte) {
	if s.repair == nil {
		return
	}
	r, err := bus.DecodeInDoubt(data)
	if err != nil {
		s.violate("%s published a bad in-doubt report: %v", from, err)
		return
	}
	id := stripe.ID{Producer: r.Producer, Seq: r.Seq}
	for _, n := range s.nodes {
		s.send(n.slow, func() string { return sprintf("%s->n%d in-doubt %s", from, n.id, sid(id)) },
			func() { s.deliverInDoubt(n, subject, data) })
	}
}

// inDoubtSubject is the subject of the simulated partition's reports.
func (s *sim) inDoubtSubject() string {
	subj, err := bus.NewSubjects("sim")
	if err != nil {
		panic(sprintf("sim: subjects: %v", err))
	}
	return subj.InDoubt(simTopic, 0)
}
