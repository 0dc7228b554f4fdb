package actors

import (
	"errors"
	"fmt"
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

type linkPending struct {
	replyTo *actor.PID
	tag     any
	sent    time.Time
}

// link is the client's view of one node: it sends requests with a reply
// subject of its own, matches replies, and tracks the node's health
// (outstanding requests, smoothed round trip) so that a slow or dead node
// costs a producer nothing but a refused send.
//
// It is a plain object, not an actor: a producer actor calls send from its
// Receive, and the reply goes from the subscription's callback straight to
// the producer's mailbox. (As an actor it cost two more mailbox hops per
// shard, twelve per stripe, on the path of every ack.) mu guards pending;
// results are always delivered as messages, never by calling back into
// the sender.
type link struct {
	node  string
	nc    *nats.Conn
	cfg   LinkConfig
	sys   *actor.ActorSystem
	inbox string
	sub   *nats.Subscription
	done  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]linkPending
	rtt     time.Duration // EWMA
	closed  bool
}

// newLink subscribes to the link's reply inbox and starts its timeout sweeper.
func newLink(sys *actor.ActorSystem, node string, nc *nats.Conn, cfg LinkConfig) (*link, error) {
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 4096
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	l := &link{node: node, nc: nc, cfg: cfg, sys: sys, pending: make(map[uint64]linkPending), done: make(chan struct{})}
	l.inbox = nc.NewRespInbox()
	sub, err := nc.Subscribe(l.inbox+".*", l.onReply)
	if err != nil {
		return nil, fmt.Errorf("link to %s: subscribe: %w", node, err)
	}
	l.sub = sub
	l.wg.Add(1)
	go l.sweeper()
	return l, nil
}

// send sends one request; its reply (or an error) reaches replyTo as a
// *LinkResult carrying tag. Any goroutine may call it.
func (l *link) send(subject string, data []byte, replyTo *actor.PID, tag any) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.sys.Root.Send(replyTo, &LinkResult{Tag: tag, Err: fmt.Errorf("link to %s: %w", l.node, ErrLinkClosed)})
		return
	}
	if len(l.pending) >= l.cfg.MaxInflight {
		n := len(l.pending)
		l.mu.Unlock()
		l.sys.Root.Send(replyTo, &LinkResult{Tag: tag, Err: fmt.Errorf("link to %s: %w (%d outstanding)", l.node, ErrLinkSaturated, n)})
		return
	}
	l.seq++
	seq := l.seq
	// Pending before publishing: the reply may come back before Publish returns.
	l.pending[seq] = linkPending{replyTo: replyTo, tag: tag, sent: time.Now()}
	l.mu.Unlock()
	if err := l.nc.PublishRequest(subject, l.inbox+"."+strconv.FormatUint(seq, 10), data); err != nil {
		if p, ok := l.take(seq); ok {
			l.sys.Root.Send(p.replyTo, &LinkResult{Tag: p.tag, Err: fmt.Errorf("link to %s: %w", l.node, err)})
		}
	}
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
	if !ok {
		l.mu.Unlock()
		return // timed out already
	}
	delete(l.pending, seq)
	rtt := time.Since(p.sent)
	l.rtt = (l.rtt*7 + rtt) / 8
	l.mu.Unlock()
	res := &LinkResult{Tag: p.tag, Data: m.Data, RTT: rtt}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		res.Data, res.Err = nil, fmt.Errorf("node %s: %w", l.node, ErrNoResponders)
	}
	l.sys.Root.Send(p.replyTo, res)
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
	l.mu.Lock()
	for seq, p := range l.pending {
		if now.Sub(p.sent) >= l.cfg.Timeout {
			delete(l.pending, seq)
			expired = append(expired, p)
		}
	}
	l.mu.Unlock()
	for _, p := range expired {
		l.sys.Root.Send(p.replyTo, &LinkResult{Tag: p.tag, Err: fmt.Errorf("node %s: %w after %v", l.node, ErrLinkTimeout, l.cfg.Timeout)})
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
	l.mu.Unlock()
	_ = l.sub.Unsubscribe()
	close(l.done)
	l.wg.Wait()
	for _, p := range pending {
		l.sys.Root.Send(p.replyTo, &LinkResult{Tag: p.tag, Err: fmt.Errorf("link to %s: %w", l.node, ErrLinkClosed)})
	}
}

// ErrBusy: the producer's queues are full; the caller should slow down.
var ErrBusy = errors.New("producer queue full")
