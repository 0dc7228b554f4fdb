package raidq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq"
)

// refusalBound bounds how long an operation the cluster refused may take
// to end (a failure bound only: it ends at the refusal, milliseconds
// after the first request; without the refusals it would retry or wait
// for ever).
const refusalBound = 10 * time.Second

// checkRefusal: err is the cluster's refusal, matching both sentinels,
// and its message names the user, the subject and the hint.
func checkRefusal(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, raidq.ErrPermissionDenied) || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("%s: %v, want ErrPermissionDenied and nats.ErrPermissionViolation", what, err)
	}
	var pe *raidq.PermissionError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: %v is no *PermissionError", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}

// TestRefusalsEndOperations: on a secured cluster, an operation the
// user's permissions refuse ends with ErrPermissionDenied (naming the
// user, the subject and what the auth file lacks) as soon as the server
// refuses it: a consumer of a topic the user may not read, a member of a
// group outside its groups:, a producer of a topic it may not write, a
// topic create or a group reset without the admin role. A refusal ends
// only the operations that need the refused subject: the producer's and
// the consumer's other topic, on the same connection, go on.
func TestRefusalsEndOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	e := startSecureCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := e.connect(t, raidq.ClientAuth{User: "ops", Password: "opspw"}, &violations{})
	for _, name := range []string{"orders", "payments"} {
		if _, err := admin.CreateTopic(ctx, raidq.TopicConfig{Name: name, Partitions: 2, Params: raidq.DefaultParams()}); err != nil {
			t.Fatalf("admin creates %s: %v", name, err)
		}
	}
	reader := e.connect(t, raidq.ClientAuth{User: "reader", Password: "readerpw"}, &violations{})
	shop := e.connect(t, raidq.ClientAuth{User: "shop", Password: "shoppw"}, &violations{})
	for _, c := range []*raidq.Client{reader, shop} {
		for _, name := range []string{"orders", "payments"} {
			if err := c.WaitTopic(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("consumer of a topic it may not read", func(t *testing.T) {
		orders, err := reader.Consumer("orders", raidq.WithStart(time.Now().Add(-time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		defer orders.Close()
		cons, err := reader.Consumer("payments")
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		nctx, ncancel := context.WithTimeout(ctx, refusalBound)
		defer ncancel()
		_, err = cons.Next(nctx)
		checkRefusal(t, "Next", err, "user reader", `"raidq.sec.scan.`, ".payments.", "consumer: [...]")
		checkRefusal(t, "Err", cons.Err(), "user reader")
		// The consumer of orders, on the same connection, reads on.
		p, err := shop.Producer("orders")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if _, err := p.Send(ctx, raidq.Message{Value: []byte("after the refusal")}); err != nil {
			t.Fatal(err)
		}
		if m, err := orders.Next(ctx); err != nil || string(m.Value) != "after the refusal" {
			t.Fatalf("consumer of orders after the refusal of payments: %q, %v", m.Value, err)
		}
	})

	t.Run("group outside its groups", func(t *testing.T) {
		jctx, jcancel := context.WithTimeout(ctx, refusalBound)
		defer jcancel()
		done := make(chan error, 1)
		go func() {
			cons, err := reader.Consumer("orders", raidq.WithGroup("other"))
			if err == nil {
				// Not refused at the join: it must end soon after.
				_, err = cons.Next(jctx)
				_ = cons.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			checkRefusal(t, "group member", err, "user reader", `"$KV.raidq_sec_groups.g.other.orders.`, "groups:")
		case <-jctx.Done():
			t.Fatalf("a member of a group outside the user's groups: did not end within %v", refusalBound)
		}
	})

	t.Run("producer of a topic it may not write", func(t *testing.T) {
		orders, err := shop.Producer("orders")
		if err != nil {
			t.Fatal(err)
		}
		defer orders.Close()
		// Retrying for a minute: only the refusal can end the send in time.
		payments, err := shop.Producer("payments", raidq.WithDeliveryTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer payments.Close()
		sctx, scancel := context.WithTimeout(ctx, refusalBound)
		defer scancel()
		_, err = payments.Send(sctx, raidq.Message{Value: []byte("forged")})
		checkRefusal(t, "Send", err, "user shop", `"raidq.sec.slot.`, ".payments.", "producer: [...]")
		// The same connection still writes the topic the user may write,
		// while the refused one is refused again.
		refused := payments.SendAsync(ctx, raidq.Message{Value: []byte("forged again")})
		if _, err := orders.Send(sctx, raidq.Message{Value: []byte("order")}); err != nil {
			t.Fatalf("producer of orders after the refusal of payments: %v", err)
		}
		_, err = refused.Wait(sctx)
		checkRefusal(t, "second Send", err, "user shop")
	})

	t.Run("group reset without the admin role", func(t *testing.T) {
		rctx, rcancel := context.WithTimeout(ctx, refusalBound)
		defer rcancel()
		_, err := shop.ResetGroup(rctx, "billing", raidq.GroupReset{Topic: "orders", To: raidq.ResetEarliest(), Execute: true})
		checkRefusal(t, "ResetGroup", err, "user shop", `"$KV.raidq_sec_groups.g.billing.orders.`, "roles: [admin]")
	})

	t.Run("topic create without the admin role", func(t *testing.T) {
		cctx, ccancel := context.WithTimeout(ctx, refusalBound)
		defer ccancel()
		_, err := shop.CreateTopic(cctx, raidq.TopicConfig{Name: "rogue", Partitions: 1, Params: raidq.DefaultParams()})
		checkRefusal(t, "CreateTopic", err, "user shop", `"$KV.raidq_sec_meta.topic.rogue"`, "roles: [admin]")
	})
}
