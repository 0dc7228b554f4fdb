package node

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus"
)

// TestNodeServesUnderFlood: while one connection floods the node with
// malformed, mismatched, forged and oversized requests as fast as it can,
// another's good writes and scans all succeed. (No timing is asserted:
// the shared machine decides how fast; the good requests must not fail.)
func TestNodeServesUnderFlood(t *testing.T) {
	e := newEnv(t, envOpts{})
	flood, err := e.srv.Connect("flood")
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	var answered atomic.Int64
	inbox := nats.NewInbox()
	sub, err := flood.Subscribe(inbox+".*", func(*nats.Msg) { answered.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)

	good := shardFor(t, 0, 1, midTime)
	valid := bus.WriteReq{Topic: testTopic, Partition: 0, Offset: midTime, Shard: good}.Marshal()
	big := make([]byte, 900<<10) // under the 1 MiB max payload, far over any sane request
	for i := range big {
		big[i] = byte(i)
	}
	payloads := []func(r *rand.Rand) (string, []byte){
		func(r *rand.Rand) (string, []byte) { // random bytes
			b := make([]byte, 1+r.IntN(256))
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			return e.slot(0), b
		},
		func(r *rand.Rand) (string, []byte) { return e.slot(0), valid[:r.IntN(len(valid))] }, // truncated
		func(r *rand.Rand) (string, []byte) { // the payload names another partition
			w := bus.WriteReq{Topic: testTopic, Partition: 1, Offset: midTime, Shard: good}
			return e.slot(0), w.Marshal()
		},
		func(r *rand.Rand) (string, []byte) { // a forged repair write
			w := bus.WriteReq{Topic: testTopic, Partition: 0, Offset: midTime + uint64(r.IntN(1000)), Repair: true, Shard: good}
			return e.slot(0), w.Marshal()
		},
		func(r *rand.Rand) (string, []byte) { return e.subj.Scan(testNode, testTopic, 0), valid }, // a write on the scan subject
		func(r *rand.Rand) (string, []byte) { // a scan of an unknown topic
			return e.subj.Scan(testNode, "nope", 0), bus.ScanReq{Topic: "nope", From: base, To: base + second}.Marshal()
		},
		func(r *rand.Rand) (string, []byte) { // now and then oversized garbage
			if r.IntN(20) == 0 {
				return e.slot(1), big
			}
			return e.slot(1), []byte{1}
		},
	}

	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(7, 8))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			subject, data := payloads[r.IntN(len(payloads))](r)
			if err := flood.PublishRequest(subject, inbox+"."+strconv.Itoa(i), data); err != nil {
				t.Errorf("flood publish: %v", err)
				return
			}
			sent.Add(1)
			if i%256 == 255 {
				_ = flood.Flush() // keep the flood at the rate the server takes it
			}
		}
	}()

	// Good traffic on another connection: every write and scan succeeds,
	// until the flood has sent floodMin requests (at least minWrites writes,
	// at offsets 50µs apart inside the accept window).
	const minWrites, maxWrites, floodMin = 300, 9000, 3000
	writes := 0
	for i := 0; i < maxWrites && (i < minWrites || sent.Load() < floodMin); i++ {
		writes++
		off := base + 260*ms + uint64(i)*50_000
		r := e.write(0, off, shardFor(t, 0, uint64(100+i), off))
		expectStatus(t, "good write under flood", r.Status, bus.StatusOK, r.Detail)
		if i%50 == 49 {
			s := e.scan(bus.ScanReq{Topic: testTopic, Partition: 0, From: base, To: base + 200*ms})
			expectStatus(t, "good scan under flood", s.Status, bus.StatusOK, s.Detail)
		}
	}
	close(stop)
	wg.Wait()
	_ = flood.Flush()
	c := e.node.Stats().Snapshot()
	t.Logf("flood: %d hostile requests sent, %d answered while %d good writes succeeded; node: %d bad requests (%d malformed, %d mismatches, %d forged repairs)",
		sent.Load(), answered.Load(), writes, c.BadRequests, c.Malformed, c.Mismatches, c.ForgedRepairs)
	if sent.Load() < floodMin {
		t.Logf("the flood sent only %d requests during %d good writes (a slow machine)", sent.Load(), writes)
	}
	if c.Malformed == 0 || c.Mismatches == 0 || c.ForgedRepairs == 0 {
		t.Errorf("refusals not counted by class: %+v", c)
	}
	if c.Writes < int64(writes) {
		t.Errorf("node counted %d writes, want at least %d", c.Writes, writes)
	}
}
