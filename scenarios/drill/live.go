package drill

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raidq/raidq"
)

// liveReader is a second consumer that reads while the faults happen
// (the after-load read-back starts only once everything is healed). It is
// where in-doubt offsets show up: a reader that cannot hear a node gives
// up on a partial stripe (docs/design.md#read-path), and the claim is that such a stripe,
// if committed, is delivered late (repair re-appends it), never lost.
type liveReader struct {
	c     *raidq.Client
	cons  *raidq.Consumer
	h     *history
	start time.Time
	done  chan struct{}

	mu       sync.Mutex
	dels     []delivery
	inDoubts []inDoubt
	corrupt  int
}

// startLive starts the live reader on the nodes that stay up, reading from
// 5 s before now (the load starts right after; setStart gives it the
// history once it exists).
func (r *run) startLive(ctx context.Context) error {
	c := r.liveClient // connected by connect
	r.liveClient = nil
	if err := c.WaitTopic(ctx, Topic); err != nil {
		c.Close()
		return fmt.Errorf("live reader: %w", err)
	}
	l := &liveReader{c: c, done: make(chan struct{})}
	cons, err := c.Consumer(Topic, raidq.WithStart(time.Now().Add(-5*time.Second)), raidq.WithBuffer(4096), raidq.WithReports(l.onReport))
	if err != nil {
		c.Close()
		return fmt.Errorf("live reader: %w", err)
	}
	l.cons = cons
	go func() {
		defer close(l.done)
		for m := range cons.Messages() {
			l.mu.Lock()
			if l.h != nil {
				l.dels = append(l.dels, l.h.parseDelivery(m, l.start))
			}
			l.mu.Unlock()
		}
	}()
	r.live = l
	return nil
}

// setStart gives the reader the load's start and history.
func (l *liveReader) setStart(start time.Time, h *history) {
	l.mu.Lock()
	l.start, l.h = start, h
	l.mu.Unlock()
}

func (l *liveReader) onReport(r raidq.ReadReport) {
	p := r.Partition
	if len(r.InDoubt) == 0 && len(r.Corrupt) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Since(l.start).Nanoseconds()
	l.corrupt += len(r.Corrupt)
	for _, d := range r.InDoubt {
		l.inDoubts = append(l.inDoubts, inDoubt{at: now, part: p, off: d.Offset, stripe: d.Stripe.String(), seen: d.Seen,
			unheard: append([]int(nil), d.Unheard...)})
	}
}

// missing counts the records of want the live reader has not delivered.
func (l *liveReader) missing(want map[uint64]bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := make(map[uint64]bool)
	for _, d := range l.dels {
		if d.known && want[key(d.prod, d.seq)] {
			got[key(d.prod, d.seq)] = true
		}
	}
	return len(want) - len(got)
}

// stop waits (until the deadline) for the live reader to deliver every
// acked record, then closes it and returns what it delivered.
func (l *liveReader) stop(want map[uint64]bool, deadline time.Time) ([]delivery, []inDoubt, int) {
	for l.missing(want) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	l.close()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dels, l.inDoubts, l.corrupt
}

func (l *liveReader) close() {
	l.cons.Close()
	<-l.done
	l.c.Close()
}

// liveVerdict checks the live reader's deliveries like the read-back's.
func (r *run) liveVerdict(rep *Report, dels []delivery, ids []inDoubt, corrupt int) {
	prods := r.sends()
	c := checkHistory(prods, dels)
	rep.Live = &LiveReport{Delivered: c.delivered, Missing: c.lost, Unexpected: c.unexpected, Duplicates: c.duplicates,
		Reordered: c.reordered, InDoubt: len(ids), CorruptShards: corrupt}
	// Name some missing records, and whether the live reader reported
	// their stripe (or their offset) in doubt.
	byStripe := make(map[string]inDoubt)
	byOffset := make(map[[2]uint64]inDoubt)
	for _, d := range ids {
		byStripe[d.stripe] = d
		byOffset[[2]uint64{uint64(d.part), d.off}] = d
	}
	for _, k := range c.lost_ {
		if len(rep.Live.MissingSamples) == 20 {
			break
		}
		prod, seq := int(k>>40), int(k&(1<<40-1))
		rec := prods[prod][seq]
		s := fmt.Sprintf("p%d-%d partition %d offset %d stripe %s acked at %.2fs", prod, seq, rec.part, rec.off, rec.stripe,
			float64(rec.done)/1e9)
		d, ok := byStripe[rec.stripe]
		if !ok {
			d, ok = byOffset[[2]uint64{uint64(rec.part), rec.off}]
		}
		if ok {
			s += fmt.Sprintf("; reported in doubt at %.2fs (offset %+.1fms from the acked one, %d shards seen, unheard %v)",
				float64(d.at)/1e9, float64(int64(d.off-rec.off))/1e6, d.seen, d.unheard)
		} else {
			s += "; never reported in doubt"
		}
		rep.Live.MissingSamples = append(rep.Live.MissingSamples, s)
	}
	r.liveInDoubts = ids
	rep.Checks = append(rep.Checks, Check{Name: "a reader running through the faults delivered every acked record",
		OK: c.lost == 0 && c.unexpected == 0,
		Detail: fmt.Sprintf("%d missing, %d unexpected, %d in-doubt reports, %d duplicates", c.lost, c.unexpected, len(ids),
			c.duplicates)})
}

// LiveReport is what the live reader (reading during the faults) saw.
type LiveReport struct {
	Delivered     int `json:"delivered"`
	Missing       int `json:"missing"` // acked, not delivered by the end of the drain
	Unexpected    int `json:"unexpected"`
	Duplicates    int `json:"duplicates"`
	Reordered     int `json:"reordered"`
	InDoubt       int `json:"in_doubt"`
	CorruptShards int `json:"corrupt_shards"`
	// MissingSamples names up to 20 missing records.
	MissingSamples []string `json:"missing_samples,omitempty"`
}
