package sim

import "github.com/raidq/raidq/actors/core"

// The far-behind skip (core.Scan.Probe): a reader more than SkipBehind
// behind its clock's now-D asks each node, with its scan, for the first
// occupied offset at or after the scan's end (NodeResult.After), and jumps
// its frontier over the empty time up to the lowest answer (or the probe
// limit). Config.ReaderBehind starts readers far behind the data, over
// empty time; Config.ReaderLate starts them after the data is written, so
// the skip lands on it. Skipped time is not sealed: only the nodes' accept
// window keeps writes out of it, which is why a reader clock fast by more
// than SkipBehind is a hard fault (HardFastReader).

// firstAfter is the node's first durable slot at or after to, in any
// range (0: none), like the node actor's one-seek firstAfter. The scan is
// answered only once everything queued before it is durable, so this sees
// every write the node had taken when the scan arrived.
func (n *node) firstAfter(to uint64) uint64 {
	var first uint64
	for _, slots := range n.disk {
		for off := range slots {
			if off >= to && (first == 0 || off < first) {
				first = off
			}
		}
	}
	return first
}

// noteProbe counts a probing scan once applied and logs the skip it made.
func (r *reader) noteProbe(sc core.Scan, out core.Output) {
	s := r.s
	if !sc.Probe || out.Stalled != "" {
		return
	}
	s.res.Probes++
	if f := r.r.Frontier(); f > sc.To {
		s.res.Skips++
		s.log.add("%s SKIP [%s,%s) over empty time (probe limit %s, %v)", r.name, s.log.off(sc.To), s.log.off(f),
			s.log.off(sc.ProbeLimit), durationNs(f-sc.To))
	}
}
