package meta

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/raidq/raidq/stripe/placement"
	"github.com/raidq/raidq/stripe/quorum"
)

// ErrUnknownTopic is returned for a topic the catalog does not hold.
var ErrUnknownTopic = errors.New("unknown topic")

// Topic is one topic's metadata: its partitions, coding parameters and
// the ensemble (ordered node ids) of each partition.
type Topic struct {
	Name       string
	Partitions int
	Params     quorum.Params
	Ensembles  [][]string // [partition][ensemble position] node id
	// Created is when the topic was created (unix ns). Nothing exists
	// below it, so readers start no earlier and a node born before it
	// never answers "unknown" for it.
	Created uint64
	// Retention drops whole offset ranges older than now - Retention on
	// every node (0: keep forever); RetentionBytes drops a partition's
	// oldest whole ranges while it holds more than this many bytes on a
	// node (0: no size limit). See actors/retention.go.
	Retention      time.Duration
	RetentionBytes int64
	// Accept is the accept window over offsets: Params.AcceptWindow, or a
	// change of it under way (`topic alter`, quorum.AcceptPlan). Owners
	// take their range's window from it, never Params.AcceptWindow.
	Accept quorum.AcceptPlan
}

// BirthFor returns the incarnation birth that matters for this topic: a
// node born before the topic was created has seen all of it (0). That holds
// because a new incarnation on a cluster with topics is born after every
// topic's creation (SettleBirth): a wiped node is never "born before" a
// topic it did not see whole, however far behind its clock is.
func (t *Topic) BirthFor(birth uint64) uint64 {
	if birth <= t.Created {
		return 0
	}
	return birth
}

// Validate checks the topic's shape.
func (t *Topic) Validate() error {
	if t.Partitions < 1 || t.Partitions > MaxPartitions {
		return fmt.Errorf("topic %q: %d partitions, must be 1..%d", t.Name, t.Partitions, MaxPartitions)
	}
	if err := t.Params.Validate(); err != nil {
		return fmt.Errorf("topic %q: %w", t.Name, err)
	}
	if t.Retention < 0 || t.RetentionBytes < 0 {
		return fmt.Errorf("topic %q: negative retention", t.Name)
	}
	if t.Accept.Next != 0 && t.Accept.Next != int64(t.Params.AcceptWindow) {
		return fmt.Errorf("topic %q: accept plan ends at %v, accept window is %v", t.Name, time.Duration(t.Accept.Next), t.Params.AcceptWindow)
	}
	if len(t.Ensembles) != t.Partitions {
		return fmt.Errorf("topic %q: %d ensembles for %d partitions", t.Name, len(t.Ensembles), t.Partitions)
	}
	for p, e := range t.Ensembles {
		if len(e) != t.Params.N {
			return fmt.Errorf("topic %q partition %d: ensemble of %d nodes, n=%d", t.Name, p, len(e), t.Params.N)
		}
	}
	return nil
}

// AcceptPlan is the topic's accept window over offsets (a topic built
// without one, as the demo and tests do, has Params.AcceptWindow
// everywhere).
func (t *Topic) AcceptPlan() quorum.AcceptPlan {
	if t.Accept.Next == 0 {
		a := int64(t.Params.AcceptWindow)
		return quorum.AcceptPlan{Prev: a, Next: a}
	}
	return t.Accept
}

// Position returns node's ensemble position in partition p, or -1.
func (t *Topic) Position(p uint32, node string) int {
	if int(p) >= len(t.Ensembles) {
		return -1
	}
	for i, id := range t.Ensembles[p] {
		if id == node {
			return i
		}
	}
	return -1
}

// MaxPartitions bounds a topic's partition count.
const MaxPartitions = 4096

// Catalog answers which topics exist. Implementations are safe for
// concurrent use; nodes and clients read it on every request, so lookups
// must be cheap and never block on the network (docs/design.md#metadata-in-jetstream-kv: metadata is off
// the write path).
type Catalog interface {
	Topic(name string) (*Topic, error)
}

// StaticCatalog is an in-memory catalog (the demo, tests, and the cache
// that a metadata watcher keeps up to date).
type StaticCatalog struct {
	mu     sync.RWMutex
	topics map[string]*Topic
}

// NewStaticCatalog returns an empty catalog.
func NewStaticCatalog() *StaticCatalog { return &StaticCatalog{topics: make(map[string]*Topic)} }

// Put adds or replaces a topic after validating it.
func (c *StaticCatalog) Put(t *Topic) error {
	if err := t.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.topics[t.Name] = t
	return nil
}

// Delete removes a topic.
func (c *StaticCatalog) Delete(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.topics, name)
}

// Names lists the topics.
func (c *StaticCatalog) Names() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.topics))
	for n := range c.topics {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Topic implements Catalog.
func (c *StaticCatalog) Topic(name string) (*Topic, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownTopic, name)
	}
	return t, nil
}

// Ensembles assigns each partition an ordered ensemble of n nodes by
// rendezvous hashing over the member ids, so more than n members spread
// partitions and a member change moves only the partitions it touches.
func Ensembles(topic string, partitions, n int, members []string) ([][]string, error) {
	if len(members) < n {
		return nil, fmt.Errorf("topic %q needs %d nodes per ensemble, only %d members", topic, n, len(members))
	}
	out := make([][]string, partitions)
	for p := range out {
		out[p] = placement.Rank(fmt.Sprintf("%s/%d", topic, p), members)[:n]
	}
	return out, nil
}
