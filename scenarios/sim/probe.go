package sim

import "github.com/raidq/raidq/bus"

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

// noteScan counts a reader process's probing scans as its bus sees them
// (on the loop), and the skips they made: a scan that starts past the
// end of the last probing scan jumped its frontier over empty time.
func (b *simBus) noteScan(data []byte) {
	q, err := bus.DecodeScanReq(data)
	if err != nil {
		return
	}
	s := b.s
	if b.probeTo != 0 && q.From >= b.probeTo {
		if q.From > b.probeTo {
			s.res.Skips++
			s.log.add("%s SKIP [%s,%s) over empty time (%v)", b.name, s.log.off(b.probeTo), s.log.off(q.From), durationNs(q.From-b.probeTo))
		}
		b.probeTo = 0
	}
	if q.Probe && q.To != b.probeTo {
		s.res.Probes++
		b.probeTo = q.To
	}
}
