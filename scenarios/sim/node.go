package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// node is one simulated storage node: a slot-owner per one-second range in
// memory, and a disk that holds what was made durable (slots and seals).
// Durability follows group commit: every write or seal joins the queue and
// becomes durable after a short delay, in order; OK is only sent once the
// write is durable, and a scan is only served once everything queued before
// it (its own seal included) is durable. A crash loses the memory and the
// queue; replies that were waiting on the queue are never sent.
type node struct {
	s     *sim
	id    int
	skew  int64 // node clock minus true time
	slow  bool
	up    bool
	kind  crashKind // while down: how the node fails requests
	epoch int       // bumped by every crash: stale events of older epochs do nothing

	owners map[uint64]*core.Owner       // in memory, by range start
	mem    map[uint64]core.SlotInfo     // slots accepted since the last restart (write-once check)
	disk   map[uint64]map[uint64][]byte // durable: range start -> offset -> shard
	seals  map[uint64]uint64            // durable seals, by range start
	synced int64                        // true time when everything queued so far is durable

	// The clock floor of closing scans (core.ClockFloor): in memory, and
	// the value made durable; a crash rebuilds the former from the latter
	// (startFloor).
	floor     *core.ClockFloor
	diskFloor int64

	// The node's view of a topic alter (alter.go), once it learned it.
	view    quorum.AcceptView
	learned bool

	// Incarnations (wipe.go): the current one's number and birth, when the
	// node was last wiped, and every shard its earlier incarnations held.
	inc     int
	birth   uint64
	wipedAt int64
	past    map[uint64][]byte
}

func newNode(s *sim, id int, skew int64, slow bool) *node {
	n := &node{s: s, id: id, skew: skew, slow: slow, up: true, owners: map[uint64]*core.Owner{},
		mem: map[uint64]core.SlotInfo{}, disk: map[uint64]map[uint64][]byte{}, seals: map[uint64]uint64{}, past: map[uint64][]byte{}}
	n.startFloor()
	return n
}

// startFloor is the node's start-up (actors/node startFloor): the floor
// from the disk (none with the noFloor bug), then a little ahead of the
// clock made durable before the node answers anything; then, with
// repair, a fresh repair loop.
func (n *node) startFloor() {
	restored := n.diskFloor
	if n.s.cfg.inject.noFloor {
		restored = 0
	}
	n.floor = core.NewClockFloor(restored)
	if _, p := n.floor.CloseClock(n.clock(), int64(quorum.LowLatencyWindow)); p != 0 {
		n.diskFloor = max(n.diskFloor, p)
		n.floor.Persisted(p, true)
	}
	n.startRepair() // a restarted node starts a fresh repair loop (repair.go)
}

// closeClock is the clock a closing scan may use now; a due floor goes
// through the durability queue like a seal (lost if the node crashes
// first).
func (n *node) closeClock(accept int64) int64 {
	clock, p := n.floor.CloseClock(n.clock(), accept)
	if p != 0 {
		f := n.floor
		n.durable(func() {
			n.diskFloor = max(n.diskFloor, p)
			f.Persisted(p, true)
		})
	}
	return clock
}

func (n *node) clock() int64 { return n.s.now + n.skew }

// owner returns the slot-owner of the range starting at lo, rebuilding it
// from the disk (durable seal and slots) after a start or a crash.
func (n *node) owner(lo uint64) *core.Owner {
	if o := n.owners[lo]; o != nil {
		return o
	}
	o := n.newOwner(lo, n.seals[lo], n.durableSlots(lo))
	n.owners[lo] = o
	return o
}

// newOwner is an owner of the range at lo with its window from the node's
// view of the topic (acceptFor, alter.go).
func (n *node) newOwner(lo, seal uint64, slots map[uint64]core.SlotInfo) *core.Owner {
	p := n.s.params
	cfg := core.OwnerConfig{Topic: "sim", Lo: lo, Accept: n.acceptFor(lo), Future: int64(p.FutureBound), Birth: n.birth,
		Grid: p.Grid}
	if n.s.cfg.inject.openWindow {
		cfg.Accept = int64(time.Hour)
	}
	return core.NewOwner(cfg, seal, slots)
}

// durableSlots reads what the disk holds in the range starting at lo.
func (n *node) durableSlots(lo uint64) map[uint64]core.SlotInfo {
	slots := map[uint64]core.SlotInfo{}
	if n.s.cfg.inject.amnesia && n.epoch > 0 {
		return slots
	}
	for off, b := range n.disk[lo] {
		h, err := stripe.ParseHeader(b)
		if err != nil {
			n.s.violate("n%d: durable slot %s unreadable: %v", n.id, n.s.log.off(off), err)
			continue
		}
		slots[off] = core.SlotInfo{ID: h.ID, Index: h.Index, DataCRC: h.DataCRC}
	}
	return slots
}

// durable queues a change behind everything queued so far and runs apply
// when it is durable, unless the node crashed before.
func (n *node) durable(apply func()) {
	done := max(n.synced, n.s.now+1+n.s.rnd.Int64N(max(int64(n.s.cfg.PersistDelay), 1)))
	n.synced = done
	n.after(done, apply)
}

// after runs fn at time t unless the node crashed before.
func (n *node) after(t int64, fn func()) {
	epoch := n.epoch
	n.s.at(t, func() {
		if n.epoch == epoch {
			fn()
		}
	})
}

// write handles one shard write from a producer and replies (possibly
// after the shard is durable).
func (n *node) write(p client, snd core.Send, b []byte) {
	s := n.s
	if n.down(func() string { return sprintf("write %s#%d from %s", sid(snd.ID), snd.Attempt, p.name()) },
		func() { p.reply(snd, n.id, core.StatusNoReply, 0) }) {
		return
	}
	sh, err := stripe.Parse(b)
	if err != nil {
		s.violate("n%d: producer sent a bad shard: %v", n.id, err)
		return
	}
	o := n.owner(core.RangeStart(snd.Offset))
	if !s.cfg.inject.openWindow {
		o.RaiseFloor(n.floor.Used())
	}
	d := o.Write(n.clock(), snd.Offset, &sh.ShardHeader, false)
	s.log.add("n%d write %s#%d %s -> %s persist=%v barrier=%v", n.id, sid(snd.ID), snd.Attempt, s.log.off(snd.Offset), d.Status, d.Persist, d.Barrier)
	reply := func() { n.replyWrite(p, snd, d.Status) }
	switch {
	case d.Status == core.StatusOK && d.Persist && s.cfg.inject.ackEarly:
		n.accepted(snd.Offset, sh)
		reply()
		n.durable(func() { n.store(snd.Offset, b) })
	case d.Status == core.StatusOK && d.Persist:
		n.accepted(snd.Offset, sh)
		n.durable(func() { n.store(snd.Offset, b); reply() })
	case d.Status == core.StatusOK:
		n.after(max(n.synced, s.now), reply) // the same shard again: answer behind the queue
	default:
		reply()
	}
}

// accepted checks write-once within this life of the node.
func (n *node) accepted(off uint64, sh stripe.Shard) {
	si := core.SlotInfo{ID: sh.ID, Index: sh.Index, DataCRC: sh.DataCRC}
	if cur, ok := n.mem[off]; ok && cur != si {
		n.s.violate("n%d accepted two shards in slot %s: %s and %s", n.id, n.s.log.off(off), sid(cur.ID), sid(si.ID))
	}
	if b, ok := n.past[off]; ok {
		if h, err := stripe.ParseHeader(b); err == nil && (h.ID != sh.ID || h.Index != sh.Index) {
			n.s.violate("n%d (incarnation #%d) accepted %s in slot %s, where its earlier incarnation held %s", n.id, n.inc, sid(sh.ID),
				n.s.log.off(off), sid(h.ID))
		}
	}
	n.mem[off] = si
}

// store makes a shard durable; a durable slot is never overwritten.
func (n *node) store(off uint64, b []byte) {
	lo := core.RangeStart(off)
	if n.disk[lo] == nil {
		n.disk[lo] = map[uint64][]byte{}
	}
	if cur, ok := n.disk[lo][off]; ok && string(cur) != string(b) {
		n.s.violate("n%d overwrote durable slot %s", n.id, n.s.log.off(off))
	}
	n.disk[lo][off] = b
}

func (n *node) replyWrite(p client, snd core.Send, st core.Status) {
	clock := n.clock()
	n.s.send(n.slow, func() string { return sprintf("n%d->%s reply %s#%d", n.id, p.name(), sid(snd.ID), snd.Attempt) },
		func() { p.reply(snd, n.id, st, clock) })
}

// The node's request path on the wire (bus_sim.go): a shard write
// (bus.WriteReq, decoded by the bus as it notes the attempt) or a closing
// scan (bus.ScanReq) from the process of bus b, handled as write and scan
// handle them, and answered encoded through answer (nil: "no
// responders").

// serveWrite handles a shard write.
func (n *node) serveWrite(b *simBus, q bus.WriteReq, answer func([]byte)) {
	s := n.s
	c := wireClient{s: s, from: b.name, answer: answer, hideClock: b.producer != nil && s.cfg.ConflictQuantum > 0}
	n.write(c, core.Send{ID: shardID(q.Shard), Offset: q.Offset}, q.Shard)
}

// serveScan decodes and handles a closing scan.
func (n *node) serveScan(b *simBus, data []byte, answer func([]byte)) {
	q, err := bus.DecodeScanReq(data)
	if err != nil {
		n.s.violate("n%d: %s sent a bad scan: %v", n.id, b.name, err)
		return
	}
	n.scan(b.name, q, answer)
}

// scan serves a reader's closing scan: the owner closes what the node
// already refuses (core.Owner.Close), the node waits for every earlier
// write to be durable, then returns the durable slots below the closed
// offset, in one page (Next == Seal, the closed offset).
func (n *node) scan(from string, q bus.ScanReq, answer func([]byte)) {
	s := n.s
	if n.down(func() string { return sprintf("scan from %s", from) }, func() { answer(nil) }) {
		return
	}
	sc := core.Scan{From: q.From, To: q.To, Probe: q.Probe}
	lo := core.RangeStart(sc.From)
	o := n.owner(lo)
	s.refreshRepaired(n, o)
	d := n.close(o, sc)
	if d.Status != core.StatusOK {
		s.log.add("n%d scan %s [%s,%s) -> %s", n.id, from, s.log.off(sc.From), s.log.off(sc.To), d.Status)
		n.replyScan(from, answer, bus.ScanReply{Status: bus.Status(d.Status), NodeClock: n.clock(), Next: sc.To})
		return
	}
	unknown := d.Unknown
	closed := d.Closed
	n.after(max(n.synced, s.now), func() {
		if unknown {
			// bus.StatusUnknown: the reader actor counts the node unheard.
			s.res.UnknownAnswers++
			s.log.add("n%d scan %s [%s,%s) -> UNKNOWN (birth %s)", n.id, from, s.log.off(sc.From), s.log.off(sc.To), s.log.off(n.birth))
			n.replyScan(from, answer, bus.ScanReply{Status: bus.StatusUnknown, NodeClock: n.clock(), Birth: n.birth, Next: sc.To})
			return
		}
		n.checkBirth(sc.From, closed)
		rep := bus.ScanReply{Status: bus.StatusOK, NodeClock: n.clock(), Seal: closed, Next: closed, Birth: n.birth}
		for _, e := range n.entries(lo, sc.From, closed) {
			rep.Entries = append(rep.Entries, bus.ScanEntry{Offset: e.Offset, Shard: e.Shard})
		}
		probe := ""
		if sc.Probe {
			if !s.cfg.inject.probeBlind {
				rep.After = n.firstAfter(closed)
			}
			probe = " after=" + s.log.offOrNone(rep.After)
		}
		s.log.add("n%d scan %s [%s,%s) -> closed %s, %d slots%s", n.id, from, s.log.off(sc.From), s.log.off(sc.To),
			s.log.off(closed), len(rep.Entries), probe)
		n.replyScan(from, answer, rep)
	})
}

// close decides a closing scan on o. With the openWindow bug the owner
// accepts any old offset (its Accept is an hour) while the node still
// claims to have closed its clock minus A, as a node whose promise does
// not hold.
func (n *node) close(o *core.Owner, sc core.Scan) core.ScanDecision {
	if !n.s.cfg.inject.openWindow {
		o.RaiseFloor(n.floor.Used())
		return o.Close(n.closeClock(o.Accept()), sc.From, sc.To)
	}
	d := o.Scan(n.clock(), sc.From, sc.To, false)
	d.Closed = max(min(sc.To, uint64(max(n.clock()-n.s.alterPrev(), 0))), sc.From)
	return d
}

// entries lists the durable slots of [from, to), in offset order.
func (n *node) entries(lo, from, to uint64) []core.Entry {
	var out []core.Entry
	for off, b := range n.disk[lo] {
		if off >= from && off < to {
			out = append(out, core.Entry{Offset: off, Shard: b})
		}
	}
	slices.SortFunc(out, func(a, b core.Entry) int { return cmp.Compare(a.Offset, b.Offset) })
	return out
}

func (n *node) replyScan(to string, answer func([]byte), rep bus.ScanReply) {
	b := rep.Marshal()
	n.s.send(n.slow, func() string { return sprintf("n%d->%s scan reply", n.id, to) }, func() { answer(b) })
}

// client is who sends a node shard writes and takes the replies: the
// process of a simulated bus (wireClient), a shipped producer's or a
// repair process's re-appends.
type client interface {
	name() string
	reply(snd core.Send, node int, st core.Status, nodeClock int64)
}
