// Package meta keeps raidq's metadata in NATS JetStream key-value buckets
// (docs/design.md#metadata-in-jetstream-kv): cluster members, topics and their ensembles, consumer group
// positions and leases. It is off the write path: nodes and producers work
// from a cached catalog that a watcher keeps current.
package meta

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/stripe/quorum"
)

// Errors.
var (
	ErrTopicExists = errors.New("topic already exists")
	ErrNotFound    = errors.New("not found")
	// ErrFenced: a compare-and-set lost: someone else (a newer group
	// member, another lease holder) wrote the entry since it was read.
	ErrFenced = errors.New("fenced: the entry changed since it was read")
	// ErrBadRecord wraps every decoding/validation error of a KV record.
	ErrBadRecord = errors.New("bad metadata record")
	// ErrNoMetadata: no raidq metadata buckets on this NATS system.
	ErrNoMetadata = errors.New("no raidq metadata on this NATS system")
)

// MaxRecord bounds a metadata value.
const MaxRecord = 256 << 10

// Member is one storage node's record, refreshed by its heartbeat.
type Member struct {
	ID          string `json:"id"`
	ClientURL   string `json:"client_url,omitempty"`
	Started     int64  `json:"started"`   // unix ns
	Heartbeat   int64  `json:"heartbeat"` // unix ns of the last refresh, node clock
	Incarnation string `json:"incarnation,omitempty"`
	Version     string `json:"version,omitempty"`
}

// Validate checks a member record.
func (m *Member) Validate() error {
	if err := bus.ValidName("node id", m.ID); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	return nil
}

// TopicRecord is a topic as stored: parameters, ensembles, creation time.
type TopicRecord struct {
	Name           string     `json:"name"`
	Partitions     int        `json:"partitions"`
	N              int        `json:"n"`
	K              int        `json:"k"`
	W              int        `json:"w"`
	ReadDelay      Duration   `json:"read_delay"`
	AcceptWindow   Duration   `json:"accept_window"`
	FutureBound    Duration   `json:"future_bound"`
	MaxSkew        Duration   `json:"max_skew"`
	Retention      Duration   `json:"retention,omitempty"`
	RetentionBytes int64      `json:"retention_bytes,omitempty"`
	Ensembles      [][]string `json:"ensembles"`
	Created        uint64     `json:"created"`

	// Grid is the offset grid in ns (docs/design.md#kafka-offsets): a
	// power of two up to quorum.MaxGrid, or 0. Records written before
	// the grid existed have no field and decode to 0 (no grid); it is
	// never changed after creation.
	Grid uint64 `json:"grid,omitempty"`

	// PrevAcceptWindow and AcceptFrom are a pending change of the accept
	// window (quorum.AcceptPlan, `topic alter`): owner ranges starting
	// before AcceptFrom keep PrevAcceptWindow, later ones use
	// AcceptWindow. AcceptFrom 0: none.
	PrevAcceptWindow Duration `json:"prev_accept_window,omitempty"`
	AcceptFrom       uint64   `json:"accept_from,omitempty"`
}

// AcceptPlan returns the topic's accept window over offsets.
func (r *TopicRecord) AcceptPlan() quorum.AcceptPlan {
	a := int64(r.AcceptWindow)
	if r.AcceptFrom == 0 {
		return quorum.AcceptPlan{Prev: a, Next: a}
	}
	return quorum.AcceptPlan{Prev: int64(r.PrevAcceptWindow), Next: a, From: r.AcceptFrom}
}

// Params returns the topic's quorum parameters.
func (r *TopicRecord) Params() quorum.Params {
	return quorum.Params{N: r.N, K: r.K, W: r.W, ReadDelay: time.Duration(r.ReadDelay),
		AcceptWindow: time.Duration(r.AcceptWindow), FutureBound: time.Duration(r.FutureBound), MaxSkew: time.Duration(r.MaxSkew),
		Grid: r.Grid}
}

// Topic converts the record to the catalog's form.
func (r *TopicRecord) Topic() *Topic {
	return &Topic{Name: r.Name, Partitions: r.Partitions, Params: r.Params(), Ensembles: r.Ensembles, Created: r.Created,
		Retention: time.Duration(r.Retention), RetentionBytes: r.RetentionBytes, Accept: r.AcceptPlan()}
}

// Validate checks every field, so a bad record never reaches a node.
func (r *TopicRecord) Validate() error {
	if err := bus.ValidName("topic", r.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if r.Retention < 0 || r.RetentionBytes < 0 {
		return fmt.Errorf("%w: topic %q: negative retention", ErrBadRecord, r.Name)
	}
	if err := r.Topic().Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if err := r.validatePlan(); err != nil {
		return err
	}
	for p, e := range r.Ensembles {
		seen := make(map[string]bool)
		for _, id := range e {
			if err := bus.ValidName("node id", id); err != nil || seen[id] {
				return fmt.Errorf("%w: topic %q partition %d: bad or repeated node %q in ensemble", ErrBadRecord, r.Name, p, id)
			}
			seen[id] = true
		}
	}
	return nil
}

// validatePlan checks a pending accept-window change: on a range boundary,
// a positive previous window, and a read delay covering both windows.
func (r *TopicRecord) validatePlan() error {
	if r.AcceptFrom == 0 {
		if r.PrevAcceptWindow != 0 {
			return fmt.Errorf("%w: topic %q: previous accept window without a switch offset", ErrBadRecord, r.Name)
		}
		return nil
	}
	switch {
	case r.AcceptFrom%quorum.RangeAlign != 0:
		return fmt.Errorf("%w: topic %q: accept window switch at %d, not a range boundary", ErrBadRecord, r.Name, r.AcceptFrom)
	case r.PrevAcceptWindow <= 0:
		return fmt.Errorf("%w: topic %q: previous accept window %v must be positive", ErrBadRecord, r.Name, time.Duration(r.PrevAcceptWindow))
	case r.ReadDelay < r.PrevAcceptWindow:
		return fmt.Errorf("%w: topic %q: read delay %v below the accept window %v still in force", ErrBadRecord, r.Name,
			time.Duration(r.ReadDelay), time.Duration(r.PrevAcceptWindow))
	}
	return nil
}

// Duration is a time.Duration stored as a Go duration string ("500ms").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// decode unmarshals a record with a size limit.
func decode(b []byte, v any) error {
	if len(b) > MaxRecord {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrBadRecord, len(b), MaxRecord)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	return nil
}

// DecodeTopic decodes and validates a topic record.
func DecodeTopic(b []byte) (TopicRecord, error) {
	var r TopicRecord
	if err := decode(b, &r); err != nil {
		return r, err
	}
	return r, r.Validate()
}

// DecodeMember decodes and validates a member record.
func DecodeMember(b []byte) (Member, error) {
	var m Member
	if err := decode(b, &m); err != nil {
		return m, err
	}
	return m, m.Validate()
}
