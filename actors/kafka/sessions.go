package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/metrics"
)

// Read sessions: a Kafka consumer fetches a partition at an offset, again
// and again, each fetch starting where the last one ended. The gateway
// keeps a raidq reader per (connection, topic, partition) running from
// there, and a buffer of what it decoded, so a fetch is served from
// memory. A fetch at an offset the session is not at (a seek, a
// rebalance) starts a new reader there.
const (
	sessionBufBytes = 8 << 20         // decoded bytes buffered per session before its reader pauses
	sessionIdle     = 2 * time.Minute // a session nobody fetched from for this long is closed
	maxSessions     = 4096            // per gateway
	// Records above an in-doubt offset are held back until it resolves
	// (a Kafka client drops an offset below its position, so a late record
	// must come before everything above it), up to these bounds; past them
	// they are released and the late record, if it comes, is lost to this
	// session's client (logged).
	maxHeldBytes = 64 << 20
	maxHeldFor   = 2 * time.Minute
)

// ErrTooManySessions: the gateway reads too many partitions at once.
var ErrTooManySessions = errors.New("kafka gateway: too many partition readers")

type sessionKey struct {
	conn  *conn
	topic string
	part  int
}

// session is one running partition reader and its buffer.
type session struct {
	cons *raidq.Consumer
	log  *slog.Logger

	mu       sync.Mutex
	cond     *sync.Cond
	buf      []raidq.Message // decoded, Kafka offsets increasing, none below floor
	bufBytes int
	floor    int64 // the last fetch's offset: nothing below it is kept
	high     int64 // Kafka offset after the newest record buffered (or floor)
	seen     int64 // Kafka offset after the newest record buffered (0: none yet)
	used     time.Time
	arrived  chan struct{} // closed (and replaced) when records arrive
	closed   bool
	err      error

	doubt     map[uint64]bool // unresolved in-doubt stripe offsets at or above high
	held      []raidq.Message // decoded records above the lowest in-doubt offset
	heldBytes int
	heldSince time.Time
}

func startSession(c *raidq.Client, topic string, part int, grid uint64, off int64, log *slog.Logger) (*session, error) {
	pos := position(off, grid)
	s := &session{log: log, floor: off, high: off, used: time.Now(), arrived: make(chan struct{}), doubt: map[uint64]bool{}}
	cons, err := c.Consumer(topic, raidq.WithPartitions(part), raidq.WithStart(time.Unix(0, int64(pos.Offset))),
		raidq.WithBuffer(1024), raidq.WithReports(s.report))
	if err != nil {
		return nil, err
	}
	s.cons = cons
	s.cond = sync.NewCond(&s.mu)
	go s.pump()
	return s, nil
}

// pump moves decoded messages into the buffer, pausing the reader while
// the buffer is full. Records above an unresolved in-doubt offset are
// held back until it resolves (or the hold's bounds pass), so a late
// record reaches the client before the ones above it: Kafka offsets only
// grow. Records below the start offset (the start stripe's first
// records) are dropped.
func (s *session) pump() {
	for m := range s.cons.Messages() {
		s.mu.Lock()
		for s.bufBytes >= sessionBufBytes && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		s.accept(m)
		s.mu.Unlock()
	}
	s.mu.Lock()
	if !s.closed {
		s.err = s.cons.Err()
		if s.err == nil {
			s.err = raidq.ErrClosed
		}
	}
	close(s.arrived)
	s.arrived = make(chan struct{})
	s.mu.Unlock()
}

// accept takes one decoded record (s.mu held): a late one resolves its
// offset's doubt; one above the lowest in-doubt offset is held.
func (s *session) accept(m raidq.Message) {
	if m.Late {
		delete(s.doubt, m.Position.Offset)
	}
	if low, ok := s.lowestDoubt(); ok && m.Position.Offset > low {
		s.hold(m)
	} else {
		s.add(m)
	}
	s.release()
}

// add appends m to the buffer (s.mu held); a record below what clients
// were given is dropped (logged if it came late).
func (s *session) add(m raidq.Message) {
	off := kafkaOffset(m.Position)
	if off < s.high {
		if m.Late {
			s.log.Error("kafka gateway: a late record (in doubt at first) is below what this Kafka client was given; it does not see it",
				"topic", m.Topic, "partition", m.Partition, "offset", off)
		}
		return
	}
	s.buf = append(s.buf, m)
	s.bufBytes += msgSize(&m)
	s.high, s.seen = off+1, off+1
	close(s.arrived)
	s.arrived = make(chan struct{})
}

func (s *session) hold(m raidq.Message) {
	if len(s.held) == 0 {
		s.heldSince = time.Now()
	}
	s.held = append(s.held, m)
	s.heldBytes += msgSize(&m)
}

func (s *session) lowestDoubt() (uint64, bool) {
	var low uint64
	found := false
	for off := range s.doubt {
		if !found || off < low {
			low, found = off, true
		}
	}
	return low, found
}

// release moves held records below the lowest in-doubt offset to the
// buffer, or all of them once the hold is over its bounds (s.mu held).
func (s *session) release() {
	if len(s.held) == 0 {
		return
	}
	if s.heldBytes > maxHeldBytes || time.Since(s.heldSince) > maxHeldFor {
		low, _ := s.lowestDoubt()
		s.log.Error("kafka gateway: an in-doubt offset stayed unresolved too long; releasing the records held above it (if it resolves, this Kafka client will not see it)",
			"offset", low, "held_records", len(s.held), "held_bytes", s.heldBytes, "held_for", time.Since(s.heldSince).Round(time.Millisecond))
		clear(s.doubt)
	}
	low, ok := s.lowestDoubt()
	n := 0
	for n < len(s.held) && (!ok || s.held[n].Position.Offset < low) {
		s.add(s.held[n])
		s.heldBytes -= msgSize(&s.held[n])
		n++
	}
	s.held = append(s.held[:0:0], s.held[n:]...)
}

// report learns the reader's in-doubt offsets and their resolution. The
// reader reports a scan before it hands over that scan's records, so an
// in-doubt offset is known before any record above it arrives.
func (s *session) report(r raidq.ReadReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range r.InDoubt {
		if int64(d.Offset) >= s.high {
			s.doubt[d.Offset] = true
		}
	}
	for _, off := range r.Resolved {
		delete(s.doubt, off)
	}
	s.release()
}

func msgSize(m *raidq.Message) int {
	n := len(m.Key) + len(m.Value) + 32
	for _, h := range m.Headers {
		n += len(h.Name) + len(h.Value) + 8
	}
	return n
}

// covers says whether a fetch at off continues this session.
func (s *session) covers(off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil && off >= s.floor && off <= s.high
}

// take drops what lies below off (the client has it), releases held
// records whose hold is over its bounds, and returns the buffered records
// from off on, up to maxBytes (at least one), the offset
// after the newest record the session holds or gave (0: none; the high
// watermark is at least that, tail.go), and a channel closed when more
// arrive.
func (s *session) take(off int64, maxBytes int) ([]raidq.Message, int64, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used = time.Now()
	s.release() // the hold's time bound applies when nothing new arrives too
	if off > s.floor {
		cut := 0
		for cut < len(s.buf) && kafkaOffset(s.buf[cut].Position) < off {
			s.bufBytes -= msgSize(&s.buf[cut])
			cut++
		}
		if cut > 0 {
			s.buf = append(s.buf[:0:0], s.buf[cut:]...)
			s.cond.Broadcast()
		}
		s.floor = off
	}
	n, size := 0, 0
	for n < len(s.buf) {
		sz := msgSize(&s.buf[n])
		if n > 0 && size+sz > maxBytes {
			break
		}
		size += sz
		n++
	}
	return s.buf[:n:n], s.seen, s.arrived, s.err
}

func (s *session) idle(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Sub(s.used) > sessionIdle
}

func (s *session) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	_ = s.cons.Close()
}

// sessions are a gateway's read sessions.
type sessions struct {
	c   *raidq.Client
	log *slog.Logger
	m   *metrics.Kafka

	mu    sync.Mutex
	byKey map[sessionKey]*session
	quit  chan struct{}
	done  chan struct{}
}

func newSessions(c *raidq.Client, log *slog.Logger, m *metrics.Kafka) *sessions {
	ss := &sessions{c: c, log: log, m: m, byKey: map[sessionKey]*session{}, quit: make(chan struct{}), done: make(chan struct{})}
	go ss.reap()
	return ss
}

// get returns the session of k that continues at off, starting one
// (and closing the one it replaces) if none does.
func (ss *sessions) get(k sessionKey, grid uint64, off int64) (*session, error) {
	ss.mu.Lock()
	old := ss.byKey[k]
	if old != nil && old.covers(off) {
		ss.mu.Unlock()
		return old, nil
	}
	delete(ss.byKey, k)
	if len(ss.byKey) >= maxSessions {
		ss.mu.Unlock()
		return nil, fmt.Errorf("%w: %d", ErrTooManySessions, maxSessions)
	}
	ss.mu.Unlock()
	if old != nil {
		old.close()
		ss.m.Sessions(-1)
	}
	s, err := startSession(ss.c, k.topic, k.part, grid, off, ss.log)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if cur := ss.byKey[k]; cur != nil {
		// A concurrent fetch of the same partition on the same
		// connection started one first: keep one.
		go s.close()
		return cur, nil
	}
	ss.m.Sessions(1)
	ss.byKey[k] = s
	return s, nil
}

// dropConn closes a connection's sessions.
func (ss *sessions) dropConn(c *conn) { ss.drop(func(k sessionKey) bool { return k.conn == c }) }

// dropTopic closes a deleted topic's sessions.
func (ss *sessions) dropTopic(topic string) {
	ss.drop(func(k sessionKey) bool { return k.topic == topic })
}

func (ss *sessions) drop(match func(sessionKey) bool) {
	ss.mu.Lock()
	var gone []*session
	for k, s := range ss.byKey {
		if match(k) {
			gone = append(gone, s)
			delete(ss.byKey, k)
		}
	}
	ss.mu.Unlock()
	for _, s := range gone {
		s.close()
	}
	ss.m.Sessions(-len(gone))
}

func (ss *sessions) reap() {
	defer close(ss.done)
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ss.quit:
			return
		case now := <-t.C:
			ss.drop(func(k sessionKey) bool {
				s := ss.byKey[k]
				return s != nil && s.idle(now)
			})
		}
	}
}

func (ss *sessions) close() {
	close(ss.quit)
	<-ss.done
	ss.drop(func(sessionKey) bool { return true })
}
