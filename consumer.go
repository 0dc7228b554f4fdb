package raidq

import (
	"fmt"
	"sync"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// ConsumerOptions configure a consumer.
type ConsumerOptions struct {
	// From is where reading starts: a time (offsets are time). Zero means
	// now: only messages produced from here on.
	From time.Time
	// Partitions to read; nil means all.
	Partitions []int
	// Buffer is the capacity of the Messages channel (default 1024).
	Buffer int
	// OnReport receives the readers' in-doubt, corrupt and stall reports.
	OnReport func(partition int, out core.Output)

	// Group makes the consumer a member of a consumer group (see
	// groups.go): the group's live members share the topic's partitions
	// and commit positions (Consumer.Commit). From then only applies to a
	// partition the group has no position for, and zero From means the
	// topic's creation (earliest). Partitions must be nil.
	Group string
	// Member is this member's id in the group (default a random one). Two
	// live consumers must not share one.
	Member string
	// Meta is the metadata store holding the group's positions; nil means
	// the client's own (Connect binds it unless topics came from WithCatalog).
	Meta *meta.Store
	// AutoCommit, with a group, commits every partition's position this
	// often: after the messages the application has taken from Messages,
	// except the last one taken (it may still be processing it; it is
	// committed once the next one is taken, or by Close). Zero: the
	// application commits with Commit.
	AutoCommit time.Duration
}

// Consumer reads one topic's partitions and delivers their messages on one
// channel, each partition in position order, deduplicated by stripe id.
type Consumer struct {
	c       *Client
	topic   string
	opts    ConsumerOptions
	ch      chan Message
	mu      sync.Mutex
	readers []*actors.Reader
	gen     int
	closed  bool
	quit    chan struct{}
	group   *groupState // nil without a group
	// sendMu is held (read) by sinks while they forward to ch, and
	// (write) by Close before it closes ch, so no send hits a closed channel.
	sendMu sync.RWMutex
}

// Consumer starts reading topic.
func (c *Client) Consumer(topic string, opts ConsumerOptions) (*Consumer, error) {
	t, err := c.core.Catalog().Topic(topic)
	if err != nil {
		return nil, err
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 1024
	}
	if opts.Group != "" {
		return c.groupConsumer(t, opts)
	}
	if opts.Partitions == nil {
		for p := 0; p < t.Partitions; p++ {
			opts.Partitions = append(opts.Partitions, p)
		}
	}
	for _, p := range opts.Partitions {
		if p < 0 || p >= t.Partitions {
			return nil, fmt.Errorf("topic %s has partitions 0..%d, not %d", topic, t.Partitions-1, p)
		}
	}
	if opts.From.IsZero() {
		opts.From = time.Now()
	}
	cons := &Consumer{c: c, topic: topic, opts: opts, ch: make(chan Message, opts.Buffer), quit: make(chan struct{})}
	if err := cons.start(opts.From); err != nil {
		cons.Close()
		return nil, err
	}
	return cons, nil
}

// Messages is the channel of delivered messages. It is closed by Close.
func (c *Consumer) Messages() <-chan Message { return c.ch }

func (c *Consumer) start(from time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	gen := c.gen
	for _, p := range c.opts.Partitions {
		r, err := c.c.core.NewReader(actors.ReaderConfig{Topic: c.topic, Partition: p,
			From: core.Position{Offset: uint64(from.UnixNano())}, Sink: c.sink(p, gen), OnReport: c.report(p)})
		if err != nil {
			return err
		}
		c.readers = append(c.readers, r)
	}
	return nil
}

func (c *Consumer) report(p int) func(core.Output) {
	if c.opts.OnReport == nil {
		return nil
	}
	return func(out core.Output) { c.opts.OnReport(p, out) }
}

// sink forwards one reader's deliveries to the channel; it blocks while
// the channel is full, which pauses that reader (backpressure).
func (c *Consumer) sink(p, gen int) func([]core.Delivery) {
	return func(ds []core.Delivery) {
		c.sendMu.RLock()
		defer c.sendMu.RUnlock()
		for _, d := range ds {
			m := recordMessage(c.topic, p, d.Record)
			m.Position, m.Stripe = d.Pos, d.Stripe
			c.mu.Lock()
			stale := c.gen != gen
			c.mu.Unlock()
			if stale {
				return
			}
			select {
			case <-c.quit:
				return
			default:
			}
			select {
			case c.ch <- m:
			case <-c.quit:
				return
			}
		}
	}
}

// Seek restarts every partition at time t (positions are times). In a
// group: the partitions this member owns now; the next Commit may move
// their positions backwards, and partitions it takes later start from the
// group's committed positions.
func (c *Consumer) Seek(t time.Time) error {
	if c.group != nil {
		return c.group.seek(t)
	}
	c.stopReaders()
	return c.start(t)
}

func (c *Consumer) stopReaders() {
	c.mu.Lock()
	rs := c.readers
	c.readers = nil
	c.gen++
	c.mu.Unlock()
	for _, r := range rs {
		r.Close()
	}
}

// Close stops the consumer and closes Messages.
func (c *Consumer) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	if c.group != nil {
		c.group.stop(false) // leaves the group
	}
	c.mu.Lock()
	close(c.quit)
	c.mu.Unlock()
	if c.group != nil && c.group.fwdDone != nil {
		<-c.group.fwdDone
	}
	c.stopReaders()
	c.sendMu.Lock()
	close(c.ch)
	c.sendMu.Unlock()
}
