package kafka

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// Partition tails: ListOffsets "latest" and the Fetch high watermark are
// both the Kafka offset after the last record below the partition's read
// frontier (docs/kafka.md#offsets). So that every gateway answers the
// same and no answer goes backwards, it is derived from the data: a
// search of the partition's slots (tail_scan.go), never the gateway's
// clock, and each gateway keeps the highest value it found per partition.
// Records its read sessions hand out raise it too (they are committed
// records below a reader's frontier). Requests share one cached search
// per partition, run at most once per reader poll (ListOffsets) or per
// second (Fetch, which also learns the tail from its own records), a few
// at a time per gateway, each bounded in time.
const (
	maxTails         = 16384            // partitions whose tail a gateway keeps
	tailIdle         = 10 * time.Minute // a tail nobody asked for this long may be dropped
	tailSearches     = 8                // searches running at once per gateway
	tailSearchFor    = 3 * time.Second  // one search
	tailFetchRefresh = time.Second      // a fetch refreshes a tail at most this often
)

// errNoTail: the tail was never found (nodes unreachable, the search
// bounds hit); answered OFFSET_NOT_AVAILABLE, which clients retry.
var errNoTail = errors.New("kafka gateway: the partition's last record is not known yet")

type tailKey struct {
	topic   string
	part    int
	created uint64 // a topic deleted and created again is another partition
}

// tail is one partition's cached tail.
type tail struct {
	mu      sync.Mutex
	known   bool
	next    int64     // Kafka offset after the last record known (>= the topic's first offset)
	scanned uint64    // every committed record below it is counted in next
	tried   time.Time // when the last search ended (found or not)
	busy    chan struct{}
	used    time.Time
}

// tails are a gateway's partition tails.
type tails struct {
	nc   *nats.Conn
	subj bus.Subjects
	log  *slog.Logger
	sem  chan struct{}
	// ctx ends every search when the gateway closes; bg counts the
	// searches fetches started in the background.
	ctx  context.Context
	stop context.CancelFunc
	bg   sync.WaitGroup

	mu    sync.Mutex
	byKey map[tailKey]*tail
}

func newTails(nc *nats.Conn, cluster string, log *slog.Logger) (*tails, error) {
	subj, err := bus.NewSubjects(cluster)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return &tails{nc: nc, subj: subj, log: log, sem: make(chan struct{}, tailSearches), ctx: ctx, stop: stop,
		byKey: map[tailKey]*tail{}}, nil
}

// close ends the searches under way and waits for the background ones.
func (ts *tails) close() {
	ts.stop()
	ts.bg.Wait()
}

// get returns the tail of t's partition, making room when full.
func (ts *tails) get(t *meta.Topic, part int) *tail {
	k := tailKey{topic: t.Name, part: part, created: t.Created}
	now := time.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	tl := ts.byKey[k]
	if tl == nil {
		if len(ts.byKey) >= maxTails {
			ts.evict(now)
		}
		tl = &tail{next: timeOffset(time.Unix(0, int64(t.Created)), t.Params.Grid)}
		ts.byKey[k] = tl
	}
	tl.mu.Lock()
	tl.used = now
	tl.mu.Unlock()
	return tl
}

// evict drops idle tails, or an arbitrary half when none is idle
// (ts.mu held). A dropped tail is searched again from the start.
func (ts *tails) evict(now time.Time) {
	n := 0
	for k, tl := range ts.byKey {
		tl.mu.Lock()
		idle := now.Sub(tl.used) > tailIdle && tl.busy == nil
		tl.mu.Unlock()
		if idle || n%2 == 0 && len(ts.byKey) >= maxTails {
			delete(ts.byKey, k)
		}
		n++
	}
}

// latest is the partition's tail, searched again when the cached one is
// older than every (the reader poll for ListOffsets). Concurrent callers
// share one search; a caller waits for it until ctx ends and then gets
// the cached value, or errNoTail if none was ever found.
func (ts *tails) latest(ctx context.Context, t *meta.Topic, part int, every time.Duration) (int64, error) {
	tl := ts.get(t, part)
	for searched := false; ; {
		tl.mu.Lock()
		if searched || !tl.tried.IsZero() && time.Since(tl.tried) < every {
			known, v := tl.known, tl.next
			tl.mu.Unlock()
			if !known {
				return 0, errNoTail
			}
			return v, nil
		}
		busy := tl.busy
		if busy == nil {
			tl.busy = make(chan struct{})
			tl.mu.Unlock()
			ts.search(t, part, tl)
			searched = true
			continue
		}
		tl.mu.Unlock()
		select {
		case <-busy:
			searched = true
		case <-ctx.Done():
			return ts.cached(tl)
		}
	}
}

func (ts *tails) cached(tl *tail) (int64, error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if !tl.known {
		return 0, errNoTail
	}
	return tl.next, nil
}

// high is the high watermark of a fetch: the cached tail raised to seen
// (the offset after the newest record the fetch's session holds). A tail
// older than tailFetchRefresh is searched again in the background, if a
// search slot is free; one never found is waited for until ctx ends.
func (ts *tails) high(ctx context.Context, t *meta.Topic, part int, seen int64) int64 {
	tl := ts.get(t, part)
	tl.mu.Lock()
	tl.next = max(tl.next, seen)
	known, stale, idle := tl.known, time.Since(tl.tried) >= tailFetchRefresh, tl.busy == nil
	v := tl.next
	if stale && idle {
		tl.busy = make(chan struct{})
	}
	tl.mu.Unlock()
	switch {
	case !known && seen == 0:
		if stale && idle {
			ts.search(t, part, tl)
		}
		if got, err := ts.latest(ctx, t, part, tailFetchRefresh); err == nil {
			v = got
		}
	case stale && idle:
		ts.bg.Add(1)
		go func() {
			defer ts.bg.Done()
			ts.search(t, part, tl)
		}()
	}
	return max(v, seen)
}

// search runs one search of tl (whose busy channel the caller set) and
// ends it.
func (ts *tails) search(t *meta.Topic, part int, tl *tail) {
	ctx, cancel := context.WithTimeout(ts.ctx, tailSearchFor)
	defer cancel()
	var found tailFound
	err := context.DeadlineExceeded
	tl.mu.Lock()
	lo := max(tl.scanned, t.Created)
	tl.mu.Unlock()
	select {
	case ts.sem <- struct{}{}:
		s := tailScan{nc: ts.nc, subj: ts.subj, t: t, part: part}
		head := uint64(max(time.Now().Add(-t.Params.ReadDelay).UnixNano(), 0))
		found, err = s.find(ctx, lo, head)
		<-ts.sem
	case <-ctx.Done():
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if err == nil {
		tl.known = true
		tl.next = max(tl.next, int64(found.next))
		tl.scanned = max(tl.scanned, found.frontier)
	} else {
		ts.log.Debug("kafka gateway: cannot find a partition's last record", "topic", t.Name, "partition", part, "err", err)
	}
	tl.tried = time.Now()
	close(tl.busy)
	tl.busy = nil
}

// pollFor is how often a topic's tail may be searched for ListOffsets:
// the reader poll, so the answer is never staler than a reader's view.
func pollFor(t *meta.Topic) time.Duration { return actors.PollFor(t.Params) }
