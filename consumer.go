package raidq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
)

// ConsumerOption configures a consumer (Client.Consumer).
type ConsumerOption func(*consumerConfig)

// consumerConfig is what the ConsumerOptions set.
type consumerConfig struct {
	From       time.Time
	Partitions []int
	Buffer     int
	Reports    func(ReadReport)

	Group          string
	Member         string
	AutoCommit     time.Duration
	SessionTimeout time.Duration
}

// WithStart is where reading starts: a time (offsets are time). Without
// it, or with the zero time, a plain consumer starts now (only messages
// produced from here on); a group member starts a partition the group has
// no position for at the topic's creation (earliest).
func WithStart(t time.Time) ConsumerOption { return func(c *consumerConfig) { c.From = t } }

// WithPartitions reads only these partitions (none given, or without
// it: all; not with a group).
func WithPartitions(ps ...int) ConsumerOption {
	return func(c *consumerConfig) {
		c.Partitions = nil
		if len(ps) > 0 {
			c.Partitions = append([]int{}, ps...)
		}
	}
}

// WithBuffer is how many decoded messages wait for the application
// (default 1024); a full buffer pauses the partitions' readers.
func WithBuffer(n int) ConsumerOption { return func(c *consumerConfig) { c.Buffer = n } }

// WithReports receives the partition readers' reports: offsets in doubt,
// corrupt shards, stalls (called from a reader's goroutine; must not block).
func WithReports(f func(ReadReport)) ConsumerOption { return func(c *consumerConfig) { c.Reports = f } }

// WithGroup makes the consumer a member of a consumer group (see
// groups.go): the group's live members share the topic's partitions and
// commit positions.
func WithGroup(name string) ConsumerOption { return func(c *consumerConfig) { c.Group = name } }

// WithMember is this member's id in the group (default a random one). Two
// live consumers must not share one.
func WithMember(id string) ConsumerOption { return func(c *consumerConfig) { c.Member = id } }

// WithAutoCommit, with a group, commits every partition's position this
// often, and when a partition moves to another member or the consumer
// closes: the position after the messages the application is done with.
// A message is done once the application takes the next one (from Next or
// Messages) or calls Next again, or commits it. Without it the
// application commits with Commit.
func WithAutoCommit(every time.Duration) ConsumerOption {
	return func(c *consumerConfig) { c.AutoCommit = every }
}

// WithSessionTimeout, with a group, is how long the other members wait
// for this member's heartbeat to advance before they take its partitions
// (default 15s, like Kafka's session.timeout.ms). A member that cannot
// heartbeat for three quarters of it pauses delivery until it can, so two
// members never deliver a partition at once.
func WithSessionTimeout(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) { c.SessionTimeout = d }
}

// ReadReport is a partition reader's account of one scan besides its
// messages (only scans with something to report are reported).
type ReadReport struct {
	Topic     string
	Partition int
	// InDoubt are offsets the reader could not decode yet: it keeps
	// asking the nodes it did not hear and delivers them late (Message.Late)
	// or settles them.
	InDoubt []InDoubt
	// Corrupt are shards that failed their checks.
	Corrupt []CorruptShard
	// Resolved are in-doubt offsets settled by this scan.
	Resolved []uint64
	// Stalled says why the scan could not be used (too few nodes heard).
	Stalled string
}

// InDoubt is one offset a reader could not decode yet.
type InDoubt struct {
	Offset  uint64
	Stripe  StripeID
	Seen    int   // shards seen
	Unheard []int // ensemble positions that did not answer
}

// CorruptShard names a shard that failed its checks.
type CorruptShard struct {
	Node   int // ensemble position
	Offset uint64
	Err    error
}

func readReport(topic string, p int, out core.Output) (ReadReport, bool) {
	if len(out.InDoubt) == 0 && len(out.Corrupt) == 0 && len(out.Resolved) == 0 && out.Stalled == "" {
		return ReadReport{}, false
	}
	r := ReadReport{Topic: topic, Partition: p, Resolved: out.Resolved, Stalled: out.Stalled}
	for _, d := range out.InDoubt {
		r.InDoubt = append(r.InDoubt, InDoubt{Offset: d.Offset, Stripe: d.Stripe, Seen: d.Seen, Unheard: d.Unheard})
	}
	for _, c := range out.Corrupt {
		r.Corrupt = append(r.Corrupt, CorruptShard{Node: c.Node, Offset: c.Offset, Err: c.Err})
	}
	return r, true
}

// Consumer reads one topic's partitions and delivers their messages, each
// partition in position order, deduplicated by stripe id.
//
// A consumer rides through transient trouble: nodes down or hung, its NATS
// server lost (the connection moves to another URL), the metadata KV
// stalled. It retries, keeps delivering what it safely can and logs each
// change of state once. It ends only on Close, or on a fatal error (the
// topic deleted; permission refused: ErrPermissionDenied, a
// *PermissionError, as soon as the cluster refuses one of its scans or,
// in a group, its keys), which Next and Err return.
type Consumer struct {
	c     *Client // nil for the simulation's members (hooks.go)
	ports consumerPorts
	topic string
	opts  consumerConfig
	buf   chan Message // the readers' decoded messages, for the forwarder
	ch    chan Message // forwarder -> application (unbuffered)
	mu    sync.Mutex
	// readers of a plain consumer (a group's are in its parts)
	readers []partReader
	gen     int
	closed  bool
	quit    chan struct{}
	fwdDone chan struct{}
	group   *groupState // nil without a group
	fatal   error       // set once, before quit closes; guarded by mu
	from    uint64      // where the plain readers started (unix ns; Lag); guarded by mu
	unlag   func()      // ends the lag gauge's reporting (consumer_lag.go)
	unwatch func()      // ends the refusals watch (refusals.go)
}

// Consumer starts reading topic.
func (c *Client) Consumer(topic string, options ...ConsumerOption) (*Consumer, error) {
	var opts consumerConfig
	for _, f := range options {
		f(&opts)
	}
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
			return nil, fmt.Errorf("%w: topic %s has partitions 0..%d, not %d", ErrUnknownPartition, topic, t.Partitions-1, p)
		}
	}
	if opts.From.IsZero() {
		opts.From = time.Now()
	}
	cons := newConsumer(c, clientPorts(c), topic, opts)
	if err := cons.start(opts.From); err != nil {
		_ = cons.Close()
		return nil, err
	}
	go cons.watchTopic()
	return cons, nil
}

// newConsumer builds a consumer over ports; c nil (the simulation): no
// lag gauge, no refusals.
func newConsumer(c *Client, ports consumerPorts, topic string, opts consumerConfig) *Consumer {
	cons := &Consumer{c: c, ports: ports, topic: topic, opts: opts, buf: make(chan Message, opts.Buffer), ch: make(chan Message),
		quit: make(chan struct{}), fwdDone: make(chan struct{})}
	if c == nil {
		cons.unlag, cons.unwatch = func() {}, func() {}
		go cons.forward()
		return cons
	}
	cons.reportLag()
	// A refused scan, delivery subscription or group key is reported on
	// the connection, not answered: end the consumer with it (the readers
	// would only stall, the member's heartbeats time out).
	cons.unwatch = c.refusals.watch(c.refusals.consumerSubjects(topic, opts.Group), func(pe *PermissionError) {
		cons.fail(fmt.Errorf("consumer of topic %s: %w", topic, pe))
	})
	go cons.forward()
	return cons
}

// Messages is the channel of delivered messages. It is closed by Close and
// after a fatal error (see Err).
func (c *Consumer) Messages() <-chan Message { return c.ch }

// Next returns the next message, waiting for one until ctx is done. It
// fails with ErrClosed after Close, or with the fatal error that ended the
// consumer. Calling Next also tells a group consumer that the application
// is done with the message Next returned before (AutoCommit).
func (c *Consumer) Next(ctx context.Context) (Message, error) {
	if c.group != nil {
		c.group.idle()
	}
	select {
	case m, ok := <-c.ch:
		if !ok {
			return Message{}, c.endErr()
		}
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	}
}

// Err is the fatal error that ended the consumer, or nil.
func (c *Consumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

func (c *Consumer) endErr() error {
	if err := c.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// forward is the only sender on the application's channel: it knows
// exactly which message the application took (the send completes only
// then), and drops messages of partitions this member no longer reads.
func (c *Consumer) forward() {
	defer close(c.fwdDone)
	defer close(c.ch)
	for {
		var m Message
		select {
		case m = <-c.buf:
		case <-c.quit:
			return
		}
		if c.group != nil {
			c.group.offer(c, m) // drops m if its partition moved meanwhile
			continue
		}
		select {
		case c.ch <- m:
		case <-c.quit:
			return
		}
	}
}

func (c *Consumer) start(from time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	gen := c.gen
	c.from = uint64(from.UnixNano())
	for _, p := range c.opts.Partitions {
		r, err := c.ports.newReader(actors.ReaderConfig{Topic: c.topic, Partition: p,
			From: core.Position{Offset: uint64(from.UnixNano())}, Sink: c.sink(p, gen), OnReport: c.report(p)})
		if err != nil {
			return err
		}
		c.readers = append(c.readers, r)
	}
	return nil
}

func (c *Consumer) report(p int) func(core.Output) {
	if c.opts.Reports == nil {
		return nil
	}
	return func(out core.Output) {
		if r, ok := readReport(c.topic, p, out); ok {
			c.opts.Reports(r)
		}
	}
}

// sink forwards one reader's deliveries to the buffer; it blocks while the
// buffer is full, which pauses that reader (backpressure).
func (c *Consumer) sink(p, gen int) func([]core.Delivery) {
	return func(ds []core.Delivery) {
		for _, d := range ds {
			c.mu.Lock()
			stale := c.gen != gen
			c.mu.Unlock()
			if stale {
				return
			}
			m := deliveryMessage(c.topic, p, d)
			select {
			case c.buf <- m:
			case <-c.quit:
				return
			}
		}
	}
}

func deliveryMessage(topic string, p int, d core.Delivery) Message {
	m := recordMessage(topic, p, d.Record)
	m.Position, m.Stripe, m.Late = positionOf(d.Pos), d.Stripe, d.Late
	return m
}

// watchTopic ends a plain consumer whose topic was deleted (a group
// member's loop checks its own).
func (c *Consumer) watchTopic() {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	gone := 0
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
		}
		if _, err := c.ports.catalog.Topic(c.topic); errors.Is(err, ErrUnknownTopic) {
			gone++
		} else {
			gone = 0
		}
		if gone >= topicGoneChecks {
			c.fail(fmt.Errorf("raidq: consumer of topic %s: the topic was deleted: %w", c.topic, ErrUnknownTopic))
			return
		}
	}
}

// topicGoneChecks: a topic missing from the catalog this many checks in a
// row is deleted (one miss may be a catalog refresh in flight).
const topicGoneChecks = 3

// fail ends the consumer with a fatal error: Next and Err return it and
// Messages is closed.
func (c *Consumer) fail(err error) {
	c.mu.Lock()
	first := c.fatal == nil
	if first {
		c.fatal = err
	}
	c.mu.Unlock()
	if !first {
		return // ended already (a refusal comes once per node refusing)
	}
	c.ports.logger.Error("consumer stopped", "topic", c.topic, "err", err)
	go func() { _ = c.Close() }()
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

// Close stops the consumer and closes Messages. A group member first
// commits (AutoCommit) and releases its partitions and leaves the group,
// so the others take over at once. It returns the fatal error that ended
// the consumer, if any.
func (c *Consumer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.Err()
	}
	c.closed = true
	c.mu.Unlock()
	if c.group != nil {
		c.group.stop(false) // leaves the group
	}
	c.mu.Lock()
	close(c.quit)
	c.mu.Unlock()
	<-c.fwdDone
	c.stopReaders()
	c.unlag()
	c.unwatch()
	return c.Err()
}
