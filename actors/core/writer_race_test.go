package core

import (
	"slices"
	"testing"

	"github.com/raidq/raidq/stripe"
)

// producer is one Writer under test: its encoded stripes and every effect
// it returned.
type producer struct {
	p      int
	w      *Writer
	shards map[stripe.ID][]stripe.Shard // as encoded for the first attempt
	acks   map[stripe.ID]uint64
	fails  map[stripe.ID]error
	done   map[stripe.ID]int
	sends  map[stripe.ID][]Send
}

func newProducer(p int) *producer {
	return &producer{p: p, w: NewWriter(DefaultWriterConfig(params())), shards: map[stripe.ID][]stripe.Shard{},
		acks: map[stripe.ID]uint64{}, fails: map[stripe.ID]error{}, done: map[stripe.ID]int{}, sends: map[stripe.ID][]Send{}}
}

// start begins stripe seq and encodes it for the offset the writer chose.
func (pr *producer) start(t *testing.T, now int64, seq uint64) Send {
	id := sid(pr.p, seq)
	s := pr.w.Start(now, id)
	pr.shards[id] = encode(t, id, s.Offset, 3)
	pr.sends[id] = append(pr.sends[id], s)
	return s
}

// take records the Acks, Fails and Dones of out (in WriterOutput's
// order) and returns its Sends.
func (pr *producer) take(t *testing.T, out WriterOutput) []Send {
	t.Helper()
	for _, e := range out.Acks {
		if _, dup := pr.acks[e.ID]; dup {
			t.Fatalf("stripe %s acked twice", e.ID)
		}
		pr.acks[e.ID] = e.Offset
	}
	for _, e := range out.Fails {
		pr.fails[e.ID] = e.Err
	}
	for _, e := range out.Sends {
		pr.sends[e.ID] = append(pr.sends[e.ID], e)
	}
	for _, e := range out.Done {
		pr.done[e.ID]++
	}
	return out.Sends
}

// flight is one Send of one producer not yet carried out.
type flight struct {
	pr *producer
	s  Send
}

// settle carries out sends in order: each writes its shards on every node
// of c and hands the replies back, until no producer asks for more.
func settle(t *testing.T, c *cluster, now int64, queue []flight) {
	rnd := newRand(7)
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		now += ms
		shards := stripe.Reshard(f.pr.shards[f.s.ID], f.s.Offset)
		for node := range c.owners {
			st := c.write(now, node, shards)
			for _, s := range f.pr.take(t, f.pr.w.Reply(now, rnd, f.s.ID, f.s.Attempt, node, st, now)) {
				queue = append(queue, flight{f.pr, s})
			}
		}
	}
}

// TestWriterRace has producers race for one offset, each reaching some
// nodes first (4/2, 3/3, 2/2/2 splits of the six slots). At most one can
// commit there; the losers retry elsewhere, a winner that met a CONFLICT
// writes once more (§3.7), and in the end every stripe is committed
// exactly where the owners' slots say.
func TestWriterRace(t *testing.T) {
	cases := []struct {
		name    string
		wins    [][]int // per producer, the nodes it reaches first
		okFirst bool    // replies: the OKs before the refusals
		winner  int     // who commits at the raced offset, -1 nobody
	}{
		{name: "4/2 oks first", wins: [][]int{{0, 1, 2, 3}, {4, 5}}, okFirst: true, winner: 0},
		{name: "4/2 conflicts first", wins: [][]int{{0, 1, 2, 3}, {4, 5}}, winner: 0},
		{name: "2/4 interleaved", wins: [][]int{{1, 4}, {0, 2, 3, 5}}, okFirst: true, winner: 1},
		{name: "3/3", wins: [][]int{{0, 1, 2}, {3, 4, 5}}, okFirst: true, winner: -1},
		{name: "3/3 interleaved", wins: [][]int{{0, 2, 4}, {1, 3, 5}}, winner: -1},
		{name: "2/2/2", wins: [][]int{{0, 1}, {2, 3}, {4, 5}}, okFirst: true, winner: -1},
		{name: "2/2/2 interleaved", wins: [][]int{{0, 3}, {1, 4}, {2, 5}}, winner: -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := int64(base + RangeNanos/2)
			c := newCluster(params().N)
			prods := make([]*producer, len(tc.wins))
			sends := make([]Send, len(tc.wins))
			for p := range prods {
				prods[p] = newProducer(p)
				sends[p] = prods[p].start(t, now, 1)
				if sends[p].Offset != sends[0].Offset {
					t.Fatalf("producers chose %d and %d; the race needs one offset", sends[0].Offset, sends[p].Offset)
				}
			}
			raced := sends[0].Offset
			status := race(c, now, prods, tc.wins)
			queue := replyRace(t, now, prods, sends, status, tc.okFirst)
			settle(t, c, now, queue)
			checkRace(t, c, prods, raced, tc.winner)
		})
	}
}

// race writes every producer's shard on every node, the node's winner
// first; it returns status[p][node].
func race(c *cluster, now int64, prods []*producer, wins [][]int) [][]Status {
	status := make([][]Status, len(prods))
	for p := range status {
		status[p] = make([]Status, len(c.owners))
	}
	for node := range c.owners {
		order := []int{}
		for p, nodes := range wins {
			if slices.Contains(nodes, node) {
				order = append([]int{p}, order...)
			} else {
				order = append(order, p)
			}
		}
		for _, p := range order {
			status[p][node] = c.write(now, node, prods[p].shards[sid(p, 1)])
		}
	}
	return status
}

// replyRace hands each producer its replies (OKs first or last) and
// returns the follow-up sends.
func replyRace(t *testing.T, now int64, prods []*producer, sends []Send, status [][]Status, okFirst bool) []flight {
	rnd := newRand(3)
	var queue []flight
	for p, pr := range prods {
		nodes := make([]int, len(status[p]))
		for i := range nodes {
			nodes[i] = i
		}
		slices.SortStableFunc(nodes, func(a, b int) int {
			ka, kb := status[p][a] == StatusOK, status[p][b] == StatusOK
			if ka == kb {
				return 0
			}
			if ka == okFirst {
				return -1
			}
			return 1
		})
		for _, node := range nodes {
			for _, s := range pr.take(t, pr.w.Reply(now+ms/2, rnd, sends[p].ID, 0, node, status[p][node], now)) {
				queue = append(queue, flight{pr, s})
			}
		}
	}
	return queue
}

// checkRace: every stripe acked once, done once, committed exactly at the
// offsets the owners hold W shards of it, and the raced offset won by winner.
func checkRace(t *testing.T, c *cluster, prods []*producer, raced uint64, winner int) {
	t.Helper()
	committed := c.committed()
	for p, pr := range prods {
		id := sid(p, 1)
		ack, ok := pr.acks[id]
		if !ok || pr.fails[id] != nil {
			t.Fatalf("producer %d: acked=%v err=%v", p, ok, pr.fails[id])
		}
		if pr.done[id] != 1 || pr.w.InFlight() != 0 {
			t.Fatalf("producer %d: done %d times, %d in flight", p, pr.done[id], pr.w.InFlight())
		}
		if (ack == raced) != (p == winner) {
			t.Fatalf("producer %d acked at %d (raced offset %d, winner %d)", p, ack, raced, winner)
		}
		offs := committed[id]
		if !slices.Contains(offs, ack) {
			t.Fatalf("producer %d acked at %d but the owners hold W shards only at %v", p, ack, offs)
		}
		for _, off := range offs {
			if !slices.ContainsFunc(pr.sends[id], func(s Send) bool { return s.Offset == off }) {
				t.Fatalf("producer %d committed at %d where it never sent", p, off)
			}
		}
		want := 1
		if p == winner {
			want = 2 // the §3.7 rewrite of a commit that met a CONFLICT
		}
		if len(offs) != want {
			t.Fatalf("producer %d committed at %v, want %d offsets", p, offs, want)
		}
	}
	for id, offs := range committed {
		if slices.Contains(offs, raced) && (winner < 0 || id != sid(winner, 1)) {
			t.Fatalf("stripe %s committed at the raced offset, winner %d", id, winner)
		}
	}
}
