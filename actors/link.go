package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
)

// Link errors, reported in place of a reply.
var (
	// ErrNoResponders: nothing subscribes to the node's subject (it is down).
	ErrNoResponders = errors.New("node not reachable (no responders)")
	// ErrLinkSaturated: the node has too many requests outstanding; the
	// request was not sent, so a slow node is never waited for.
	ErrLinkSaturated = errors.New("node link saturated")
	// ErrLinkTimeout: no reply within the link's request timeout.
	ErrLinkTimeout = errors.New("node did not reply in time")
)

// ErrLinkClosed: the link to a node was closed (its client or node is
// stopping) before the request was answered.
var ErrLinkClosed = errors.New("link closed")

// LinkConfig bounds one link.
type LinkConfig struct {
	MaxInflight int           // requests outstanding before new ones are refused (default 4096)
	Timeout     time.Duration // a request without reply is reported as timed out after this (default 5s)
}

// LinkResult is the answer to a link's send, delivered to the sender's
// actor as a message.
type LinkResult struct {
	Tag  any
	Data []byte
	Err  error
	RTT  time.Duration
}

// linkPending is one request awaiting its reply. Its result goes to
// replyTo as a message (send) or into ch (request: buffered for the one
// result, so delivering never blocks).
type linkPending struct {
	replyTo *actor.PID
	ch      chan *LinkResult
	tag     any
	sent    time.Time
}

// link is the client's view of one node: it sends requests with a reply
// subject of its own, matches replies, and tracks the node's health
// (outstanding requests, smoothed round trip) so that a slow or dead node
// costs a producer nothing but a refused send. Every request a client or
// a node makes to a node goes through the node's link: a producer's
// shards (send), and the scans of readers and repair and the nodes'
// status requests (request, Client.Request).
//
// It is a plain object, not an actor: a producer actor calls send from its
// Receive, and the reply goes from the subscription's callback straight to
// the producer's mailbox. (As an actor it cost two more mailbox hops per
// shard, twelve per stripe, on the path of every ack.) mu guards pending
// and the connection requests go over; results are always delivered as
// messages or on a request's channel, never by calling back into the
// sender.
//
// A link starts on the client's connection (main) and moves once to the
// node's own connection when ClientConfig.NodeConn gives one (offer): the
// dial happens elsewhere, in the background, and no send waits for it.
// While NodeConn answers main ("not yet"), a send asks it again at most
// once per nodeConnRecheck. The subscription on the connection left stays
// for the replies to the requests already sent over it until the link's
// Timeout has passed (the sweeper then drops it).
type link struct {
	node string
	main Bus // the client's connection (ClientConfig.Bus or Conn)
	cfg  LinkConfig
	sys  *actor.ActorSystem
	done chan struct{}
	wg   sync.WaitGroup
	// replying counts replies being delivered by the subscription's
	// goroutine (added under mu while not closed): close waits for them,
	// so no reply reaches an actor system its client is shutting down.
	replying sync.WaitGroup

	mu      sync.Mutex
	nc      Bus // requests go over nc; their replies come to inbox (sub)
	inbox   string
	sub     *nats.Subscription
	retired []retiredSub // the subscriptions on a connection left (offer)
	// nodeConn is ClientConfig.NodeConn while the link is on main and may
	// still move (nil: settled); asking is set while someone asks it, and
	// askAt is when a send may ask it again.
	nodeConn func(node string) *nats.Conn
	asking   bool
	askAt    time.Time
	seq      uint64
	pending  map[uint64]linkPending
	rtt      time.Duration // EWMA
	closed   bool
}

// retiredSub is the reply subscription on a connection the link left,
// kept for the replies to the requests sent over it until drop.
type retiredSub struct {
	sub  *nats.Subscription
	drop time.Time
}

// nodeConnRecheck is how often, at most, a link on the client's
// connection asks NodeConn again (on a send) whether the node's own
// connection is ready.
const nodeConnRecheck = 100 * time.Millisecond

// newLink subscribes to the link's reply inbox on main and starts its
// timeout sweeper. With nodeConn set, the link waits for NodeConn's first
// answer: the caller asks it and hands the answer to offer.
func newLink(sys *actor.ActorSystem, node string, main Bus, nodeConn func(string) *nats.Conn, cfg LinkConfig) (*link, error) {
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 4096
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	l := &link{node: node, main: main, nc: main, cfg: cfg, sys: sys, pending: make(map[uint64]linkPending),
		done: make(chan struct{}), nodeConn: nodeConn, asking: nodeConn != nil}
	l.inbox = main.NewRespInbox()
	sub, err := main.Subscribe(l.inbox+".*", l.onReply)
	if err != nil {
		return nil, fmt.Errorf("link to %s: subscribe: %w", node, err)
	}
	l.sub = sub
	l.wg.Add(1)
	go l.sweeper()
	return l, nil
}

// offer hands the link an answer of NodeConn: nil settles it on main,
// main itself means "not yet" (a send after nodeConnRecheck asks again),
// and another connection becomes the one its requests go over from now
// on. It clears asking. (Subscribing is no network round trip: nats.go
// buffers it.)
func (l *link) offer(nc *nats.Conn) {
	if nc == nil || Bus(nc) == l.main {
		l.mu.Lock()
		l.asking = false
		if nc == nil {
			l.nodeConn = nil
		} else {
			l.askAt = time.Now().Add(nodeConnRecheck)
		}
		l.mu.Unlock()
		return
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.Subscribe(inbox+".*", l.onReply)
	l.mu.Lock()
	if err != nil || l.closed {
		// A connection that cannot subscribe (closed) is no way to the
		// node: main stays.
		l.nodeConn, l.asking = nil, false
		l.mu.Unlock()
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		return
	}
	l.retired = append(l.retired, retiredSub{sub: l.sub, drop: time.Now().Add(l.cfg.Timeout)})
	l.nc, l.inbox, l.sub = nc, inbox, sub
	l.nodeConn, l.asking = nil, false
	l.mu.Unlock()
}

// conn is the connection the link's requests go over now.
func (l *link) conn() Bus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nc
}

// send sends one request; its reply (or an error) reaches replyTo as a
// *LinkResult carrying tag. Any goroutine may call it.
func (l *link) send(subject string, data []byte, replyTo *actor.PID, tag any) {
	l.start(subject, data, linkPending{replyTo: replyTo, tag: tag})
}

// request sends one request and waits for its reply: the same pending
// requests, reply inbox and health as send (a saturated link refuses it
// at once with ErrLinkSaturated, and it counts as outstanding until it is
// answered or given up). It gives up with ErrLinkTimeout after timeout or
// the link's Timeout, whichever is shorter (timeout <= 0: the link's),
// and with ctx's error when ctx ends first. A node that nothing answers
// for is ErrNoResponders. The duration is the reply's round trip. Any
// goroutine may call it.
func (l *link) request(ctx context.Context, subject string, data []byte, timeout time.Duration) ([]byte, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("link to %s: %w", l.node, err)
	}
	if timeout <= 0 || timeout > l.cfg.Timeout {
		timeout = l.cfg.Timeout
	}
	ch := make(chan *LinkResult, 1)
	seq := l.start(subject, data, linkPending{ch: ch})
	t := time.NewTimer(timeout)
	defer t.Stop()
	var err error
	select {
	case r := <-ch:
		return r.Data, r.RTT, r.Err
	case <-t.C:
		err = fmt.Errorf("node %s: %w after %v", l.node, ErrLinkTimeout, timeout)
	case <-ctx.Done():
		err = fmt.Errorf("link to %s: %w", l.node, ctx.Err())
	}
	if _, ok := l.take(seq); ok {
		return nil, 0, err // given up here: no longer outstanding
	}
	// Answered, timed out by the sweeper or refused meanwhile: that result.
	r := <-ch
	return r.Data, r.RTT, r.Err
}

// start registers p as pending and publishes the request; a closed or
// saturated link, or a failed publish, delivers p's error instead. It
// returns the request's sequence number (0: not registered).
func (l *link) start(subject string, data []byte, p linkPending) uint64 {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.deliver(p, &LinkResult{Tag: p.tag, Err: fmt.Errorf("link to %s: %w", l.node, ErrLinkClosed)})
		return 0
	}
	if len(l.pending) >= l.cfg.MaxInflight {
		n := len(l.pending)
		l.mu.Unlock()
		l.deliver(p, &LinkResult{Tag: p.tag, Err: fmt.Errorf("link to %s: %w (%d outstanding)", l.node, ErrLinkSaturated, n)})
		return 0
	}
	l.seq++
	seq := l.seq
	// Pending before publishing: the reply may come back before Publish returns.
	p.sent = time.Now()
	l.pending[seq] = p
	nc, inbox := l.nc, l.inbox
	var ask func(string) *nats.Conn
	if l.nodeConn != nil && !l.asking && !p.sent.Before(l.askAt) {
		ask, l.asking = l.nodeConn, true
	}
	l.mu.Unlock()
	if err := nc.PublishRequest(subject, inbox+"."+strconv.FormatUint(seq, 10), data); err != nil {
		if p, ok := l.take(seq); ok {
			l.deliver(p, &LinkResult{Tag: p.tag, Err: fmt.Errorf("link to %s: %w", l.node, err)})
		}
	}
	if ask != nil {
		l.offer(ask(l.node)) // NodeConn does not block (ClientConfig)
	}
	return seq
}

// deliver hands a pending request its result: a message to the sender's
// actor, or the request's channel. Each pending request is delivered
// once (whoever removes it from pending delivers it).
func (l *link) deliver(p linkPending, res *LinkResult) {
	if p.ch != nil {
		p.ch <- res
		return
	}
	l.sys.Root.Send(p.replyTo, res)
}

// take removes and returns the pending request seq, if it is still pending.
func (l *link) take(seq uint64) (linkPending, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.pending[seq]
	if ok {
		delete(l.pending, seq)
	}
	return p, ok
}

// onReply runs on the subscription's goroutine.
func (l *link) onReply(m *nats.Msg) {
	i := strings.LastIndexByte(m.Subject, '.')
	seq, err := strconv.ParseUint(m.Subject[i+1:], 10, 64)
	if err != nil {
		return
	}
	l.mu.Lock()
	p, ok := l.pending[seq]
	if !ok || l.closed {
		l.mu.Unlock()
		return // timed out already, or closing (close delivers what is pending)
	}
	delete(l.pending, seq)
	rtt := time.Since(p.sent)
	l.rtt = (l.rtt*7 + rtt) / 8
	l.replying.Add(1)
	l.mu.Unlock()
	defer l.replying.Done()
	res := &LinkResult{Tag: p.tag, Data: m.Data, RTT: rtt}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		res.Data, res.Err = nil, fmt.Errorf("node %s: %w", l.node, ErrNoResponders)
	}
	l.deliver(p, res)
}

// sweeper reports requests without a reply after the link's timeout.
func (l *link) sweeper() {
	defer l.wg.Done()
	t := time.NewTicker(l.cfg.Timeout / 4)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.sweep(time.Now())
		case <-l.done:
			return
		}
	}
}

func (l *link) sweep(now time.Time) {
	var expired []linkPending
	var drop []*nats.Subscription
	l.mu.Lock()
	for seq, p := range l.pending {
		if now.Sub(p.sent) >= l.cfg.Timeout {
			delete(l.pending, seq)
			expired = append(expired, p)
		}
	}
	// A retired subscription's requests are answered or timed out by now.
	l.retired = slices.DeleteFunc(l.retired, func(r retiredSub) bool {
		if now.Before(r.drop) {
			return false
		}
		drop = append(drop, r.sub)
		return true
	})
	l.mu.Unlock()
	for _, sub := range drop {
		_ = sub.Unsubscribe()
	}
	for _, p := range expired {
		l.deliver(p, &LinkResult{Tag: p.tag, Err: fmt.Errorf("node %s: %w after %v", l.node, ErrLinkTimeout, l.cfg.Timeout)})
	}
}

// close unsubscribes, stops the sweeper and fails what is still pending.
func (l *link) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	pending := l.pending
	l.pending = make(map[uint64]linkPending)
	subs := []*nats.Subscription{l.sub}
	for _, r := range l.retired {
		subs = append(subs, r.sub)
	}
	l.retired = nil
	l.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	close(l.done)
	l.wg.Wait()
	l.replying.Wait()
	for _, p := range pending {
		l.deliver(p, &LinkResult{Tag: p.tag, Err: fmt.Errorf("link to %s: %w", l.node, ErrLinkClosed)})
	}
}

// ErrBusy: the producer's queues are full; the caller should slow down.
var ErrBusy = errors.New("producer queue full")
