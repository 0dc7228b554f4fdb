package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus"
)

// A clock fault for failure drills (NodeOptions.ClockFault, the hidden
// flag --clock-fault of `raidq node`): Go reads the wall clock through
// the vDSO, so fake-time preload libraries cannot step one node's clock
// at run time. A node started with a clock fault reads its clock as
// NodeOptions.Now plus an offset, and sets the offset on request on
// raidq.<cluster>.fault.clock.<node> (bus.Subjects.FaultClock; nodes and
// admins may publish there). Everything of the node that reads the wall
// clock takes it from that one clock: the slot owners and their seals,
// the clock floor, a new incarnation's birth, the clock watch, status
// replies, the member record's heartbeat. The fan-out (its lease timers
// and its readers) keeps the process clock.

// MaxClockFault bounds a clock fault's offset either way.
const MaxClockFault = time.Hour

// clockFaultCheckEvery is how often a node with a clock fault checks its
// clock against its peers' (5 s otherwise): a drill's steps of a few
// seconds show in its status within about a second.
const clockFaultCheckEvery = time.Second

// ClockFaultRequest sets a clock fault's offset: the node's clock is then
// its real clock plus OffsetNS nanoseconds (within ±MaxClockFault; 0: the
// real clock). OffsetNS is required.
type ClockFaultRequest struct {
	OffsetNS *int64 `json:"offset_ns"`
}

// ClockFaultReply is the answer to a ClockFaultRequest: the offset now in
// force and the node's clock (unix ns) just after it was set, or Error
// (nothing changed).
type ClockFaultReply struct {
	OffsetNS int64  `json:"offset_ns"`
	Clock    int64  `json:"clock,omitempty"`
	Error    string `json:"error,omitempty"`
}

// ErrClockFault is wrapped by SetClockFault's errors that the node
// answered (a bad request).
var ErrClockFault = errors.New("clock fault refused")

// clockFault is a node's clock with an offset (NodeOptions.ClockFault).
type clockFault struct {
	base   func() int64
	offset atomic.Int64
}

// now is the node's clock: the base clock plus the offset.
func (f *clockFault) now() int64 { return f.base() + f.offset.Load() }

// parseClockFault decodes and checks a request.
func parseClockFault(data []byte) (int64, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return 0, errors.New(`empty request: want {"offset_ns": N}, N within ±1h in nanoseconds`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var req ClockFaultRequest
	if err := dec.Decode(&req); err != nil {
		return 0, fmt.Errorf(`bad request: %v: want {"offset_ns": N}, N within ±1h in nanoseconds`, err)
	}
	if dec.More() {
		return 0, errors.New(`bad request: data after the JSON object: want {"offset_ns": N}`)
	}
	if req.OffsetNS == nil {
		return 0, errors.New(`bad request: offset_ns is missing: want {"offset_ns": N}, N within ±1h in nanoseconds`)
	}
	if off := *req.OffsetNS; off > int64(MaxClockFault) || off < -int64(MaxClockFault) {
		return 0, fmt.Errorf("bad request: offset_ns %d (%v) is beyond ±%v", off, time.Duration(off), MaxClockFault)
	}
	return *req.OffsetNS, nil
}

// serveClockFault answers clock fault requests on the node's subject.
func (n *Node) serveClockFault() error {
	subj, err := bus.NewSubjects(n.opts.Cluster)
	if err != nil {
		return err
	}
	f := n.clockFault
	sub, err := n.nc.Subscribe(subj.FaultClock(n.opts.ID), func(m *nats.Msg) {
		var rep ClockFaultReply
		off, err := parseClockFault(m.Data)
		if err != nil {
			rep.OffsetNS, rep.Error = f.offset.Load(), err.Error()
			n.log.Warn("clock fault: request refused", "err", err)
		} else {
			was := f.offset.Swap(off)
			rep.OffsetNS, rep.Clock = off, f.now()
			n.log.Warn("clock fault: node clock offset set (failure drill)", "offset", time.Duration(off), "was", time.Duration(was))
		}
		b, _ := json.Marshal(rep)
		if m.Reply != "" {
			_ = m.Respond(b)
		}
	})
	if err != nil {
		return fmt.Errorf("node %s: clock fault subscription: %w", n.opts.ID, err)
	}
	n.clockFaultSub = sub
	n.log.Warn("clock fault enabled (failure drills): the node's clock can be offset on request", "subject", sub.Subject)
	return nil
}

// ClockOffset is the node's clock fault offset (0 without NodeOptions.ClockFault).
func (n *Node) ClockOffset() time.Duration {
	if n.clockFault == nil {
		return 0
	}
	return time.Duration(n.clockFault.offset.Load())
}

// SetClockFault asks node (started with a clock fault) of cluster, over
// nc, to offset its clock by offset. An answered refusal wraps
// ErrClockFault; a node without a clock fault does not answer
// (nats.ErrNoResponders).
func SetClockFault(ctx context.Context, nc *nats.Conn, cluster, node string, offset time.Duration) (ClockFaultReply, error) {
	subj, err := bus.NewSubjects(cluster)
	if err != nil {
		return ClockFaultReply{}, err
	}
	if err := bus.ValidName("node", node); err != nil {
		return ClockFaultReply{}, err
	}
	off := int64(offset)
	b, _ := json.Marshal(ClockFaultRequest{OffsetNS: &off})
	return requestClockFault(ctx, nc, subj.FaultClock(node), b)
}

// requestClockFault sends one raw request and decodes the answer.
func requestClockFault(ctx context.Context, nc *nats.Conn, subject string, data []byte) (ClockFaultReply, error) {
	m, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return ClockFaultReply{}, fmt.Errorf("clock fault on %s: %w", subject, err)
	}
	var rep ClockFaultReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return rep, fmt.Errorf("clock fault on %s: bad answer %q: %w", subject, m.Data, err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("%w: %s", ErrClockFault, rep.Error)
	}
	return rep, nil
}

// clockCheckEvery is node.Config.ClockCheckEvery: every second with a
// clock fault, the default otherwise.
func (n *Node) clockCheckEvery() time.Duration {
	if n.clockFault != nil {
		return clockFaultCheckEvery
	}
	return 0
}
