package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestNodeRacingWrites: many clients race different stripes for one slot;
// exactly one wins, every other gets CONFLICT, and the store holds the
// winner's shard.
func TestNodeRacingWrites(t *testing.T) {
	e := newEnv(t, envOpts{})
	// More connections than one, so publishes are not serialized by a
	// single client connection.
	conns := []*nats.Conn{e.nc}
	for i := 0; i < 3; i++ {
		nc, err := e.srv.Connect("racer")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns = append(conns, nc)
	}
	const racers = 24
	for round := uint64(0); round < 6; round++ {
		// Alternate a fresh range (the owner is spawned under the race) and
		// a range whose owner is already running.
		off := midTime + round*ms
		if round%2 == 1 {
			off = base + 700*ms + round
		}
		shardsOf := make([][]byte, racers)
		for i := range shardsOf {
			shardsOf[i] = shardFor(t, 0, 10_000*(round+1)+uint64(i), off)
		}
		statuses := make([]bus.Status, racers)
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < racers; i++ {
			wg.Add(1)
			data := bus.WriteReq{Topic: testTopic, Partition: 0, Offset: off, Shard: shardsOf[i]}.Marshal()
			nc := conns[i%len(conns)]
			go func() {
				defer wg.Done()
				<-start
				msg, err := nc.Request(e.slot(0), data, requestWait)
				if err != nil {
					errs[i] = err
					return
				}
				r, err := bus.DecodeWriteReply(msg.Data)
				statuses[i], errs[i] = r.Status, err
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := 0; i < racers; i++ {
			switch {
			case errs[i] != nil:
				t.Fatalf("round %d racer %d: %v", round, i, errs[i])
			case statuses[i] == bus.StatusOK:
				if winner >= 0 {
					t.Fatalf("round %d: racers %d and %d both got OK for offset %d", round, winner, i, off)
				}
				winner = i
			case statuses[i] != bus.StatusConflict:
				t.Fatalf("round %d racer %d: %s, want OK or CONFLICT", round, i, statuses[i])
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no racer won offset %d", round, off)
		}
		got, err := e.stored(0, off)
		if err != nil || !bytes.Equal(got, shardsOf[winner]) {
			t.Fatalf("round %d: the store does not hold the winner's shard (%v)", round, err)
		}
	}
	st := e.node.Stats()
	if w, c := st.Writes.Load(), st.Conflicts.Load(); w != 6 || c != 6*(racers-1) {
		t.Errorf("stats: %d writes, %d conflicts; want 6 and %d", w, c, 6*(racers-1))
	}
}

// TestNodeKill: a killed node stops answering at once: requests find no
// responder (they do not wait for a timeout).
func TestNodeKill(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.write(0, midTime, shardFor(t, 0, 1, midTime))
	expectStatus(t, "write before kill", r.Status, bus.StatusOK, r.Detail)

	e.node.Kill()
	if err := e.nc.Flush(); err != nil { // the unsubscribe has reached the server
		t.Fatal(err)
	}
	for i, data := range [][]byte{
		bus.WriteReq{Topic: testTopic, Partition: 0, Offset: midTime + ms, Shard: shardFor(t, 0, 2, midTime+ms)}.Marshal(),
		bus.ScanReq{Topic: testTopic, Partition: 0, From: base, To: base + second}.Marshal(),
	} {
		began := time.Now()
		subject := e.slot(0)
		if i == 1 {
			subject = e.subj.Scan(testNode, testTopic, 0)
		}
		_, err := e.nc.Request(subject, data, requestWait)
		if !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("request to a killed node: %v, want %v", err, nats.ErrNoResponders)
		}
		if d := time.Since(began); d > requestWait/2 {
			t.Errorf("no-responders answer took %v", d)
		}
	}
	e.node.Kill() // idempotent
	if err := e.node.Stop(context.Background()); err != nil {
		t.Errorf("Stop after Kill: %v", err)
	}
	// What was acknowledged is in the store.
	if _, err := e.stored(0, midTime); err != nil {
		t.Fatalf("acknowledged shard: %v", err)
	}
}

// TestNodeStopDrains: Stop answers every request the node had taken in,
// including those still queued in an owner's mailbox, and only then goes
// away; later requests find no responder. (protoactor stops children with
// system messages that jump the mailbox queue, so a plain poison of the
// root dropped them.) Whether the stop overtakes the queued writes is a
// race, so the scenario runs a few times; each run asserts the outcome
// deterministically.
func TestNodeStopDrains(t *testing.T) {
	for run := 0; run < 5; run++ {
		t.Run(fmt.Sprint(run), testNodeStopDrains)
	}
}

func testNodeStopDrains(t *testing.T) {
	e := newEnv(t, envOpts{})
	// With the store held, the range's owner blocks in its load barrier and
	// every write queues in its mailbox (and its partition's).
	e.mem.Hold()
	const n, scans = 40, 4
	type result struct {
		i   int
		msg *nats.Msg
		err error
	}
	results := make(chan result, n+scans)
	for i := 0; i < n; i++ {
		off := midTime + uint64(i)*ms
		if i%2 == 1 {
			off = base + 300*ms + uint64(i) // more slots of the same range
		}
		data := bus.WriteReq{Topic: testTopic, Partition: 0, Offset: off, Shard: shardFor(t, 0, uint64(100+i), off)}.Marshal()
		go func() {
			msg, err := e.nc.Request(e.slot(0), data, requestWait)
			results <- result{i, msg, err}
		}()
	}
	for i := n; i < n+scans; i++ {
		data := bus.ScanReq{Topic: testTopic, Partition: 0, From: base, To: base + second}.Marshal()
		go func() {
			msg, err := e.nc.Request(e.subj.Scan(testNode, testTopic, 0), data, requestWait)
			results <- result{i, msg, err}
		}()
	}
	testkit.WaitFor(t, "every request to be inside the node", func() bool { return e.node.pending.Load() == n+scans })

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- e.node.Stop(ctx)
	}()
	// Stop first drains the subscription; release the store only once it
	// is under way, so the queued writes are handled during the stop.
	testkit.WaitFor(t, "the subscriptions to drain", func() bool { return !e.node.sub.IsValid() && !e.node.scanSub.IsValid() })
	e.mem.Release()
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// Stop returned: every reply has been sent already.
	for i := 0; i < n+scans; i++ {
		res := <-results
		if res.err != nil {
			t.Errorf("request %d taken in before Stop: %v", res.i, res.err)
			continue
		}
		if res.i >= n {
			r := decodeScan(t, res.msg.Data)
			if r.Status != bus.StatusOK {
				t.Errorf("scan %d: %s %q", res.i, r.Status, r.Detail)
			}
			continue
		}
		r := decodeWrite(t, res.msg.Data)
		if r.Status != bus.StatusOK {
			t.Errorf("write %d: %s %q", res.i, r.Status, r.Detail)
		}
	}
	if w := e.node.Stats().Writes.Load(); w != n {
		t.Errorf("Writes = %d, want %d", w, n)
	}
	if _, err := e.nc.Request(e.slot(0), []byte("anything"), requestWait); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("request after Stop: %v, want no responders", err)
	}
}
