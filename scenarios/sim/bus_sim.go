package sim

import (
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/stripe"
)

// The simulated bus: a client process's actors.Bus. The shipped client
// (actors.Client, its links, the reader actor) reaches the simulated
// nodes only through it, with the real wire encoding (bus.ScanReq,
// bus.WriteReq and their replies) over the simulation's network model
// (sim.send: delays, drops, slow nodes; a hung node loses requests, a
// fail-fast one answers "no responders", outage.go; write requests may
// arrive twice). A request a driver goroutine publishes goes to the loop
// with bubble.post, keyed (process and subject, the subject's call
// number), so requests made at one instant leave in a fixed order; the
// node's reply comes back as an event that calls the reply inbox's
// handler on a goroutine of its own, as nats.go calls a subscription's
// handler; the loop settles the drivers before its next event, so the
// handler's consequences are ordered too.
type simBus struct {
	s    *sim
	name string // the process: its port calls' caller name, and in the op log

	mu      sync.Mutex
	inboxes int
	subs    map[string]nats.MsgHandler // by inbox
	calls   map[string]uint64          // publishes, by subject
	closed  bool                       // the process ended: no reply reaches it
	// Loop-owned: the scans it saw, for the skip count (probe.go), and
	// by node the last scan sent, for the suspect count (suspect).
	probeTo uint64
	scans   map[*node]*sentScan
	// producer is the producer process's producer (producer.go): its
	// writes' offsets join the truth (noteWrite). Nil for other processes.
	producer *producer
	// writes: the (stripe, offset) attempts this process sent, each once.
	writes map[writeAttempt]bool
}

// writeAttempt is one attempt of a stripe: its id and offset.
type writeAttempt struct {
	id  stripe.ID
	off uint64
}

// sentScan is a process's last scan request to a node: when it left,
// whether a reply came, and whether the node is suspect to the process.
type sentScan struct {
	at       int64
	answered bool
	suspect  bool
}

var _ actors.Bus = (*simBus)(nil)

// simSubjects are the subjects of the simulated cluster ("sim").
var simSubjects = func() bus.Subjects {
	subj, err := bus.NewSubjects("sim")
	if err != nil {
		panic(sprintf("sim: subjects: %v", err))
	}
	return subj
}()

func newSimBus(s *sim, name string) *simBus {
	return &simBus{s: s, name: name, subs: map[string]nats.MsgHandler{}, calls: map[string]uint64{}}
}

// NewRespInbox names a reply inbox of the process. (Which link gets which
// number depends on the goroutines' order; nothing but routing sees it.)
func (b *simBus) NewRespInbox() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inboxes++
	return sprintf("_INBOX.%s.%d", b.name, b.inboxes)
}

// Subscribe takes a link's "<inbox>.*". There is no *nats.Subscription:
// the handler stays until the process ends (close).
func (b *simBus) Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nats.ErrConnectionClosed
	}
	b.subs[strings.TrimSuffix(subject, ".*")] = cb
	return nil, nil
}

// publish hands a message to the loop in (process and subject, call
// number) order.
func (b *simBus) publish(subject string, fn func()) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nats.ErrConnectionClosed
	}
	b.calls[subject]++
	seq := b.calls[subject]
	b.mu.Unlock()
	b.s.bubble.post(b.name+" "+subject, seq, fn)
	return nil
}

// PublishRequest sends a scan or shard write to its node.
func (b *simBus) PublishRequest(subject, reply string, data []byte) error {
	return b.publish(subject, func() { b.request(subject, reply, data) })
}

// Publish sends an in-doubt report to every node (reappend.go).
func (b *simBus) Publish(subject string, data []byte) error {
	return b.publish(subject, func() { b.s.publishInDoubt(b.name, subject, data) })
}

// close ends the process's bus: replies still on their way are dropped.
func (b *simBus) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// request routes one request (on the loop) to its node over the network.
func (b *simBus) request(subject, reply string, data []byte) {
	s := b.s
	kind, n := s.routeNode(subject)
	if n == nil {
		s.violate("%s published to %s, which no node serves", b.name, subject)
		return
	}
	copies := 1
	var serve func()
	switch kind {
	case "write":
		q, ok := b.noteWrite(data)
		if !ok {
			return
		}
		if s.rnd.Float64() < s.cfg.DupRate {
			copies = 2
		}
		serve = func() { n.serveWrite(b, q, func(rep []byte) { b.deliver(reply, rep) }) }
	default:
		b.noteScan(data)
		sc := b.suspect(n)
		serve = func() {
			n.serveScan(b, data, func(rep []byte) {
				sc.answered = true
				if rep != nil { // "no responders" neither clears nor marks it
					sc.suspect = false
				}
				b.deliver(reply, rep)
			})
		}
	}
	for range copies {
		s.send(n.slow, func() string { return sprintf("%s->n%d %s", b.name, n.id, kind) }, serve)
	}
}

// noteWrite records a shard write's attempt (on the loop) the first time
// the process sends one of its shards: its offset joins the truth's
// offsets of the stripe, and a producer's also the highest offset and the
// retry or rewrite count (a new offset of a stripe already acked is the
// post-commit rewrite, docs/design.md#write-path step 7). False for a
// request that does not decode (a violation); else the request.
func (b *simBus) noteWrite(data []byte) (bus.WriteReq, bool) {
	s := b.s
	q, err := bus.DecodeWriteReq(data)
	if err != nil {
		s.violate("%s sent a bad write: %v", b.name, err)
		return q, false
	}
	h, err := stripe.ParseHeader(q.Shard)
	if err != nil {
		s.violate("%s sent a bad shard: %v", b.name, err)
		return q, false
	}
	a := writeAttempt{h.ID, q.Offset}
	if b.writes == nil {
		b.writes = map[writeAttempt]bool{}
	}
	if b.writes[a] {
		return q, true
	}
	b.writes[a] = true
	prior := len(s.truth.offsets[h.ID])
	s.truth.offsets[h.ID] = append(s.truth.offsets[h.ID], q.Offset)
	if b.producer == nil {
		return q, true
	}
	s.truth.maxOffset = max(s.truth.maxOffset, q.Offset)
	s.log.add("%s send %s#%d %s", b.name, sid(h.ID), prior+1, s.log.off(q.Offset))
	switch _, acked := s.truth.acked[h.ID]; {
	case prior == 0:
	case acked:
		s.res.Rewrites++
	default:
		s.res.Retries++
	}
	return q, true
}

// suspect notes a scan request to n (on the loop) and counts the node
// suspect (Result.Suspects) when the process's last scan to it had no
// reply for scanTimeout: the reader actor then waits only its
// SuspectTimeout for the node until it answers again. (A reader sends a
// node its next scan only once the last one was answered or timed out.)
func (b *simBus) suspect(n *node) *sentScan {
	if b.scans == nil {
		b.scans = map[*node]*sentScan{}
	}
	last := b.scans[n]
	if last != nil && !last.answered && !last.suspect && b.s.now-last.at >= scanTimeout {
		b.s.res.Suspects++
		last.suspect = true
	}
	sc := &sentScan{at: b.s.now}
	if last != nil {
		sc.suspect = last.suspect
	}
	b.scans[n] = sc
	return sc
}

// routeNode is the node a request subject names and what it asks: a
// scan, or a shard write (slot).
func (s *sim) routeNode(subject string) (string, *node) {
	scan, name, _, _, err := simSubjects.ParseRequest(subject)
	if err != nil {
		return "", nil
	}
	kind := "write"
	if scan {
		kind = "scan"
	}
	if s.byName == nil {
		s.byName = map[string]*node{}
		for i, n := range s.nodes {
			s.byName[nodeName(i)] = n
		}
	}
	return kind, s.byName[name]
}

// deliver hands a reply (nil: "no responders") to the inbox's handler on
// a goroutine of its own, at the instant it arrives (on the loop).
func (b *simBus) deliver(reply string, data []byte) {
	i := strings.LastIndexByte(reply, '.')
	if i < 0 {
		return
	}
	b.mu.Lock()
	cb, closed := b.subs[reply[:i]], b.closed
	b.mu.Unlock()
	if closed || cb == nil {
		return
	}
	m := &nats.Msg{Subject: reply, Data: data}
	if data == nil {
		m.Header = nats.Header{"Status": []string{"503"}}
	}
	go cb(m)
}

// wireClient is the sender of a write that came over the wire: the node's
// answer goes back encoded (node.write replies through client). In
// conflict mode a producer learns node clocks only from refusals
// (hideClock), so that producers keep sharing one offset.
type wireClient struct {
	s         *sim
	from      string
	hideClock bool
	answer    func([]byte)
}

func (c wireClient) name() string { return c.from }

func (c wireClient) reply(_ core.Send, _ int, st core.Status, clock int64) {
	switch st {
	case core.StatusNoReply:
		c.answer(nil) // the fail-fast node's "no responders"
		return
	case core.StatusConflict:
		c.s.res.Conflicts++
	case core.StatusSealed:
		c.s.res.Sealed++
	case core.StatusClockAhead:
		c.s.res.Ahead++
	}
	if c.hideClock && st != core.StatusClockAhead && st != core.StatusSealed {
		clock = 0
	}
	c.answer(bus.WriteReply{Status: bus.Status(st), NodeClock: clock}.Marshal())
}

// sid of a shard on the wire, for the op log.
func shardID(b []byte) stripe.ID {
	h, err := stripe.ParseHeader(b)
	if err != nil {
		return stripe.ID{}
	}
	return h.ID
}
