package kafka

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// An idempotent producer's retry of a batch this gateway is writing or
// wrote waits for (or gets) the first write's outcome instead of writing
// a second copy. A retry through another gateway writes under the same
// stripe ids, and readers drop the copy (docs/kafka.md, "Offsets").
const (
	idemHorizon = 150 * time.Second // covers delivery.timeout.ms (120 s)
	idemMax     = 200_000           // entries kept; the oldest go first
)

type idemKey struct {
	topic string
	part  int32
	pid   int64
	epoch int16
	seq   int32
}

// idemEntry is one batch's outcome, once done is closed.
type idemEntry struct {
	done chan struct{}
	at   time.Time
	off  int64
	code int16
	err  error
}

func (e *idemEntry) resolve(off int64, code int16, err error) {
	e.off, e.code, e.err = off, code, err
	close(e.done)
}

func (e *idemEntry) wait(ctx context.Context) (int64, int16, error) {
	select {
	case <-e.done:
		return e.off, e.code, e.err
	case <-ctx.Done():
		return 0, kerr.RequestTimedOut.Code, ctx.Err()
	}
}

type idempotence struct {
	mu    sync.Mutex
	m     map[idemKey]*idemEntry
	order []idemKey // insertion order, for expiry
}

func newIdempotence() *idempotence { return &idempotence{m: map[idemKey]*idemEntry{}} }

// claim returns the entry of k and whether the caller is the first (and
// must write and resolve it). A failed write is forgotten, so the
// client's retry writes again.
func (d *idempotence) claim(k idemKey) (*idemEntry, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire(time.Now())
	if e, ok := d.m[k]; ok {
		select {
		case <-e.done:
			if e.code == 0 {
				return e, false
			}
		default:
			return e, false
		}
	}
	e := &idemEntry{done: make(chan struct{}), at: time.Now()}
	d.m[k] = e
	d.order = append(d.order, k)
	return e, true
}

func (d *idempotence) expire(now time.Time) {
	cut := 0
	for cut < len(d.order) {
		k := d.order[cut]
		e := d.m[k]
		if e != nil && now.Sub(e.at) < idemHorizon && len(d.order)-cut <= idemMax {
			break
		}
		if e != nil {
			select {
			case <-e.done:
				delete(d.m, k)
			default:
				if len(d.order)-cut <= idemMax {
					// Still being written: keep it (and everything after).
					d.order = d.order[cut:]
					return
				}
				delete(d.m, k)
			}
		}
		cut++
	}
	d.order = d.order[cut:]
}
