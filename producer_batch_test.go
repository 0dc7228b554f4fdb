package raidq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/scenarios/localtest"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestSendBatchDeliveredOnce: a batch is one stripe under its given id,
// at consecutive indexes from its base position, with each message's
// Time; a retry of it under the same id is delivered once, and what was
// sent before and after it stays in order around it.
func TestSendBatchDeliveredOnce(t *testing.T) {
	_, c := localtest.Start(t, server.LocalClusterConfig{Logger: testkit.Logger(t, slog.LevelError), NoSync: true}, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	before, err := p.SendTo(ctx, 1, raidq.Message{Value: []byte("before")})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)
	batch := make([]raidq.Message, 4)
	for i := range batch {
		batch[i] = raidq.Message{Key: []byte("k"), Value: []byte(fmt.Sprint("batch-", i)), Time: created.Add(time.Duration(i) * time.Millisecond)}
	}
	id := raidq.StripeID{Producer: [16]byte{0x6b, 0x61, 0x66, 0x6b, 0x61}, Seq: 7}
	base, err := p.SendBatch(ctx, 1, batch, raidq.WithStripe(id))
	if err != nil {
		t.Fatal(err)
	}
	if base.Index != 0 || !before.Less(base) {
		t.Fatalf("batch at %v after %v: want Index 0, after the message sent before it", base, before)
	}
	got := make(chan error, 1)
	p.ProduceBatch(ctx, 1, batch, func(pos raidq.Position, sid raidq.StripeID, err error) {
		if err == nil && (sid != id || pos.Index != 0) {
			err = fmt.Errorf("retry at %v as %s, want Index 0 as %s", pos, sid, id)
		}
		got <- err
	}, raidq.WithStripe(id))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendTo(ctx, 1, raidq.Message{Value: []byte("after")}); err != nil {
		t.Fatal(err)
	}

	cons, err := c.Consumer("orders", raidq.WithStart(time.Unix(0, 1)), raidq.WithPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var values []string
	for len(values) == 0 || values[len(values)-1] != "after" {
		m, err := cons.Next(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", values, err)
		}
		values = append(values, string(m.Value))
		if m.Stripe != id {
			if !m.Time.IsZero() {
				t.Fatalf("%s: Time %v, sent without one", m.Value, m.Time)
			}
			continue
		}
		i := int(m.Position.Index)
		if m.Position.Offset != base.Offset || string(m.Value) != fmt.Sprint("batch-", i) || !m.Time.Equal(batch[i].Time) {
			t.Fatalf("batch message %s at %v, Time %v: want batch-%d at offset %d, Time %v", m.Value, m.Position, m.Time, i, base.Offset, batch[i].Time)
		}
	}
	if want := "[before batch-0 batch-1 batch-2 batch-3 after]"; fmt.Sprint(values) != want {
		t.Fatalf("delivered %v, want %s", values, want)
	}
}

// TestSendBatchRefused: a batch the producer cannot write fails with
// ErrInvalidMessage before anything is written.
func TestSendBatchRefused(t *testing.T) {
	_, c := localtest.Start(t, server.LocalClusterConfig{Logger: testkit.Logger(t, slog.LevelError), NoSync: true}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	one := []raidq.Message{{Value: []byte("x")}}
	cases := map[string]struct {
		part int
		msgs []raidq.Message
	}{
		"no messages":            {0, nil},
		"more than a stripe":     {0, make([]raidq.Message, int(raidq.DefaultParams().Grid)+1)},
		"partition out of range": {1, one},
		"Time before the epoch":  {0, []raidq.Message{{Time: time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)}}},
	}
	for name, tc := range cases {
		if _, err := p.SendBatch(ctx, tc.part, tc.msgs); !errors.Is(err, raidq.ErrInvalidMessage) {
			t.Errorf("%s: %v, want %v", name, err, raidq.ErrInvalidMessage)
		}
	}
	if _, err := p.Send(ctx, raidq.Message{Time: time.Unix(-1, 0)}); !errors.Is(err, raidq.ErrInvalidMessage) {
		t.Errorf("Send with Time before the epoch: %v, want %v", err, raidq.ErrInvalidMessage)
	}
	if _, err := p.Send(ctx, raidq.Message{Time: time.UnixMilli(0)}); err != nil { // a Kafka timestamp 0: none
		t.Errorf("Send with Time at the epoch: %v", err)
	}
}
