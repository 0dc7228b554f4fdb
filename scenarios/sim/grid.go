package sim

import (
	"math/rand/v2"

	"github.com/raidq/raidq/stripe/quorum"
)

// The offset grid (docs/design.md#kafka-offsets): a gridded topic's
// offsets are multiples of its grid and its stripes hold at most Grid
// records, so offset + record index (the Kafka offset) grows in delivery
// order.

// withGrid gives about one seed in three a topic without a grid (created
// before it existed), from a random stream of its own so every other knob
// keeps its value for a seed; the others keep DefaultConfig's grid.
func withGrid(c Config, seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0x671d))
	if r.IntN(3) == 0 {
		c.Grid = 0
	}
	return c
}

// checkGrid: on a gridded topic every offset an attempt used (so every
// committed one, the re-appends' included) and every slot a node holds is
// on the grid, no stripe holds more than Grid records, and each reader
// incarnation's Kafka offsets strictly grow in delivery order (late
// deliveries aside, as for positions in checkReader).
func (s *sim) checkGrid() {
	p := s.params
	if !p.Gridded() {
		return
	}
	for _, id := range sortedIDs(s.truth.offsets) {
		for _, off := range s.truth.offsets[id] {
			if !p.OnGrid(off) {
				s.violate("%s attempted at %s, off the %d ns grid", sid(id), s.log.off(off), p.Grid)
			}
		}
		if n := len(s.truth.values[id]); n > p.MaxStripeRecords(n) {
			s.violate("%s holds %d records, more than the %d ns grid allows", sid(id), n, p.Grid)
		}
	}
	for _, n := range s.nodes {
		for _, slots := range n.disk {
			s.checkSlotsOnGrid(n.id, p, slots)
		}
		s.checkSlotsOnGrid(n.id, p, n.past)
	}
	for _, r := range s.readers {
		s.checkKafkaOrder(r)
	}
}

// checkSlotsOnGrid: a node holds no slot off the grid.
func (s *sim) checkSlotsOnGrid(node int, p quorum.Params, slots map[uint64][]byte) {
	for off := range slots {
		if !p.OnGrid(off) {
			s.violate("n%d holds a slot at %s, off the %d ns grid", node, s.log.off(off), p.Grid)
		}
	}
}

// checkKafkaOrder: offset + index grows strictly within each reader
// incarnation's in-order deliveries.
func (s *sim) checkKafkaOrder(r *reader) {
	var last uint64
	inc := -1
	for _, d := range r.got {
		if d.late {
			continue
		}
		if d.inc != inc {
			inc, last = d.inc, 0
		}
		k := d.pos.Offset + uint64(d.pos.Index)
		if k <= last {
			s.violate("r%d delivered %q at Kafka offset %d, not after %d", r.id, d.value, k, last)
		}
		last = k
	}
}
