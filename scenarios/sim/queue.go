package sim

import "container/heap"

// event is one thing that happens at a simulated time. Events at the same
// time run in the order they were scheduled (seq), which keeps runs
// deterministic.
type event struct {
	at  int64
	seq uint64
	fn  func()
}

// eventQueue is a min-heap of events by (at, seq).
type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].seq < q[j].seq)
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// at schedules fn at simulated time t (never before now).
func (s *sim) at(t int64, fn func()) {
	s.seq++
	heap.Push(&s.q, &event{at: max(t, s.now), seq: s.seq, fn: fn})
}

// next pops the earliest event, or nil when none is left.
func (s *sim) next() *event {
	if len(s.q) == 0 {
		return nil
	}
	return heap.Pop(&s.q).(*event)
}
