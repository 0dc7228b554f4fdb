package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestGroupAdminCLI runs every `raidq group` subcommand against an
// in-process dev cluster (what `raidq dev` runs): list and describe show a
// native group with a live member and a Kafka clients' group; reset and
// delete refuse while the member is live, a reset is a dry run until
// --execute, and a Kafka group is left to Kafka tools.
func TestGroupAdminCLI(t *testing.T) {
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), Logger: testkit.Logger(t, slog.LevelWarn),
		Cluster: "cli", Listen: "127.0.0.1:-1", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if err := lc.CreateTopic("orders", 2, quorum.Default()); err != nil {
		t.Fatal(err)
	}
	c, err := lc.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kafkaGroup(ctx, t, lc.Meta())
	cli := func(wantCode int, args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(append(args, "--nats", lc.ClientURL(), "--cluster", "cli", "--timeout", "20s")...)
		if code != wantCode {
			t.Fatalf("raidq %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, wantCode, out, errOut)
		}
		return out + errOut
	}

	cons, err := c.Consumer("orders", raidq.WithGroup("billing"), raidq.WithAutoCommit(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	waitOwned(ctx, t, cons, 2)
	readSome(ctx, t, c, cons, 10)
	var groups []groupJSON
	decodeJSON(t, cli(0, "group", "list", "--json"), &groups)
	if len(groups) != 2 || groups[0].Name != "billing" || groups[0].Type != "native" || groups[0].LiveMembers != 1 ||
		groups[1].Name != "kbill" || groups[1].Type != "kafka" || groups[1].LiveMembers != 1 || groups[1].Topics[0] != "orders" {
		t.Fatalf("group list: %+v", groups)
	}
	if out := cli(4, "group", "reset", "billing", "--topic", "orders", "--to", "earliest", "--execute"); !strings.Contains(out, "live members") {
		t.Fatalf("reset with a live member: %s", out)
	}
	cli(4, "group", "delete", "billing")
	if out := cli(0, "group", "describe", "billing"); !strings.Contains(out, "1 live members") || !strings.Contains(out, cons.Member()) {
		t.Fatalf("describe with a live member:\n%s", out)
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	checkResetCLI(t, cli, lc.Meta())
	checkKafkaCLI(t, cli)
	if out := cli(0, "group", "delete", "billing", "--watch", "0"); !strings.Contains(out, "deleted group billing (2 records)") {
		t.Fatalf("delete: %s", out)
	}
	cli(4, "group", "describe", "billing", "--watch", "0")
	cli(2, "group", "reset", "billing", "--topic", "orders", "--to", "tomorrow")
}

// checkResetCLI: a dry run prints the new positions and writes nothing;
// --execute writes them.
func checkResetCLI(t *testing.T, cli func(int, ...string) string, store *meta.Store) {
	t.Helper()
	var d describeOut
	decodeJSON(t, cli(0, "group", "describe", "billing", "--json", "--watch", "0"), &d)
	if len(d.Partitions) != 2 || d.Partitions[0].Position == nil || d.Partitions[0].LagSeconds == nil || d.Partitions[0].LagRecords != 0 {
		t.Fatalf("describe after the member left: %+v", d)
	}
	was := *d.Partitions[0].Position
	out := cli(0, "group", "reset", "billing", "--topic", "orders", "--to", "-1h", "--partition", "0", "--watch", "0")
	if !strings.Contains(out, "dry run: nothing written") {
		t.Fatalf("dry run:\n%s", out)
	}
	if pos, _, _ := store.Position(context.Background(), "billing", "orders", 0); pos.Offset != was.Offset {
		t.Fatalf("the dry run moved partition 0 to %d", pos.Offset)
	}
	var r resetOut
	decodeJSON(t, cli(0, "group", "reset", "billing", "--topic", "orders", "--to", "-1h", "--partition", "0", "--execute", "--json", "--watch", "0"), &r)
	if len(r.Partitions) != 1 || !r.Partitions[0].Written || r.Partitions[0].New == nil || r.Partitions[0].New.Offset >= was.Offset {
		t.Fatalf("reset --execute: %+v", r)
	}
	if pos, _, _ := store.Position(context.Background(), "billing", "orders", 0); pos.Offset != r.Partitions[0].New.Offset || pos.Member != "" {
		t.Fatalf("after the reset partition 0 is at %+v, want %d released", pos, r.Partitions[0].New.Offset)
	}
}

// checkKafkaCLI: a Kafka clients' group is described from its record
// (owner from the assignment, Kafka offset) and not reset here.
func checkKafkaCLI(t *testing.T, cli func(int, ...string) string) {
	t.Helper()
	var d describeOut
	decodeJSON(t, cli(0, "group", "describe", "kbill", "--json", "--watch", "0"), &d)
	p := d.Partitions[1]
	if d.Type != "kafka" || d.State != "Stable" || len(d.Members) != 1 || p.Owner != "kmember-1" || p.Position == nil ||
		p.KafkaOffset != int64(p.Position.Offset)+int64(p.Position.Index) || d.Partitions[0].Position != nil {
		t.Fatalf("describe kbill: %+v", d)
	}
	if out := cli(0, "group", "describe", "kbill", "--watch", "0"); !strings.Contains(out, "kmember-1") || !strings.Contains(out, "kafka") {
		t.Fatalf("describe kbill:\n%s", out)
	}
	if out := cli(4, "group", "reset", "kbill", "--topic", "orders", "--to", "latest", "--watch", "0"); !strings.Contains(out, "Kafka") {
		t.Fatalf("reset of a Kafka group: %s", out)
	}
}

// kafkaGroup writes a Kafka clients' group record as a gateway's
// coordinator would: one member assigned partition 1 of orders, which
// has a committed offset (a full kgo group is in actors/kafka's tests).
func kafkaGroup(ctx context.Context, t *testing.T, store *meta.Store) {
	t.Helper()
	tp, err := store.Topic(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	a := kmsg.NewConsumerMemberAssignment()
	at := kmsg.NewConsumerMemberAssignmentTopic()
	at.Topic, at.Partitions = "orders", []int32{1}
	a.Topics = append(a.Topics, at)
	g := meta.KafkaGroup{Name: "kbill", Generation: 1, State: "Stable", ProtocolType: "consumer", Protocol: "range",
		Leader: "kmember-1", Updated: time.Now().UnixNano(),
		Members: []meta.KafkaMember{{ID: "kmember-1", ClientID: "kgo", ClientHost: "/127.0.0.1", Session: meta.Duration(10 * time.Second),
			Rebalance: meta.Duration(time.Minute), Assignment: a.AppendTo(nil)}},
		Offsets: map[string]map[int32]meta.KafkaOffset{"orders": {1: {Offset: int64(tp.Created) + 5*1024 + 3}}}}
	if _, err := store.PutKafkaGroup(ctx, &g, 0); err != nil {
		t.Fatal(err)
	}
}

func waitOwned(ctx context.Context, t *testing.T, cons *raidq.Consumer, n int) {
	t.Helper()
	for len(cons.Partitions()) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("the member owns %v", cons.Partitions())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func decodeJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v:\n%s", err, s)
	}
}

// readSome produces n records and has cons take them (so that its group
// commits positions after them when it closes).
func readSome(ctx context.Context, t *testing.T, c *raidq.Client, cons *raidq.Consumer, n int) {
	t.Helper()
	p, err := c.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < n; i++ {
		if _, err := p.Send(ctx, raidq.Message{Key: []byte{byte(i)}, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if _, err := cons.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
