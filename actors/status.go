package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/raidq/raidq/bus"
)

// ErrNoNodes: no node of the cluster answered discovery or status.
var ErrNoNodes = errors.New("no raidq node answered")

// StatusOptions tune StatusWith.
type StatusOptions struct {
	// Timeout bounds the whole query (default 2s; ctx may end it sooner).
	// Without Expect, discovery listens for all of it: nodes cannot be
	// counted before they answer.
	Timeout time.Duration
	// SlowAfter: a status round trip longer than this makes the node's
	// health "slow reply" (default 250ms).
	SlowAfter time.Duration
	// Expect lists node ids that should be there: they are asked directly,
	// reported "no answer" if silent, and once all of them have answered the
	// query returns without waiting out the timeout.
	Expect []string
}

// Status discovers the nodes of cluster through their micro service
// ($SRV.PING.raidq-node, every reply within the timeout) and asks each for
// its status. The result is sorted by node id; each entry's Health says
// how it answered, RTT and Skew what was measured. ErrNoNodes when nothing
// answered; other errors are the NATS connection's.
func Status(ctx context.Context, nc *nats.Conn, cluster string) ([]bus.NodeStatus, error) {
	return StatusWith(ctx, nc, cluster, StatusOptions{})
}

// StatusWith is Status with options.
func StatusWith(ctx context.Context, nc *nats.Conn, cluster string, o StatusOptions) ([]bus.NodeStatus, error) {
	subj, err := bus.NewSubjects(cluster)
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.SlowAfter <= 0 {
		o.SlowAfter = 250 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	q := &statusQuery{nc: nc, subj: subj, slowAfter: o.SlowAfter, ctx: ctx,
		nodes: make(map[string]*bus.NodeStatus), ids: make(map[string]map[string]bool), done: make(chan struct{})}
	// Every expected id is known before the first answer can check it.
	q.expect = append(q.expect, o.Expect...)
	for _, id := range o.Expect {
		q.ask(id)
	}
	ping, err := micro.ControlSubject(micro.PingVerb, bus.NodeServiceName, "")
	if err != nil {
		return nil, err
	}
	inbox := nc.NewInbox()
	sub, err := nc.Subscribe(inbox, q.onPing)
	if err != nil {
		return nil, fmt.Errorf("status: subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(ping, inbox, nil); err != nil {
		return nil, fmt.Errorf("status: ping %s: %w", ping, err)
	}
	if err := nc.FlushWithContext(ctx); err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	select {
	case <-ctx.Done():
	case <-q.done:
	}
	_ = sub.Unsubscribe()
	q.mu.Lock()
	q.closed = true // late pings start no new status requests
	q.mu.Unlock()
	q.wg.Wait() // each request ends by ctx at the latest

	q.mu.Lock() // a late ping may still be running onPing
	out := make([]bus.NodeStatus, 0, len(q.nodes))
	for id, st := range q.nodes {
		st.Instances = max(len(q.ids[id]), 1)
		if st.Health == "" {
			st.Health, st.Error = bus.HealthNoAnswer, "no status answer within "+o.Timeout.String()
		}
		out = append(out, *st)
	}
	q.mu.Unlock()
	slices.SortFunc(out, func(a, b bus.NodeStatus) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	answered := false
	for _, st := range out {
		answered = answered || st.Health != bus.HealthNoAnswer
	}
	if !answered {
		return out, fmt.Errorf("%w (cluster %s)", ErrNoNodes, cluster)
	}
	return out, nil
}

// statusQuery collects the answers of one Status call.
type statusQuery struct {
	nc        *nats.Conn
	subj      bus.Subjects
	slowAfter time.Duration
	ctx       context.Context
	expect    []string

	mu     sync.Mutex
	nodes  map[string]*bus.NodeStatus // by node id; Health "" while the status request is out
	ids    map[string]map[string]bool // node id -> micro instance ids seen (two: a duplicated id)
	closed bool
	wg     sync.WaitGroup
	done   chan struct{} // closed once every expected node has answered
	fired  bool
}

// onPing handles one micro PING reply.
func (q *statusQuery) onPing(m *nats.Msg) {
	var p micro.Ping
	if err := json.Unmarshal(m.Data, &p); err != nil || p.Name != bus.NodeServiceName || p.Metadata["cluster"] != q.subj.Cluster() {
		return // another cluster's node, or not a node
	}
	node := p.Metadata["node"]
	if bus.ValidName("node", node) != nil {
		return
	}
	q.mu.Lock()
	if q.closed { // a ping dispatched after the query ended: StatusWith reads ids now
		q.mu.Unlock()
		return
	}
	if q.ids[node] == nil {
		q.ids[node] = make(map[string]bool)
	}
	q.ids[node][p.ID] = true
	q.mu.Unlock()
	q.ask(node)
}

// ask sends node its status request, once.
func (q *statusQuery) ask(node string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.nodes[node] != nil {
		return
	}
	q.nodes[node] = &bus.NodeStatus{Node: node, Cluster: q.subj.Cluster()}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		st := q.request(node)
		q.mu.Lock()
		defer q.mu.Unlock()
		*q.nodes[node] = st
		q.checkDone()
	}()
}

// checkDone closes done when every expected node has answered (mu held).
func (q *statusQuery) checkDone() {
	if q.fired || len(q.expect) == 0 {
		return
	}
	for _, id := range q.expect {
		if st := q.nodes[id]; st == nil || st.Health == "" || st.Health == bus.HealthNoAnswer {
			return
		}
	}
	q.fired = true
	close(q.done)
}

// request asks one node for its status and judges the answer.
func (q *statusQuery) request(node string) bus.NodeStatus {
	sent := time.Now()
	m, err := q.nc.RequestWithContext(q.ctx, q.subj.Status(node), nil)
	recv := time.Now()
	st := bus.NodeStatus{Node: node, Cluster: q.subj.Cluster(), Health: bus.HealthNoAnswer}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		st.Error = "no status endpoint (node not running?)"
		return st
	case err != nil:
		st.Error = err.Error()
		return st
	case m.Header.Get(micro.ErrorHeader) != "":
		st.Error = "status endpoint: " + m.Header.Get(micro.ErrorHeader)
		return st
	}
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return bus.NodeStatus{Node: node, Cluster: q.subj.Cluster(), Health: bus.HealthNoAnswer, Error: "bad status answer: " + err.Error()}
	}
	st.Node, st.Error = node, ""
	st.RTT = recv.Sub(sent)
	// The node read its clock about half-way through the round trip.
	mid := sent.UnixNano() + st.RTT.Nanoseconds()/2
	st.Skew = time.Duration(st.Clock - mid)
	switch {
	case st.Failure != "":
		st.Health = bus.HealthFailed
	case st.ClockOff != "":
		st.Health = bus.HealthClockOff
	case st.DiskFull != "" || st.JetStream != "":
		st.Health = bus.HealthDegraded
	case st.RTT > q.slowAfter:
		st.Health = bus.HealthSlow
	default:
		st.Health = bus.HealthOK
	}
	return st
}
