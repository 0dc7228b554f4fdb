package actors

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// LinkConfig bounds one link.
type LinkConfig struct {
	MaxInflight int           // requests outstanding before new ones are refused (default 4096)
	Timeout     time.Duration // a request without reply is reported as timed out after this (default 5s)
}

// linkSend asks a link to send one request to its node. The reply (or
// an error) comes back to ReplyTo as a *LinkResult carrying Tag.
type linkSend struct {
	Subject string
	Data    []byte
	ReplyTo *actor.PID
	Tag     any
}

// LinkResult is the answer to a linkSend.
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

type linkReply struct {
	seq uint64
	msg *nats.Msg
}

type linkSweep struct{}

// linkActor is the client's view of one node: it sends requests with a
// reply subject of its own, matches replies, and tracks the node's health
// (outstanding requests, smoothed round trip) so that a slow or dead node
// costs a producer nothing but a refused send.
type linkActor struct {
	node    string
	nc      *nats.Conn
	cfg     LinkConfig
	inbox   string
	sub     *nats.Subscription
	seq     uint64
	pending map[uint64]linkPending
	rtt     time.Duration // EWMA
	stop    func()
}

func newLinkActor(node string, nc *nats.Conn, cfg LinkConfig) *linkActor {
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 4096
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &linkActor{node: node, nc: nc, cfg: cfg, pending: make(map[uint64]linkPending)}
}

func (a *linkActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *linkSend:
		a.send(ctx, m)
	case *linkReply:
		a.reply(ctx, m)
	case *linkSweep:
		a.sweep(ctx)
	case *actor.Stopping:
		if a.sub != nil {
			_ = a.sub.Unsubscribe()
		}
		if a.stop != nil {
			a.stop()
		}
		for seq, p := range a.pending {
			ctx.Send(p.replyTo, &LinkResult{Tag: p.tag, Err: fmt.Errorf("link to %s: %w", a.node, errStopped)})
			delete(a.pending, seq)
		}
	}
}

func (a *linkActor) start(ctx actor.Context) {
	a.inbox = a.nc.NewRespInbox()
	self, sys := ctx.Self(), ctx.ActorSystem()
	sub, err := a.nc.Subscribe(a.inbox+".*", func(m *nats.Msg) {
		i := strings.LastIndexByte(m.Subject, '.')
		seq, perr := strconv.ParseUint(m.Subject[i+1:], 10, 64)
		if perr == nil {
			sys.Root.Send(self, &linkReply{seq: seq, msg: m})
		}
	})
	if err != nil {
		panic(fmt.Errorf("link to %s: subscribe: %w", a.node, err)) // supervisor restarts the link
	}
	a.sub = sub
	t := time.NewTicker(a.cfg.Timeout / 4)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-t.C:
				sys.Root.Send(self, &linkSweep{})
			case <-done:
				t.Stop()
				return
			}
		}
	}()
	a.stop = func() { close(done) }
}

func (a *linkActor) send(ctx actor.Context, m *linkSend) {
	if len(a.pending) >= a.cfg.MaxInflight {
		ctx.Send(m.ReplyTo, &LinkResult{Tag: m.Tag, Err: fmt.Errorf("link to %s: %w (%d outstanding)", a.node, ErrLinkSaturated, len(a.pending))})
		return
	}
	a.seq++
	if err := a.nc.PublishRequest(m.Subject, a.inbox+"."+strconv.FormatUint(a.seq, 10), m.Data); err != nil {
		ctx.Send(m.ReplyTo, &LinkResult{Tag: m.Tag, Err: fmt.Errorf("link to %s: %w", a.node, err)})
		return
	}
	a.pending[a.seq] = linkPending{replyTo: m.ReplyTo, tag: m.Tag, sent: time.Now()}
}

func (a *linkActor) reply(ctx actor.Context, m *linkReply) {
	p, ok := a.pending[m.seq]
	if !ok {
		return // timed out already
	}
	delete(a.pending, m.seq)
	rtt := time.Since(p.sent)
	a.rtt = (a.rtt*7 + rtt) / 8
	res := &LinkResult{Tag: p.tag, Data: m.msg.Data, RTT: rtt}
	if len(m.msg.Data) == 0 && m.msg.Header.Get("Status") == "503" {
		res.Data, res.Err = nil, fmt.Errorf("node %s: %w", a.node, ErrNoResponders)
	}
	ctx.Send(p.replyTo, res)
}

func (a *linkActor) sweep(ctx actor.Context) {
	now := time.Now()
	for seq, p := range a.pending {
		if now.Sub(p.sent) >= a.cfg.Timeout {
			delete(a.pending, seq)
			ctx.Send(p.replyTo, &LinkResult{Tag: p.tag, Err: fmt.Errorf("node %s: %w after %v", a.node, ErrLinkTimeout, a.cfg.Timeout)})
		}
	}
}

// ErrBusy: the producer's queues are full; the caller should slow down.
var ErrBusy = errors.New("producer queue full")
