package node

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus"
)

// A node's defences against requests that do not belong (docs/security.md):
//
//   - writes and scans arrive on separate subjects (bus.Subjects Slot and
//     Scan), so NATS permissions can grant one without the other; a
//     request whose type does not match its subject is refused, else a
//     user allowed to scan a topic could write it through the scan subject;
//   - the topic and partition of the subject must match the payload's, and
//     the metadata (topic known, partition in range, this node in the
//     ensemble, shard index and shape at this node's position);
//   - the repair flag is refused from the wire: repair writes come only
//     from the node's own repair loop (repair_write.go), never over NATS;
//   - undecodable payloads are refused before anything else is done.
//
// Each refusal answers BAD_REQUEST (or WRONG_NODE), counts in BadRequests
// and in one of Malformed, Mismatches, ForgedRepairs (status: "counters").

// Pending limits of the two subscriptions: writes carry shards (up to
// bus.MaxShard each), scans are small.
const (
	slotPendingBytes = 512 << 20
	scanPendingBytes = 64 << 20
)

// subscribe subscribes the node to its write and scan subjects.
func (n *Node) subscribe() error {
	var err error
	n.sub, err = n.cfg.Conn.Subscribe(n.subjects.SlotAll(n.cfg.ID), n.handle)
	if err != nil {
		return err
	}
	_ = n.sub.SetPendingLimits(n.cfg.MaxPending, slotPendingBytes)
	n.scanSub, err = n.cfg.Conn.Subscribe(n.subjects.ScanAll(n.cfg.ID), n.handle)
	if err != nil {
		_ = n.sub.Unsubscribe()
		return err
	}
	_ = n.scanSub.SetPendingLimits(n.cfg.MaxPending, scanPendingBytes)
	return nil
}

// unsubscribe drops both subscriptions at once (Kill, failed start).
func (n *Node) unsubscribe() {
	if n.sub != nil {
		_ = n.sub.Unsubscribe()
	}
	if n.scanSub != nil {
		_ = n.scanSub.Unsubscribe()
	}
}

// drainSubs drains both subscriptions (the requests already received are
// handled) and waits until they are closed or ctx ends.
func (n *Node) drainSubs(ctx context.Context) error {
	var first error
	for _, sub := range []*nats.Subscription{n.sub, n.scanSub} {
		if sub == nil {
			continue
		}
		if err := sub.Drain(); err != nil && first == nil {
			first = err
		}
	}
	for _, sub := range []*nats.Subscription{n.sub, n.scanSub} {
		for sub != nil && sub.IsValid() && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}
	return first
}

// mismatch refuses a request whose subject, payload and metadata disagree.
func (n *Node) mismatch(s bus.Status, format string, args ...any) (*slotRequest, bus.Status, string) {
	n.stats.Mismatches.Add(1)
	return nil, s, fmt.Sprintf(format, args...)
}

// checkKind refuses a write on a scan subject, a scan on a write subject
// and a repair write from the wire.
func (n *Node) checkKind(scanSubject bool, r *slotRequest) (bus.Status, string) {
	switch {
	case scanSubject && r.write != nil:
		n.stats.Mismatches.Add(1)
		return bus.StatusBadRequest, "a write request on a scan subject: writes go to " + n.subjects.Slot(n.cfg.ID, r.write.Topic, r.partition)
	case !scanSubject && r.scan != nil:
		n.stats.Mismatches.Add(1)
		return bus.StatusBadRequest, "a scan request on a write subject: scans go to " + n.subjects.Scan(n.cfg.ID, r.scan.Topic, r.partition)
	case r.write != nil && r.write.Repair:
		n.stats.ForgedRepairs.Add(1)
		return bus.StatusBadRequest, "repair writes are accepted only from the node's own repair loop"
	}
	return 0, ""
}
