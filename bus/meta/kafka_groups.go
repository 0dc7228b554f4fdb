package meta

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/bus"
)

// Kafka consumer groups (the classic protocol a Kafka gateway coordinates,
// actors/kafka/coordinator.go; the state machine is core.KafkaGroup).
//
// One record per group, `kgroup.<name>` in the groups bucket: the group's
// state as its coordinator last wrote it (generation, protocol, leader,
// members with their metadata and assignments) and its committed offsets.
// Every write is a compare-and-set on the record's KV revision, so two
// gateways that both think they coordinate a group cannot both move it to
// the same next generation.
//
// Key encoding. Kafka group ids are any string; KV keys allow only
// [-/_=.A-Za-z0-9]. A name made only of [A-Za-z0-9_-] (what raidq's own
// names allow, bus.ValidName's alphabet) is the key as is:
// `kgroup.orders-app`. Any other name is `kgroup.=` followed by the
// unpadded base64url of its bytes: `kgroup.=b3JkZXJzLmFwcA` for
// "orders.app". '=' is in no raw name, so the two forms never collide,
// and neither holds a dot, so `kgroup.*` lists them all.
//
// Name separation. A Kafka group and a native raidq group (the records
// `g.<group>.<topic>...`) never share a name: the Kafka coordinator
// refuses a name NativeGroupExists finds, and the native consumer refuses
// a name KafkaGroupExists finds. Each side checks when a group starts, so
// two starting within one KV round trip of each other could both pass.

// Limits of a Kafka group record, checked field by field when one is
// decoded or written. The record as a whole stays within MaxRecord.
const (
	// MaxKafkaGroupName bounds a group id, in bytes (Kafka's topic limit;
	// Kafka itself sets none on group ids).
	MaxKafkaGroupName = 249
	// MaxKafkaMembers bounds a group's members.
	MaxKafkaMembers = 256
	// MaxKafkaString bounds member, instance and client ids, client
	// hosts, protocol types and protocol names, in bytes.
	MaxKafkaString = 255
	// MaxKafkaMemberData bounds one member's protocol metadata, and one
	// member's assignment.
	MaxKafkaMemberData = 64 << 10
	// MaxKafkaOffsetMetadata bounds a committed offset's metadata string
	// (Kafka's offset.metadata.max.bytes).
	MaxKafkaOffsetMetadata = 4096
	// MaxKafkaPartitions bounds the partitions a group has offsets for.
	MaxKafkaPartitions = 10000
	// MaxKafkaTimeout bounds a member's session and rebalance timeouts.
	MaxKafkaTimeout = time.Hour
	// KafkaMembersBudget is what the members may take of a record, by
	// the coordinator core's upper-bound estimate of their encoding.
	KafkaMembersBudget = 144 << 10
	// KafkaOffsetsBudget is what the committed offsets may take of a
	// record, by KafkaOffsetCost and KafkaTopicCost (upper bounds).
	KafkaOffsetsBudget = 96 << 10
)

// KafkaGroupStates are the states a record may hold (Kafka's names;
// a Dead group has no record).
var KafkaGroupStates = []string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable"}

// KafkaGroup is a Kafka consumer group's record.
type KafkaGroup struct {
	Name         string        `json:"name"`
	Generation   int32         `json:"generation"`
	State        string        `json:"state"`
	ProtocolType string        `json:"protocol_type,omitempty"`
	Protocol     string        `json:"protocol,omitempty"`
	Leader       string        `json:"leader,omitempty"`
	Members      []KafkaMember `json:"members,omitempty"`
	// Offsets: topic → partition → committed offset.
	Offsets map[string]map[int32]KafkaOffset `json:"offsets,omitempty"`
	// Updated is when the record was written, unix ns of the writer's
	// clock: for people reading it, never compared.
	Updated int64 `json:"updated"`
}

// KafkaMember is one member of a Kafka group as its coordinator knows it.
// Metadata is its subscription for the group's protocol, Assignment what
// the leader gave it in the current generation.
type KafkaMember struct {
	ID         string   `json:"id"`
	InstanceID string   `json:"instance_id,omitempty"`
	ClientID   string   `json:"client_id,omitempty"`
	ClientHost string   `json:"client_host,omitempty"`
	Session    Duration `json:"session"`
	Rebalance  Duration `json:"rebalance"`
	Metadata   []byte   `json:"metadata,omitempty"`
	Assignment []byte   `json:"assignment,omitempty"`
}

// KafkaOffset is a committed offset: the next record to consume, the
// client's metadata string, and when it was committed (unix ns of the
// coordinator's clock, informational).
type KafkaOffset struct {
	Offset    int64  `json:"offset"`
	Metadata  string `json:"metadata,omitempty"`
	Committed int64  `json:"committed"`
}

const (
	kafkaGroupPrefix = "kgroup."
	kafkaEncoded     = "="
)

// ValidKafkaGroup checks a Kafka group id: 1..MaxKafkaGroupName bytes of
// UTF-8 (the record is JSON).
func ValidKafkaGroup(name string) error {
	if name == "" || len(name) > MaxKafkaGroupName {
		return fmt.Errorf("%w: Kafka group id of %d bytes: want 1..%d", bus.ErrBadName, len(name), MaxKafkaGroupName)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: Kafka group id %q is not UTF-8", bus.ErrBadName, name)
	}
	return nil
}

// KafkaGroupKey is the key of group name's record.
func KafkaGroupKey(name string) (string, error) {
	if err := ValidKafkaGroup(name); err != nil {
		return "", err
	}
	if rawKafkaName(name) {
		return kafkaGroupPrefix + name, nil
	}
	return kafkaGroupPrefix + kafkaEncoded + base64.RawURLEncoding.EncodeToString([]byte(name)), nil
}

// KafkaGroupName is KafkaGroupKey's inverse.
func KafkaGroupName(key string) (string, error) {
	rest, ok := strings.CutPrefix(key, kafkaGroupPrefix)
	if !ok {
		return "", fmt.Errorf("%w: %q is not a Kafka group key", ErrBadRecord, key)
	}
	name := rest
	if enc, ok := strings.CutPrefix(rest, kafkaEncoded); ok {
		b, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil {
			return "", fmt.Errorf("%w: Kafka group key %q: %v", ErrBadRecord, key, err)
		}
		name = string(b)
	}
	if k, err := KafkaGroupKey(name); err != nil || k != key {
		return "", fmt.Errorf("%w: Kafka group key %q is not canonical", ErrBadRecord, key)
	}
	return name, nil
}

func rawKafkaName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidKafkaTopic: Kafka's legal topic names, 1..249 of [A-Za-z0-9._-].
func ValidKafkaTopic(s string) bool {
	if s == "" || len(s) > 249 {
		return false
	}
	return rawKafkaName(strings.ReplaceAll(s, ".", "_"))
}

// KafkaOffsetCost bounds the encoded size of one committed partition
// with this metadata: digits of the partition, offset and time, the
// field names, and the metadata escaped at worst six bytes a byte.
func KafkaOffsetCost(metadata string) int { return 96 + 6*len(metadata) }

// KafkaTopicCost bounds the encoded size of a topic's entry in offsets,
// without its partitions.
func KafkaTopicCost(topic string) int { return 8 + len(topic) }

// Validate checks every field of the record.
func (g *KafkaGroup) Validate() error {
	if err := ValidKafkaGroup(g.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: Kafka group %q: %s", ErrBadRecord, g.Name, fmt.Sprintf(format, args...))
	}
	if g.Generation < 0 {
		return bad("negative generation %d", g.Generation)
	}
	if !slices.Contains(KafkaGroupStates, g.State) {
		return bad("state %q", g.State)
	}
	if g.State == "Empty" && len(g.Members) > 0 {
		return bad("empty but %d members", len(g.Members))
	}
	for _, s := range []string{g.ProtocolType, g.Protocol, g.Leader} {
		if !kafkaString(s) {
			return bad("protocol type, protocol or leader %q: want %d bytes of UTF-8 at most", s, MaxKafkaString)
		}
	}
	if err := g.validateMembers(); err != nil {
		return bad("%v", err)
	}
	if err := validateOffsets(g.Offsets); err != nil {
		return bad("%v", err)
	}
	return nil
}

func kafkaString(s string) bool { return len(s) <= MaxKafkaString && utf8.ValidString(s) }

func (g *KafkaGroup) validateMembers() error {
	if len(g.Members) > MaxKafkaMembers {
		return fmt.Errorf("%d members, limit %d", len(g.Members), MaxKafkaMembers)
	}
	ids := make(map[string]bool, len(g.Members))
	instances := make(map[string]bool)
	for _, m := range g.Members {
		if m.ID == "" || ids[m.ID] {
			return fmt.Errorf("empty or repeated member id %q", m.ID)
		}
		ids[m.ID] = true
		if m.InstanceID != "" && instances[m.InstanceID] {
			return fmt.Errorf("repeated instance id %q", m.InstanceID)
		}
		instances[m.InstanceID] = true
		for _, s := range []string{m.ID, m.InstanceID, m.ClientID, m.ClientHost} {
			if !kafkaString(s) {
				return fmt.Errorf("member %q: id, instance, client id or host %q: want %d bytes of UTF-8 at most", m.ID, s, MaxKafkaString)
			}
		}
		for _, d := range []Duration{m.Session, m.Rebalance} {
			if d <= 0 || time.Duration(d) > MaxKafkaTimeout {
				return fmt.Errorf("member %q: timeout %v: want (0, %v]", m.ID, time.Duration(d), MaxKafkaTimeout)
			}
		}
		if len(m.Metadata) > MaxKafkaMemberData || len(m.Assignment) > MaxKafkaMemberData {
			return fmt.Errorf("member %q: metadata or assignment over %d bytes", m.ID, MaxKafkaMemberData)
		}
	}
	if g.Leader != "" && !ids[g.Leader] {
		return fmt.Errorf("leader %q is not a member", g.Leader)
	}
	return nil
}

func validateOffsets(offsets map[string]map[int32]KafkaOffset) error {
	n := 0
	for topic, parts := range offsets {
		if !ValidKafkaTopic(topic) {
			return fmt.Errorf("offsets: topic %q: want 1..249 of [A-Za-z0-9._-]", topic)
		}
		for p, o := range parts {
			n++
			if p < 0 || o.Offset < -1 {
				return fmt.Errorf("offsets: %s/%d: partition or offset %d out of range", topic, p, o.Offset)
			}
			if len(o.Metadata) > MaxKafkaOffsetMetadata || !utf8.ValidString(o.Metadata) {
				return fmt.Errorf("offsets: %s/%d: metadata: want %d bytes of UTF-8 at most", topic, p, MaxKafkaOffsetMetadata)
			}
		}
	}
	if n > MaxKafkaPartitions {
		return fmt.Errorf("offsets for %d partitions, limit %d", n, MaxKafkaPartitions)
	}
	return nil
}

// DecodeKafkaGroup decodes and validates a Kafka group record.
func DecodeKafkaGroup(b []byte) (KafkaGroup, error) {
	var g KafkaGroup
	if err := decode(b, &g); err != nil {
		return g, err
	}
	return g, g.Validate()
}

// EncodeKafkaGroup validates and encodes a record, refusing one over
// MaxRecord (ErrBadRecord).
func EncodeKafkaGroup(g *KafkaGroup) ([]byte, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("%w: Kafka group %q: %v", ErrBadRecord, g.Name, err)
	}
	if len(b) > MaxRecord {
		return nil, fmt.Errorf("%w: Kafka group %q: %d bytes, limit %d", ErrBadRecord, g.Name, len(b), MaxRecord)
	}
	return b, nil
}

// KafkaGroup reads group name's record and its revision (0 and a zero
// record: there is none).
func (s *Store) KafkaGroup(ctx context.Context, name string) (KafkaGroup, uint64, error) {
	key, err := KafkaGroupKey(name)
	if err != nil {
		return KafkaGroup{}, 0, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	e, err := s.groups.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return KafkaGroup{}, 0, nil
	}
	if err != nil {
		return KafkaGroup{}, 0, err
	}
	g, err := DecodeKafkaGroup(e.Value())
	if err == nil && g.Name != name {
		err = fmt.Errorf("%w: key %s holds group %q", ErrBadRecord, key, g.Name)
	}
	if err != nil {
		return KafkaGroup{}, 0, err
	}
	return g, e.Revision(), nil
}

// PutKafkaGroup writes g if its record is still at revision rev (0: there
// must be none) and returns the new revision; ErrFenced if it changed.
func (s *Store) PutKafkaGroup(ctx context.Context, g *KafkaGroup, rev uint64) (uint64, error) {
	key, err := KafkaGroupKey(g.Name)
	if err != nil {
		return 0, err
	}
	b, err := EncodeKafkaGroup(g)
	if err != nil {
		return 0, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var nrev uint64
	if rev == 0 {
		nrev, err = s.groups.Create(ctx, key, b)
	} else {
		nrev, err = s.groups.Update(ctx, key, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%w: Kafka group %q", ErrFenced, g.Name)
	}
	return nrev, err
}

// DeleteKafkaGroup deletes group name's record if it is still at revision
// rev (ErrFenced if it changed).
func (s *Store) DeleteKafkaGroup(ctx context.Context, name string, rev uint64) error {
	key, err := KafkaGroupKey(name)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	err = s.groups.Delete(ctx, key, jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("%w: Kafka group %q", ErrFenced, name)
	}
	return err
}

// KafkaGroups lists every Kafka group record, sorted by name.
func (s *Store) KafkaGroups(ctx context.Context) ([]KafkaGroup, error) {
	var out []KafkaGroup
	err := s.eachEntry(ctx, s.groups, kafkaGroupPrefix+"*", func(e jetstream.KeyValueEntry) error {
		name, err := KafkaGroupName(e.Key())
		if err != nil {
			return err
		}
		g, err := DecodeKafkaGroup(e.Value())
		if err == nil && g.Name != name {
			err = fmt.Errorf("%w: holds group %q", ErrBadRecord, g.Name)
		}
		if err == nil {
			out = append(out, g)
		}
		return err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// KafkaGroupExists reports whether a Kafka group of this name has a record.
func (s *Store) KafkaGroupExists(ctx context.Context, name string) (bool, error) {
	if ValidKafkaGroup(name) != nil {
		return false, nil
	}
	_, rev, err := s.KafkaGroup(ctx, name)
	if errors.Is(err, ErrBadRecord) {
		return true, nil // a record is there, even if unreadable
	}
	return rev != 0, err
}

// NativeGroupExists reports whether a native raidq group of this name has
// any record (a member's heartbeat or a partition's position, under
// `g.<name>.`). A name bus.ValidName refuses has none.
func (s *Store) NativeGroupExists(ctx context.Context, name string) (bool, error) {
	if bus.ValidName("group", name) != nil {
		return false, nil
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	lister, err := s.groups.ListKeysFiltered(ctx, "g."+name+".>")
	if err != nil {
		return false, err
	}
	defer func() { _ = lister.Stop() }()
	if _, ok := <-lister.Keys(); ok {
		return true, nil
	}
	// nats.go ends the key channel quietly when ctx expires: a listing
	// cut short is not an empty one.
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("listing native group %s: incomplete: %w", name, err)
	}
	return false, nil
}
