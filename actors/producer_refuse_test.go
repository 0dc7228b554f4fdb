package actors

import (
	"errors"
	"testing"
	"time"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/stripe"
)

// TestProducerRefuse: Refuse fails every record without an outcome,
// open, queued or in flight, with the refusal, and no other: a record
// acked before keeps its ack, and the producer writes the records sent
// after it (a refusal is the cluster's answer to those writes, not the
// end of the producer).
func TestProducerRefuse(t *testing.T) {
	p, f, _ := producerEnv(t, ProducerConfig{DeliveryTimeout: time.Minute})
	send := func(part int) <-chan SendResult {
		ch := make(chan SendResult, 1)
		p.Send(stripe.Record{Value: []byte("v")}, part, func(r SendResult) { ch <- r })
		return ch
	}
	wait := func(what string, ch <-chan SendResult) SendResult {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(10 * time.Second): // a failure bound only
			t.Fatalf("%s: no outcome", what)
			return SendResult{}
		}
	}
	if r := wait("the first send", send(0)); r.Err != nil {
		t.Fatalf("the first send: %v", r.Err)
	}
	// Every node now refuses every attempt: the sends retry for a minute.
	f.status.Store(uint32(bus.StatusConflict))
	var pending []<-chan SendResult
	for i := range 40 {
		pending = append(pending, send(i%2))
	}
	refusal := errors.New("refused by the cluster")
	p.Refuse(refusal)
	for i, ch := range pending {
		if r := wait("a pending send", ch); !errors.Is(r.Err, refusal) {
			t.Fatalf("pending send %d: %v, want the refusal", i, r.Err)
		}
	}
	flush(t, p) // nothing left without an outcome
	f.status.Store(0)
	for part := range 2 {
		if r := wait("a send after the refusal", send(part)); r.Err != nil {
			t.Fatalf("a send to partition %d after the refusal: %v", part, r.Err)
		}
	}
}
