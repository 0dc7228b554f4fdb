package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/stripe/quorum"
)

// Options configure Open.
type Options struct {
	// Create makes the buckets if they are missing (nodes do; clients only bind).
	Create bool
	// Replicas of each bucket (nodes pass min(5, servers) so metadata
	// survives two of six servers down). Default 1.
	Replicas int
	// Timeout bounds every KV call (default 5s).
	Timeout time.Duration
	Logger  *slog.Logger
}

// attemptTimeout bounds one try at binding the buckets in Open.
const attemptTimeout = 2 * time.Second

// Store is the metadata of one raidq cluster.
type Store struct {
	cluster string
	js      jetstream.JetStream
	meta    jetstream.KeyValue
	groups  jetstream.KeyValue
	opts    Options
}

// Bucket names for a cluster.
func metaBucket(cluster string) string   { return "raidq_" + cluster + "_meta" }
func groupsBucket(cluster string) string { return "raidq_" + cluster + "_groups" }

// Open binds (or with Create, makes) the cluster's buckets. Creating waits,
// within ctx, for JetStream to elect its meta leader.
func Open(ctx context.Context, nc *nats.Conn, cluster string, o Options) (*Store, error) {
	if err := bus.ValidName("cluster", cluster); err != nil {
		return nil, err
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(o.Timeout))
	if err != nil {
		return nil, err
	}
	s := &Store{cluster: cluster, js: js, opts: o}
	for {
		// Bound each attempt: a JetStream request sent while the cluster
		// is still electing its meta leader can go unanswered, and one
		// attempt must not eat the caller's whole deadline.
		actx, cancel := context.WithTimeout(ctx, min(o.Timeout, attemptTimeout))
		err = s.bind(actx)
		cancel()
		if err == nil || !retryable(err) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("metadata for cluster %q: JetStream not ready: %w (last error: %v)", cluster, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) bind(ctx context.Context) error {
	var err error
	if s.opts.Create {
		s.meta, err = s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: metaBucket(s.cluster),
			Description: "raidq metadata: members, topics", Replicas: s.replicas(ctx, metaBucket(s.cluster)), History: 1,
			MaxValueSize: MaxRecord, Storage: jetstream.FileStorage})
		if err == nil {
			err = s.bindGroups(ctx)
		}
		return err
	}
	s.meta, err = s.js.KeyValue(ctx, metaBucket(s.cluster))
	if err == nil {
		s.groups, err = s.js.KeyValue(ctx, groupsBucket(s.cluster))
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("%w for cluster %q (bucket %s): is a raidq node of that cluster running?", ErrNoMetadata, s.cluster, metaBucket(s.cluster))
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrJetStreamNotEnabled) {
		return fmt.Errorf("%w: JetStream is not enabled on this NATS system: %v", ErrNoMetadata, err)
	}
	return err
}

// replicas is the replica count to create or update bucket with: the
// configured one, but never fewer than an existing bucket has. A node
// started while a server is down counts fewer servers (a replacement
// node most of all), and updating the bucket with that count would
// shrink it for good.
func (s *Store) replicas(ctx context.Context, bucket string) int {
	st, err := s.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return s.opts.Replicas
	}
	if have := st.CachedInfo().Config.Replicas; have > s.opts.Replicas {
		s.opts.Logger.Info("metadata: keeping the bucket's replicas", "bucket", bucket, "replicas", have, "asked", s.opts.Replicas)
		return have
	}
	return s.opts.Replicas
}

// bindGroups binds the groups bucket, creating it if it is missing, and
// turns its direct gets off. With direct gets any replica answers a read,
// and a lagging one (a server just restarted, or wiped and refilling its
// JetStream store) answers with old records or none: a group member's
// heartbeat record then looks absent, the member is taken for gone and
// its partitions are claimed while it still reads them (a drill showed
// it after a wipe). Without them every read goes to the stream leader.
// Clients decide direct or not when they bind, so this is done once, by
// the first node, and never undone: an existing bucket is bound, not
// re-created (CreateOrUpdate would turn direct gets back on).
func (s *Store) bindGroups(ctx context.Context) error {
	name := groupsBucket(s.cluster)
	kv, err := s.js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		kv, err = s.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name,
			Description: "raidq consumer groups and leases", Replicas: s.opts.Replicas, History: 1,
			MaxValueSize: MaxRecord, Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = s.js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return err
	}
	stream, err := s.js.Stream(ctx, "KV_"+name)
	if err != nil {
		return err
	}
	if cfg := stream.CachedInfo().Config; cfg.AllowDirect {
		cfg.AllowDirect = false
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("groups bucket: turn direct gets off: %w", err)
		}
		if kv, err = s.js.KeyValue(ctx, name); err != nil {
			return err
		}
	}
	s.groups = kv
	return nil
}

// retryable: JetStream is still starting (no meta leader yet, no quorum).
func retryable(err error) bool {
	if errors.Is(err, ErrNoMetadata) || errors.Is(err, context.Canceled) {
		return false
	}
	msg := err.Error()
	// "stream not found": nodes starting together, one creating a bucket
	// that another's server does not list yet.
	for _, s := range []string{"no suitable peers", "insufficient resources", "not enough", "timeout", "temporarily unavailable",
		"no responders", "jetstream not enabled", "JetStream system temporarily unavailable", "leader", "stream not found"} {
		if strings.Contains(strings.ToLower(msg), strings.ToLower(s)) {
			return true
		}
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

func (s *Store) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, s.opts.Timeout)
}

// PutMember writes (refreshes) a member record.
func (s *Store) PutMember(ctx context.Context, m Member) error {
	if err := m.Validate(); err != nil {
		return err
	}
	b, _ := json.Marshal(m)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err := s.meta.Put(ctx, "member."+m.ID, b)
	return err
}

// Members lists every member record (sorted by id).
func (s *Store) Members(ctx context.Context) ([]Member, error) {
	var out []Member
	err := s.each(ctx, s.meta, "member.*", func(b []byte) error {
		m, err := DecodeMember(b)
		if err == nil {
			out = append(out, m)
		}
		return err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// RemoveMember deletes a member record (a node leaving for good).
func (s *Store) RemoveMember(ctx context.Context, id string) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.meta.Delete(ctx, "member."+id)
}

// each calls fn with the value of every key matching filter.
func (s *Store) each(ctx context.Context, kv jetstream.KeyValue, filter string, fn func([]byte) error) error {
	return s.eachEntry(ctx, kv, filter, func(e jetstream.KeyValueEntry) error { return fn(e.Value()) })
}

// eachEntry calls fn with every entry whose key matches filter.
func (s *Store) eachEntry(ctx context.Context, kv jetstream.KeyValue, filter string, fn func(jetstream.KeyValueEntry) error) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return err
	}
	defer func() { _ = lister.Stop() }()
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return fmt.Errorf("key %s: %w", key, err)
		}
	}
	// nats.go ends the key channel quietly when ctx expires: a listing
	// cut short must not pass for a whole one (a group member missing
	// from it would be taken for gone and its partitions claimed).
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("listing %s: incomplete: %w", filter, err)
	}
	return nil
}

// TopicSpec is what `topic create` asks for.
type TopicSpec struct {
	Name           string
	Partitions     int
	Params         quorum.Params
	Retention      time.Duration
	RetentionBytes int64
}

// LiveWithin is how recent a member's heartbeat must be for new ensembles.
const LiveWithin = 30 * time.Second

// liveMembers lists the members whose heartbeat is younger than
// LiveWithin at now: where new ensembles are drawn from.
func (s *Store) liveMembers(ctx context.Context, now time.Time) ([]string, error) {
	members, err := s.Members(ctx)
	if err != nil {
		return nil, err
	}
	var live []string
	for _, m := range members {
		if now.Sub(time.Unix(0, m.Heartbeat)) < LiveWithin {
			live = append(live, m.ID)
		}
	}
	return live, nil
}

// CreateTopic validates spec, draws ensembles from the live members by
// rendezvous hashing, and creates the topic (ErrTopicExists if it is there).
func (s *Store) CreateTopic(ctx context.Context, spec TopicSpec, now time.Time) (TopicRecord, error) {
	if err := bus.ValidName("topic", spec.Name); err != nil {
		return TopicRecord{}, err
	}
	if err := spec.Params.Validate(); err != nil {
		return TopicRecord{}, err
	}
	if spec.Partitions < 1 || spec.Partitions > MaxPartitions {
		return TopicRecord{}, fmt.Errorf("--partitions %d: must be 1..%d", spec.Partitions, MaxPartitions)
	}
	live, err := s.liveMembers(ctx, now)
	if err != nil {
		return TopicRecord{}, err
	}
	ens, err := Ensembles(spec.Name, spec.Partitions, spec.Params.N, live)
	if err != nil {
		return TopicRecord{}, fmt.Errorf("%w (live nodes: %s)", err, strings.Join(live, " "))
	}
	p := spec.Params
	r := TopicRecord{Name: spec.Name, Partitions: spec.Partitions, N: p.N, K: p.K, W: p.W,
		ReadDelay: Duration(p.ReadDelay), AcceptWindow: Duration(p.AcceptWindow), FutureBound: Duration(p.FutureBound),
		MaxSkew: Duration(p.MaxSkew), Retention: Duration(spec.Retention), RetentionBytes: spec.RetentionBytes,
		Grid: p.Grid, Ensembles: ens, Created: uint64(now.UnixNano())}
	if err := r.Validate(); err != nil {
		return r, err
	}
	b, _ := json.Marshal(r)
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	if _, err := s.meta.Create(cctx, "topic."+r.Name, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return r, fmt.Errorf("%w: %q", ErrTopicExists, r.Name)
		}
		return r, err
	}
	return r, nil
}

// Topic reads one topic.
func (s *Store) Topic(ctx context.Context, name string) (TopicRecord, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	e, err := s.meta.Get(ctx, "topic."+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return TopicRecord{}, fmt.Errorf("%w %q", ErrUnknownTopic, name)
	}
	if err != nil {
		return TopicRecord{}, err
	}
	return DecodeTopic(e.Value())
}

// Topics lists every topic (sorted by name).
func (s *Store) Topics(ctx context.Context) ([]TopicRecord, error) {
	var out []TopicRecord
	err := s.each(ctx, s.meta, "topic.*", func(b []byte) error {
		r, err := DecodeTopic(b)
		if err == nil {
			out = append(out, r)
		}
		return err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// DeleteTopic removes a topic's record (nodes stop accepting its writes).
func (s *Store) DeleteTopic(ctx context.Context, name string) error {
	if _, err := s.Topic(ctx, name); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.meta.Delete(ctx, "topic."+name)
}

// ErrReplace is returned when a node cannot take another's place.
var ErrReplace = errors.New("cannot replace node")

// ReplaceQuiet is how long a node's heartbeat must have been silent before
// another node may replace it (five missed heartbeats at the default 2s).
const ReplaceQuiet = 10 * time.Second

// ReplaceNode puts node new in old's ensemble positions in every topic
// (raidq node --replace, docs/design.md#slot-store): each topic record is rewritten with a
// compare-and-set on its revision, so a concurrent change is re-read, and
// old's member record is removed. No data moves: new starts as a fresh
// incarnation and repair refills its positions. It returns the number of
// partitions that changed. birth is new's incarnation birth: it must be
// after the creation of every topic it joins, or new would answer "empty"
// (not "unknown") for slots it never held. old must not be running: a
// member record with a heartbeat younger than ReplaceQuiet is refused.
func (s *Store) ReplaceNode(ctx context.Context, old, new string, birth uint64, now time.Time) (int, error) {
	if err := bus.ValidName("node id", old); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrReplace, err)
	}
	if old == new {
		return 0, fmt.Errorf("%w %q: a node cannot replace itself", ErrReplace, old)
	}
	members, err := s.Members(ctx)
	if err != nil {
		return 0, err
	}
	for _, m := range members {
		if age := now.Sub(time.Unix(0, m.Heartbeat)); m.ID == old && age < ReplaceQuiet {
			return 0, fmt.Errorf("%w %q: it is alive (heartbeat %s ago); stop it first, or wait until its heartbeat is %s old",
				ErrReplace, old, age.Round(time.Millisecond), ReplaceQuiet)
		}
	}
	topics, err := s.Topics(ctx)
	if err != nil {
		return 0, err
	}
	changed := 0
	for _, t := range topics {
		if birth <= t.Created && slices.ContainsFunc(t.Ensembles, func(e []string) bool { return slices.Contains(e, old) }) {
			return changed, fmt.Errorf("%w %q: this node's data directory is older than topic %q; "+
				"start the replacement on an empty --data so it begins a new incarnation", ErrReplace, old, t.Name)
		}
		c, err := s.replaceInTopic(ctx, t.Name, old, new)
		if err != nil {
			return changed, err
		}
		changed += c
	}
	if err := s.RemoveMember(ctx, old); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return changed, fmt.Errorf("remove the member record of %q: %w", old, err)
	}
	return changed, nil
}

// replaceInTopic swaps old for new in one topic's ensembles by
// compare-and-set (updateTopic), retrying on a concurrent update; a topic
// deleted meanwhile changes nothing.
func (s *Store) replaceInTopic(ctx context.Context, name, old, new string) (int, error) {
	changed := 0
	r, err := s.updateTopic(ctx, name, func(r TopicRecord) (TopicRecord, error) {
		r.Ensembles = cloneEnsembles(r.Ensembles)
		changed = 0
		for p, ens := range r.Ensembles {
			for i, id := range ens {
				if id != old {
					continue
				}
				if slices.Contains(ens, new) {
					return r, fmt.Errorf("%w %q: topic %q partition %d already has %q in its ensemble", ErrReplace, old, name, p, new)
				}
				r.Ensembles[p][i] = new
				changed++
			}
		}
		if changed == 0 {
			return r, errUnchanged
		}
		return r, r.Validate()
	})
	switch {
	case errors.Is(err, ErrUnknownTopic) || errors.Is(err, errUnchanged):
		return 0, nil
	case err != nil:
		return 0, err
	}
	s.opts.Logger.Info("metadata: node replaced in topic", "topic", r.Name, "old", old, "new", new, "partitions", changed)
	return changed, nil
}
