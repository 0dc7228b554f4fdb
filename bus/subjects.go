package bus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadName is wrapped by every ValidName error.
var ErrBadName = errors.New("invalid name")

// ErrBadSubject is wrapped by every ParseSlot error.
var ErrBadSubject = errors.New("invalid subject")

// MaxNameLen is the longest cluster, node or topic name, in bytes.
const MaxNameLen = 128

// SubjectPrefix is the first token of every raidq subject.
const SubjectPrefix = "raidq"

// ValidName reports whether s is a valid cluster, node or topic name: 1 to
// MaxNameLen characters of [A-Za-z0-9_-]. Such names are safe as a single
// NATS subject token (no dots, wildcards or spaces) and as a file name. kind
// ("cluster", "node", "topic", ...) only names the thing in the error, which
// wraps ErrBadName and states the rule.
func ValidName(kind, s string) error {
	if len(s) == 0 {
		return fmt.Errorf("%w: %s name is empty: want 1..%d characters of [A-Za-z0-9_-]", ErrBadName, kind, MaxNameLen)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%w: %s name is %d bytes long: want 1..%d characters of [A-Za-z0-9_-]", ErrBadName, kind, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return fmt.Errorf("%w: %s name %q has %q at byte %d: want 1..%d characters of [A-Za-z0-9_-] (no dots, wildcards or spaces)",
				ErrBadName, kind, s, s[i], i, MaxNameLen)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// validNameFast is ValidName without building an error.
func validNameFast(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return false
		}
	}
	return true
}

// Subjects builds and parses the NATS subjects of one raidq cluster
// (docs/design.md#bus-subjects):
//
//	raidq.<cluster>.slot.<node>.<topic>.<partition>   write requests to a node
//	raidq.<cluster>.scan.<node>.<topic>.<partition>   scan (read) requests to a node
//	raidq.<cluster>.deliver.<topic>.<partition>       decoded records for subscribers
//	raidq.<cluster>.hb.<node>                         node heartbeats
//	raidq.<cluster>.status.<node>                     a node's status (its micro service endpoint)
//	raidq.<cluster>.fault.clock.<node>                a drill's clock offset for a node started with --clock-fault
//	raidq.<cluster>.indoubt.<topic>.<partition>       readers' in-doubt reports, for the nodes' repair loops
//
// Writes and scans travel on different subjects so that NATS permissions
// can let a user read a topic without writing it and the reverse (a
// producer may publish on slot.*.<topic>.*, a consumer on scan.*.<topic>.*;
// see auth.go). The message type also travels in the payload (DecodeRequest)
// and a node refuses a request whose type does not match its subject
// (ParseRequest). The zero value is not usable; build
// one with NewSubjects. The builders do not validate node and topic names:
// callers validate names once (ValidName) when they enter the system, and the
// builders stay allocation-light on the hot path.
type Subjects struct {
	cluster string
	slot    string // "raidq.<cluster>.slot."
	scan    string // "raidq.<cluster>.scan."
	deliver string // "raidq.<cluster>.deliver."
	hb      string // "raidq.<cluster>.hb."
	status  string // "raidq.<cluster>.status."
	clock   string // "raidq.<cluster>.fault.clock."
	indoubt string // "raidq.<cluster>.indoubt."
}

// NewSubjects returns the subjects of cluster, which must pass ValidName.
func NewSubjects(cluster string) (Subjects, error) {
	if err := ValidName("cluster", cluster); err != nil {
		return Subjects{}, err
	}
	base := SubjectPrefix + "." + cluster + "."
	return Subjects{cluster: cluster, slot: base + "slot.", scan: base + "scan.", deliver: base + "deliver.", hb: base + "hb.", status: base + "status.",
		clock: base + "fault.clock.", indoubt: base + "indoubt."}, nil
}

// Cluster returns the cluster name the subjects were built for.
func (s Subjects) Cluster() string { return s.cluster }

// Slot returns raidq.<cluster>.slot.<node>.<topic>.<partition>, the subject
// on which node serves write requests for one partition.
func (s Subjects) Slot(node, topic string, partition uint32) string {
	return nodeSubject(s.slot, node, topic, partition)
}

// Scan returns raidq.<cluster>.scan.<node>.<topic>.<partition>, the subject
// on which node serves scan (read) requests for one partition.
func (s Subjects) Scan(node, topic string, partition uint32) string {
	return nodeSubject(s.scan, node, topic, partition)
}

func nodeSubject(prefix, node, topic string, partition uint32) string {
	var buf [160]byte
	b := append(buf[:0], prefix...)
	b = append(b, node...)
	b = append(b, '.')
	b = append(b, topic...)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(partition), 10)
	return string(b)
}

// SlotAll returns raidq.<cluster>.slot.<node>.>, the wildcard a node
// subscribes to for all its write requests.
func (s Subjects) SlotAll(node string) string {
	return s.slot + node + ".>"
}

// ScanAll returns raidq.<cluster>.scan.<node>.>, the wildcard a node
// subscribes to for all its scan requests.
func (s Subjects) ScanAll(node string) string {
	return s.scan + node + ".>"
}

// Deliver returns raidq.<cluster>.deliver.<topic>.<partition>, where the
// fan-out reader publishes a partition's decoded records (docs/design.md#consumers-groups-and-fencing).
func (s Subjects) Deliver(topic string, partition uint32) string {
	return s.deliver + topic + "." + strconv.FormatUint(uint64(partition), 10)
}

// DeliverAll returns raidq.<cluster>.deliver.<topic>.*, every partition of a topic.
func (s Subjects) DeliverAll(topic string) string {
	return s.deliver + topic + ".*"
}

// Heartbeat returns raidq.<cluster>.hb.<node>, where node publishes its heartbeats.
func (s Subjects) Heartbeat(node string) string {
	return s.hb + node
}

// HeartbeatAll returns raidq.<cluster>.hb.*, every node's heartbeats.
func (s Subjects) HeartbeatAll() string {
	return s.hb + "*"
}

// Status returns raidq.<cluster>.status.<node>, the subject of node's status
// endpoint (a NATS micro service endpoint; see bus.NodeStatus).
func (s Subjects) Status(node string) string {
	return s.status + node
}

// FaultClock returns raidq.<cluster>.fault.clock.<node>, where a node
// started with a clock fault (failure drills: --clock-fault) takes
// requests to offset its clock. Only nodes and admins may publish on it.
func (s Subjects) FaultClock(node string) string {
	return s.clock + node
}

// InDoubt returns raidq.<cluster>.indoubt.<topic>.<partition>, where readers
// publish the offsets they skipped as in doubt (docs/design.md#read-path) so that the
// nodes' repair loops re-append those that later prove decodable.
func (s Subjects) InDoubt(topic string, partition uint32) string {
	return s.indoubt + topic + "." + strconv.FormatUint(uint64(partition), 10)
}

// InDoubtAll returns raidq.<cluster>.indoubt.>, every topic's in-doubt reports.
func (s Subjects) InDoubtAll() string { return s.indoubt + ">" }

// ParseSlot splits a slot (write) subject of this cluster into its node,
// topic and partition. It is strict: the subject must be exactly what Slot
// builds for valid names (so the partition is canonical decimal without
// sign or leading zeros). Errors wrap ErrBadSubject and say what is wrong.
func (s Subjects) ParseSlot(subject string) (node, topic string, partition uint32, err error) {
	return s.parseNodeSubject(subject, s.slot, "slot")
}

// ParseScan is ParseSlot for a scan subject (what Scan builds).
func (s Subjects) ParseScan(subject string) (node, topic string, partition uint32, err error) {
	return s.parseNodeSubject(subject, s.scan, "scan")
}

// ParseRequest parses a request subject of either kind: scan reports
// whether it is a scan subject (else it is a slot, write, subject).
func (s Subjects) ParseRequest(subject string) (scan bool, node, topic string, partition uint32, err error) {
	if s.scan != "" && strings.HasPrefix(subject, s.scan) {
		node, topic, partition, err = s.ParseScan(subject)
		return true, node, topic, partition, err
	}
	node, topic, partition, err = s.ParseSlot(subject)
	return false, node, topic, partition, err
}

func (s Subjects) parseNodeSubject(subject, prefix, kind string) (node, topic string, partition uint32, err error) {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok || prefix == "" {
		return "", "", 0, fmt.Errorf("%w: %q is not a %s subject of cluster %q (want %s<node>.<topic>.<partition>)",
			ErrBadSubject, subject, kind, s.cluster, prefix)
	}
	node, rest, ok1 := strings.Cut(rest, ".")
	topic, part, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(part, ".") {
		return "", "", 0, fmt.Errorf("%w: %q: want %s<node>.<topic>.<partition>", ErrBadSubject, subject, prefix)
	}
	if !validNameFast(node) {
		return "", "", 0, fmt.Errorf("%w: %q: %w", ErrBadSubject, subject, ValidName("node", node))
	}
	if !validNameFast(topic) {
		return "", "", 0, fmt.Errorf("%w: %q: %w", ErrBadSubject, subject, ValidName("topic", topic))
	}
	p, perr := strconv.ParseUint(part, 10, 32)
	if perr != nil || (len(part) > 1 && part[0] == '0') {
		return "", "", 0, fmt.Errorf("%w: %q: partition %q is not a canonical decimal uint32", ErrBadSubject, subject, part)
	}
	return node, topic, uint32(p), nil
}

// Wildcard patterns for permissions (package natsserver grants roles with
// them): every node's status endpoint and clock fault subject, and a topic's slot, scan, in-doubt
// and delivery subjects on every node and partition.
func (s Subjects) StatusAny() string               { return s.status + "*" }
func (s Subjects) FaultClockAny() string           { return s.clock + "*" }
func (s Subjects) SlotAnyNode(topic string) string { return s.slot + "*." + topic + ".*" }
func (s Subjects) ScanAnyNode(topic string) string { return s.scan + "*." + topic + ".*" }
func (s Subjects) InDoubtTopic(topic string) string {
	return s.indoubt + topic + ".*"
}
func (s Subjects) DeliverTopic(topic string) string { return s.deliver + topic + ".>" }
