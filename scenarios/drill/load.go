package drill

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/raidq/raidq"
)

// Outcome of one send.
const (
	statusPending uint8 = iota // attempted, no outcome yet
	statusAcked
	statusFailed  // the client said it could not commit (reason in err)
	statusUnknown // timed out, closed, or no outcome by the end: may have committed
)

// sendRec is the history of one send.
type sendRec struct {
	sent   int64 // ns since the load start, when SendAsync was called
	done   int64 // ns since the load start, when the outcome arrived
	status uint8
	errCls string
	part   int32
	off    uint64
	idx    uint32
	stripe string
}

// producerHist is the history of one producer's sends (index = sequence).
type producerHist struct {
	mu     sync.Mutex
	recs   []sendRec
	frozen bool // outcomes after the load's end are ignored
}

// inDoubt is one in-doubt report of a reader.
type inDoubt struct {
	at      int64
	part    int
	off     uint64
	stripe  string
	seen    int
	unheard []int
}

// history is every send's record plus the readers' reports.
type history struct {
	start time.Time
	prods []*producerHist

	mu       sync.Mutex
	errFirst map[string]string // class -> first message
	errCount map[string]int
	inDoubts []inDoubt
	corrupt  int
	last     time.Time // last SendAsync
}

func newHistory(start time.Time, producers int) *history {
	h := &history{start: start, errFirst: make(map[string]string), errCount: make(map[string]int)}
	for range producers {
		h.prods = append(h.prods, &producerHist{})
	}
	return h
}

// key packs a producer and a sequence number.
func key(prod, seq int) uint64 { return uint64(prod)<<40 | uint64(seq) }

// attempt records a send about to be handed to the client; it returns
// its sequence number.
func (h *history) attempt(prod int, now time.Time) int {
	p := h.prods[prod]
	p.mu.Lock()
	seq := len(p.recs)
	p.recs = append(p.recs, sendRec{sent: now.Sub(h.start).Nanoseconds()})
	p.mu.Unlock()
	h.mu.Lock()
	if now.After(h.last) {
		h.last = now
	}
	h.mu.Unlock()
	return seq
}

// classify maps a send error to a class and says whether the send may
// still have committed (unknown) or was refused (failed).
func classify(err error) (cls string, unknown bool) {
	switch {
	case errors.Is(err, raidq.ErrTimeout):
		return "timeout", true
	case errors.Is(err, raidq.ErrClosed):
		return "closed", true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "context", true
	case errors.Is(err, raidq.ErrNotEnoughNodes):
		return "not_enough_nodes", false
	case errors.Is(err, raidq.ErrClockSkew):
		return "clock_skew", false
	case errors.Is(err, raidq.ErrBusy):
		return "busy", false
	}
	return "other", false
}

// outcome records the result of send seq of producer prod.
func (h *history) outcome(prod, seq int, m raidq.Message, err error) {
	if err != nil {
		cls, unknown := classify(err)
		h.outcomeClass(prod, seq, cls, unknown, err)
		return
	}
	now := time.Since(h.start).Nanoseconds()
	p := h.prods[prod]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen || seq >= len(p.recs) || p.recs[seq].status != statusPending {
		return
	}
	rec := &p.recs[seq]
	rec.done, rec.status = now, statusAcked
	rec.part, rec.off, rec.idx = int32(m.Partition), m.Position.Offset, uint32(m.Position.Index)
	rec.stripe = m.Stripe.String()
}

// outcomeClass records that send seq of producer prod failed with err of
// class cls: unknown if it may have committed, else failed.
func (h *history) outcomeClass(prod, seq int, cls string, unknown bool, err error) {
	now := time.Since(h.start).Nanoseconds()
	p := h.prods[prod]
	p.mu.Lock()
	if p.frozen || seq >= len(p.recs) || p.recs[seq].status != statusPending {
		p.mu.Unlock()
		return
	}
	rec := &p.recs[seq]
	rec.done = now
	rec.status, rec.errCls = statusFailed, cls
	if unknown {
		rec.status = statusUnknown
	}
	p.mu.Unlock()
	h.mu.Lock()
	h.errCount[cls]++
	if _, ok := h.errFirst[cls]; !ok {
		h.errFirst[cls] = err.Error()
	}
	h.mu.Unlock()
}

// freeze ends the recording: sends still pending become unknown.
func (h *history) freeze() {
	now := time.Since(h.start).Nanoseconds()
	for _, p := range h.prods {
		p.mu.Lock()
		p.frozen = true
		for i := range p.recs {
			if p.recs[i].status == statusPending {
				p.recs[i].status, p.recs[i].errCls, p.recs[i].done = statusUnknown, "no_outcome", now
				h.mu.Lock()
				h.errCount["no_outcome"]++
				if _, ok := h.errFirst["no_outcome"]; !ok {
					h.errFirst["no_outcome"] = "no outcome 20s after the load ended (the send may have committed)"
				}
				h.mu.Unlock()
			}
		}
		p.mu.Unlock()
	}
}

// counts returns acked, failed (failed + unknown) and pending sends.
func (h *history) counts() (acked, failed, pending int) {
	for _, p := range h.prods {
		p.mu.Lock()
		for i := range p.recs {
			switch p.recs[i].status {
			case statusAcked:
				acked++
			case statusPending:
				pending++
			default:
				failed++
			}
		}
		p.mu.Unlock()
	}
	return
}

func (h *history) ackedSet() map[uint64]bool {
	s := make(map[uint64]bool)
	for pi, p := range h.prods {
		p.mu.Lock()
		for i := range p.recs {
			if p.recs[i].status == statusAcked {
				s[key(pi, i)] = true
			}
		}
		p.mu.Unlock()
	}
	return s
}

func (h *history) lastSend() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last.IsZero() {
		return time.Now()
	}
	return h.last
}

func (h *history) onReport(r raidq.ReadReport) {
	p := r.Partition
	if len(r.InDoubt) == 0 && len(r.Corrupt) == 0 {
		return
	}
	now := time.Since(h.start).Nanoseconds()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.corrupt += len(r.Corrupt)
	for _, d := range r.InDoubt {
		h.inDoubts = append(h.inDoubts, inDoubt{at: now, part: p, off: d.Offset, stripe: d.Stripe.String(), seen: d.Seen,
			unheard: append([]int(nil), d.Unheard...)})
	}
}

// delivery is one message the consumer delivered.
type delivery struct {
	at     int64 // ns since the load start
	known  bool  // the value parsed as a drill message
	prod   int
	seq    int
	part   int
	off    uint64
	idx    int
	stripe string
	raw    string // the id part of an unparsable value (truncated)
}

// Message values are "p<producer>-<seq>|<send unix ns>|" padded to Size.
func value(prod, seq int, now time.Time, size int, pad []byte) []byte {
	b := make([]byte, 0, size)
	b = append(b, 'p')
	b = strconv.AppendInt(b, int64(prod), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, now.UnixNano(), 10)
	b = append(b, '|')
	if len(b) < size {
		b = append(b, pad[:size-len(b)]...)
	}
	return b
}

// parseID parses the "p<producer>-<seq>|" prefix of a value.
func parseID(v []byte) (prod, seq int, ok bool) {
	if len(v) < 4 || v[0] != 'p' {
		return 0, 0, false
	}
	i := 1
	num := func() (int, bool) {
		start := i
		n := 0
		for i < len(v) && v[i] >= '0' && v[i] <= '9' && i-start < 12 {
			n = n*10 + int(v[i]-'0')
			i++
		}
		return n, i > start
	}
	prod, ok1 := num()
	if !ok1 || i >= len(v) || v[i] != '-' {
		return 0, 0, false
	}
	i++
	seq, ok2 := num()
	if !ok2 || i >= len(v) || v[i] != '|' {
		return 0, 0, false
	}
	return prod, seq, true
}

// parseDelivery maps a delivered message to the history (at: now).
func (h *history) parseDelivery(m raidq.Message, start time.Time) delivery {
	return h.toDelivery(delivery{at: time.Since(start).Nanoseconds(), part: m.Partition, off: m.Position.Offset,
		idx: int(m.Position.Index), stripe: m.Stripe.String()}, m.Value)
}

// toDelivery fills in d's record from a delivered value: known, prod and
// seq for a drill value of one of the history's producers, else raw (the
// quoted start of the value). Every reader (in-process or a group member
// process) maps its deliveries through it.
func (h *history) toDelivery(d delivery, value []byte) delivery {
	prod, seq, ok := parseID(value)
	if ok && prod < len(h.prods) {
		d.known, d.prod, d.seq = true, prod, seq
		return d
	}
	raw := value
	if len(raw) > 40 {
		raw = raw[:40]
	}
	d.raw = fmt.Sprintf("%q", raw)
	return d
}
