package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/raidq/raidq"
)

// The kafka drill's clients run in the drill process, as the native
// producers and the live reader do: franz-go's kgo is a Go library, and
// the faults hit the nodes behind the gateways, not the clients or the
// gateways, so a client process of its own would measure nothing more.

const (
	kafkaGroup        = "drill-kafka"
	kafkaGroupMembers = 2
	// kafkaDeliveryTimeout is the producer's RecordDeliveryTimeout.
	kafkaDeliveryTimeout = 2 * time.Minute
	// kafkaFlushWait bounds the producer's flush after the load.
	kafkaFlushWait = 30 * time.Second
	// kafkaErrorSamples: member errors kept verbatim.
	kafkaErrorSamples = 10
)

// kgoLogger sends kgo's warnings and errors to a slog logger.
type kgoLogger struct {
	log  *slog.Logger
	name string
}

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	args := append([]any{"client", l.name}, keyvals...)
	if level == kgo.LogLevelError {
		l.log.Error("kgo: "+msg, args...)
		return
	}
	l.log.Warn("kgo: "+msg, args...)
}

// batchCounter counts the record batches kgo wrote and their records
// (kgo.HookProduceBatchWritten).
type batchCounter struct{ batches, records atomic.Int64 }

func (b *batchCounter) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	b.batches.Add(1)
	b.records.Add(int64(m.NumRecords))
}

// newKgoProducer is the drill's Kafka producer: idempotent (kgo's
// default), acks=all, RecordDeliveryTimeout 2 min, every gateway a seed.
func (r *run) newKgoProducer(seeds []string, batches *batchCounter) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ClientID("raidq-drill-kgo-producer"),
		kgo.DefaultProduceTopic(Topic), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(kafkaDeliveryTimeout),
		kgo.WithLogger(kgoLogger{log: r.cfg.ClientLogger, name: "producer"}), kgo.WithHooks(batches))
}

// kafkaLoad is load for the kafka drill: one kgo producer (sender 0 of
// the history) sends at cfg.Rate for cfg.Duration while the fault
// schedule runs; then it is flushed and closed.
func (r *run) kafkaLoad(ctx context.Context) error {
	k := r.kafka
	schedDone, err := r.startLoad(ctx)
	if err != nil {
		return err
	}
	h := r.hist
	r.runSenders(ctx, 1, func(pi int, value []byte, seq int, release func()) {
		k.producer.Produce(context.Background(), &kgo.Record{Value: value}, func(rec *kgo.Record, err error) {
			h.kafkaOutcome(pi, seq, rec, err)
			release()
		})
	})
	r.event("info", "load ends: flushing the kgo producer")
	fctx, cancel := context.WithTimeout(ctx, kafkaFlushWait)
	if err := k.producer.Flush(fctx); err != nil {
		r.event("info", "kgo producer flush: %v", err)
	}
	cancel()
	h.freeze()
	k.producer.Close()
	k.producer = nil
	a, f, _ := h.counts()
	r.progress(Progress{Phase: "load", Elapsed: r.cfg.Duration, Acked: a, Failed: f})
	<-schedDone
	return ctx.Err()
}

// kafkaPosition is the raidq position a Kafka offset names on the drill
// topic's grid (actors/kafka: offset = stripe offset + record index).
func kafkaPosition(off int64) (uint64, int) {
	g := raidq.DefaultParams().Grid
	u := uint64(max(off, 0))
	return u &^ (g - 1), int(u & (g - 1))
}

// kafkaOutcome records the result of kgo send seq of producer prod (an
// acked record's position from its Kafka offset).
func (h *history) kafkaOutcome(prod, seq int, rec *kgo.Record, err error) {
	if err == nil {
		off, idx := kafkaPosition(rec.Offset)
		h.outcome(prod, seq, raidq.Message{Partition: int(rec.Partition), Position: raidq.Position{Offset: off, Index: uint32(idx)}}, nil)
		return
	}
	cls, unknown := classifyKafka(err)
	h.outcomeClass(prod, seq, cls, unknown, err)
}

// classifyKafka maps a kgo produce error to a class and says whether the
// record may still have been written (unknown) or was refused (failed):
// a timeout, a closed client or a retriable Kafka error kgo gave up on is
// unknown; NOT_ENOUGH_REPLICAS (raidq's ErrNotEnoughNodes) and the other
// non-retriable Kafka errors are refusals.
func classifyKafka(err error) (cls string, unknown bool) {
	var ke *kerr.Error
	switch {
	case errors.Is(err, kgo.ErrRecordTimeout):
		return "timeout", true
	case errors.Is(err, kgo.ErrClientClosed):
		return "closed", true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "context", true
	case errors.Is(err, kerr.NotEnoughReplicas):
		return "not_enough_nodes", false
	case errors.Is(err, kerr.RequestTimedOut):
		return "timeout", true
	case errors.As(err, &ke):
		return "kafka_" + strings.ToLower(ke.Message), ke.Retriable
	}
	return "other", true
}

// kafkaMember is one kgo consumer group member reading live.
type kafkaMember struct {
	name string
	cl   *kgo.Client
	done chan struct{}
}

// kafkaGroupRun is the kgo consumer group: kafkaGroupMembers clients of
// group kafkaGroup, every gateway a seed. Contract as liveGroup's:
// setStart gives the load's start and history (records before are kept
// and mapped then), stop waits for the acked records and closes the
// members, close ends them at once.
type kafkaGroupRun struct {
	members []*kafkaMember
	cancel  context.CancelFunc

	mu      sync.Mutex
	start   time.Time
	h       *history
	early   []kafkaRaw
	dels    []memberDelivery
	got     map[uint64]int
	errs    int
	samples []string
}

type kafkaRaw struct {
	member string
	at     time.Time
	rec    *kgo.Record
}

// startKafkaGroup starts the members; member k's seed list starts at
// gateway k.
func (r *run) startKafkaGroup(seeds []string) (*kafkaGroupRun, error) {
	ctx, cancel := context.WithCancel(context.Background())
	g := &kafkaGroupRun{cancel: cancel, got: make(map[uint64]int)}
	for k := range kafkaGroupMembers {
		name := fmt.Sprintf("k%d", k)
		cl, err := kgo.NewClient(kgo.SeedBrokers(rotate(seeds, k)...), kgo.ClientID("raidq-drill-"+name),
			kgo.ConsumerGroup(kafkaGroup), kgo.ConsumeTopics(Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.WithLogger(kgoLogger{log: r.cfg.ClientLogger, name: name}))
		if err != nil {
			g.close()
			return nil, fmt.Errorf("kafka group member %s: %w", name, err)
		}
		m := &kafkaMember{name: name, cl: cl, done: make(chan struct{})}
		g.members = append(g.members, m)
		go g.poll(ctx, m)
	}
	r.event("info", "kgo group %s started: %d members, seeds %s", kafkaGroup, kafkaGroupMembers, strings.Join(seeds, ","))
	return g, nil
}

// poll reads member m until ctx ends or its client closes.
func (g *kafkaGroupRun) poll(ctx context.Context, m *kafkaMember) {
	defer close(m.done)
	for ctx.Err() == nil {
		fs := m.cl.PollFetches(ctx)
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				g.memberError(m.name, topic, p, err)
			}
		})
		now := time.Now()
		fs.EachRecord(func(rec *kgo.Record) { g.deliver(m.name, now, rec) })
	}
}

func (g *kafkaGroupRun) memberError(member, topic string, p int32, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.errs++
	if len(g.samples) < kafkaErrorSamples {
		at := 0.0
		if !g.start.IsZero() {
			at = time.Since(g.start).Seconds()
		}
		g.samples = append(g.samples, fmt.Sprintf("%s at %.2fs, %s/%d: %v", member, at, topic, p, err))
	}
}

// setStart gives the group the load's start and history, and maps the
// records read before.
func (g *kafkaGroupRun) setStart(start time.Time, h *history) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.start, g.h = start, h
	for _, e := range g.early {
		g.addLocked(e.member, e.rec, e.at.Sub(start).Nanoseconds())
	}
	g.early = nil
}

func (g *kafkaGroupRun) deliver(member string, now time.Time, rec *kgo.Record) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.h == nil {
		g.early = append(g.early, kafkaRaw{member: member, at: now, rec: rec})
		return
	}
	g.addLocked(member, rec, now.Sub(g.start).Nanoseconds())
}

func (g *kafkaGroupRun) addLocked(member string, rec *kgo.Record, at int64) {
	off, idx := kafkaPosition(rec.Offset)
	d := g.h.toDelivery(delivery{at: at, part: int(rec.Partition), off: off, idx: idx}, rec.Value)
	g.dels = append(g.dels, memberDelivery{delivery: d, member: member})
	if d.known {
		g.got[key(d.prod, d.seq)]++
	}
}

// delivered counts the records of want some member delivered.
func (g *kafkaGroupRun) delivered(want map[uint64]bool) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return countDelivered(g.got, want)
}

// kafkaGroupResult is what the kgo group delivered and the errors its
// members saw.
type kafkaGroupResult struct {
	dels    []memberDelivery
	errs    int
	samples []string
	waitS   float64
}

// stop waits until the members delivered every record of want or the
// deadline passes (telling progress every 200ms), then closes them
// (each leaves the group) and returns what they delivered.
func (g *kafkaGroupRun) stop(want map[uint64]bool, deadline time.Time, progress func(got int)) kafkaGroupResult {
	t0 := time.Now()
	for {
		got := g.delivered(want)
		progress(got)
		if got >= len(want) || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	res := kafkaGroupResult{waitS: time.Since(t0).Seconds()}
	g.close()
	g.mu.Lock()
	defer g.mu.Unlock()
	res.dels, res.errs, res.samples = g.dels, g.errs, g.samples
	return res
}

// close ends the members' polls and closes their clients.
func (g *kafkaGroupRun) close() {
	g.cancel()
	for _, m := range g.members {
		m.cl.Close()
		<-m.done
	}
	g.members = nil
}
