package raidq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The pure parts of group administration (groups_admin.go does the I/O):
// where a reset moves a position, the lag arithmetic, which members are
// live, and Kafka offsets and assignments. No I/O, no clock: the time is
// an argument.

// resetKind says what a ResetTo names.
type resetKind int

const (
	resetNone resetKind = iota
	resetEarliest
	resetLatest
	resetTime
	resetAgo
)

// ResetTo is where ResetGroup moves a group's positions: ResetEarliest,
// ResetLatest, ResetToTime or ResetAgo (ParseResetTo reads the CLI's
// --to). The zero value names nothing and is refused.
type ResetTo struct {
	kind resetKind
	t    time.Time
	ago  time.Duration
}

// ResetEarliest is the topic's first position: its creation, or its
// retention floor (now minus the retention) when that is later.
func ResetEarliest() ResetTo { return ResetTo{kind: resetEarliest} }

// ResetLatest is the readable frontier, now minus the topic's read delay:
// a member starting there skips what was written before and misses
// nothing written after (as Kafka's "latest" through the gateway).
func ResetLatest() ResetTo { return ResetTo{kind: resetLatest} }

// ResetToTime is the first position at or after t (positions are time).
func ResetToTime(t time.Time) ResetTo { return ResetTo{kind: resetTime, t: t} }

// ResetAgo is the position d before now (d > 0).
func ResetAgo(d time.Duration) ResetTo { return ResetTo{kind: resetAgo, ago: d} }

// ParseResetTo reads "earliest", "latest", an RFC 3339 time or a negative
// duration such as "-10m" (that long before now).
func ParseResetTo(s string) (ResetTo, error) {
	switch s {
	case "earliest":
		return ResetEarliest(), nil
	case "latest":
		return ResetLatest(), nil
	}
	if strings.HasPrefix(s, "-") {
		d, err := time.ParseDuration(s[1:])
		if err != nil || d <= 0 {
			return ResetTo{}, fmt.Errorf("%w: %q: want earliest, latest, an RFC 3339 time or -DURATION (e.g. -10m)", ErrBadReset, s)
		}
		return ResetAgo(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return ResetTo{}, fmt.Errorf("%w: %q: want earliest, latest, an RFC 3339 time or -DURATION (e.g. -10m)", ErrBadReset, s)
	}
	return ResetToTime(t), nil
}

// String is the target as ParseResetTo reads it.
func (r ResetTo) String() string {
	switch r.kind {
	case resetEarliest:
		return "earliest"
	case resetLatest:
		return "latest"
	case resetTime:
		return r.t.UTC().Format(time.RFC3339Nano)
	case resetAgo:
		return "-" + r.ago.String()
	}
	return "none"
}

// topicTimes is what resolving a target needs of a topic.
type topicTimes struct {
	created   uint64        // unix ns
	retention time.Duration // 0: forever
	readDelay time.Duration
}

// resolve is the offset (unix ns) the target names for a topic at now.
// A position before the topic's creation is raised to it (nothing exists
// there); one after now is refused: it would skip records not yet written.
func (r ResetTo) resolve(now time.Time, t topicTimes) (uint64, error) {
	var at int64
	switch r.kind {
	case resetEarliest:
		at = int64(t.created)
		if t.retention > 0 {
			at = max(at, now.Add(-t.retention).UnixNano())
		}
	case resetLatest:
		at = now.Add(-t.readDelay).UnixNano()
	case resetTime:
		at = r.t.UnixNano()
	case resetAgo:
		if r.ago <= 0 {
			return 0, fmt.Errorf("%w: -%v: the duration must be positive", ErrBadReset, r.ago)
		}
		at = now.Add(-r.ago).UnixNano()
	default:
		return 0, fmt.Errorf("%w: no target given", ErrBadReset)
	}
	if at > now.UnixNano() {
		return 0, fmt.Errorf("%w: %s is in the future", ErrBadReset, r)
	}
	return max(uint64(max(at, 0)), t.created), nil
}

// lagScan is what a scan from a committed position toward the readable
// frontier found (groups_admin.go, scanLag).
type lagScan struct {
	done    bool   // the scan reached the frontier: every record below it was seen
	first   uint64 // offset of the first record at or after the position; 0: none seen
	records int64  // records seen at or after the position, below the frontier
}

// partitionLag is a partition's lag behind the readable frontier head
// (unix ns) from its committed offset and, if one ran (scan non-nil),
// what a scan found:
//   - time: head minus the oldest unread record's offset when the scan
//     found one; 0 when the scan reached head and found none (caught up,
//     however old the position); else head minus the position, an upper
//     bound (the records after it may be younger);
//   - records: the scan's count, exact when it reached head, a lower bound
//     (atLeast) when it stopped at its limit or deadline; -1 when no scan
//     ran or it counted nothing before stopping (not countable).
func partitionLag(head, committed uint64, scan *lagScan) (lag time.Duration, records int64, atLeast bool) {
	behind := func(o uint64) time.Duration {
		if o >= head {
			return 0
		}
		return time.Duration(head - o)
	}
	if scan == nil {
		return behind(committed), -1, false
	}
	switch {
	case scan.first != 0:
		lag = behind(scan.first)
	case scan.done:
		lag = 0
	default:
		lag = behind(committed)
	}
	switch {
	case scan.done:
		return lag, scan.records, false
	case scan.records > 0:
		return lag, scan.records, true
	}
	return lag, -1, false
}

// liveMembers judges which members are live from two listings of their
// heartbeat records' revisions taken some time apart (keys "topic/member"):
// live if its record appeared or its revision changed in between, as the
// members judge each other (core.Liveness: on revisions, never on another
// clock's timestamps). A member whose record stayed the same is not
// heartbeating (crashed, or paused by a metadata stall). With no second
// listing (after nil) every listed member counts as live: the careful
// answer when liveness was not watched.
func liveMembers(before, after map[string]uint64) map[string]bool {
	live := make(map[string]bool)
	if after == nil {
		for k := range before {
			live[k] = true
		}
		return live
	}
	for k, rev := range after {
		if old, ok := before[k]; !ok || old != rev {
			live[k] = true
		}
	}
	return live
}

// kafkaOffset is a position as a Kafka offset on a topic with an offset
// grid (offset + index, docs/design.md#kafka-offsets); -1 without one.
func kafkaOffset(p Position, grid uint64) int64 {
	if grid == 0 {
		return -1
	}
	return int64(p.Offset + uint64(p.Index))
}

// kafkaPosition is a committed Kafka offset as a position on a gridded
// topic: the stripe's offset is the offset rounded down to the grid, the
// record index the rest.
func kafkaPosition(off int64, grid uint64) Position {
	if off < 0 {
		return Position{}
	}
	if grid == 0 {
		return Position{Offset: uint64(off)}
	}
	o := uint64(off)
	return Position{Offset: o - o%grid, Index: uint32(o % grid)}
}

// kafkaAssignment decodes a Kafka consumer protocol assignment (the
// "consumer" protocol type, versions 0..3, which share their leading
// fields: version int16, then an array of topic string and int32
// partitions), giving topic -> partitions. User data after them is left.
func kafkaAssignment(b []byte) (map[string][]int32, error) {
	bad := errors.New("kafka assignment: truncated")
	if len(b) < 6 {
		return nil, bad
	}
	if v := int16(binary.BigEndian.Uint16(b)); v < 0 || v > 3 {
		return nil, fmt.Errorf("kafka assignment: version %d", v)
	}
	n := int32(binary.BigEndian.Uint32(b[2:]))
	b = b[6:]
	out := make(map[string][]int32)
	for i := int32(0); i < n; i++ {
		if len(b) < 2 {
			return nil, bad
		}
		l := int(int16(binary.BigEndian.Uint16(b)))
		if l < 0 || len(b) < 2+l+4 {
			return nil, bad
		}
		topic := string(b[2 : 2+l])
		b = b[2+l:]
		np := int(int32(binary.BigEndian.Uint32(b)))
		b = b[4:]
		if np < 0 || len(b) < 4*np {
			return nil, bad
		}
		for j := 0; j < np; j++ {
			out[topic] = append(out[topic], int32(binary.BigEndian.Uint32(b[4*j:])))
		}
		b = b[4*np:]
	}
	return out, nil
}
