package server_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestClockFault: a node started with a clock fault takes offsets on its
// fault subject, and everything of it reads the offset clock: its status
// clock and its member record's heartbeat move with the offset, its clock
// watch finds it off its peers' (status "clock off", ahead and then
// behind) and back once the offset is 0. A node without the fault does not
// answer on the subject; bad requests are refused and change nothing.
func TestClockFault(t *testing.T) {
	if testing.Short() {
		t.Skip("clustered JetStream takes a few seconds to elect")
	}
	log := testkit.Logger(t, slog.LevelError)
	nodes := startMesh(t, log, "cf", 3, server.NodeOptions{})
	faulty := startFaultyNode(t, log, nodes[0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitMembers(ctx, t, append(nodes, faulty), "s0", "s1", "s2", "s9")
	p := quorum.Default()
	p.N, p.K, p.W = 4, 2, 3 // every node in the ensemble: s9's peers are the other three
	if _, err := nodes[1].Meta().CreateTopic(ctx, meta.TopicSpec{Name: "orders", Partitions: 1, Params: p}, time.Now()); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(nodes[1].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// Only the node with the fault answers.
	if _, err := server.SetClockFault(ctx, nc, "cf", "s1", time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a node without --clock-fault: %v, want no responders", err)
	}
	// Bad requests are refused, nothing changes.
	if _, err := server.SetClockFault(ctx, nc, "cf", "s9", 2*time.Hour); !errors.Is(err, server.ErrClockFault) || !strings.Contains(err.Error(), "beyond") {
		t.Fatalf("2h offset: %v", err)
	}
	m, err := nc.RequestWithContext(ctx, "raidq.cf.fault.clock.s9", []byte("garbage"))
	if err != nil || !strings.Contains(string(m.Data), `"error"`) {
		t.Fatalf("garbage: %v %s", err, m.Data)
	}
	if faulty.ClockOffset() != 0 {
		t.Fatalf("offset %v after refused requests", faulty.ClockOffset())
	}

	status := func() bus.NodeStatus {
		sts, err := actors.StatusWith(ctx, nc, "cf", actors.StatusOptions{Expect: []string{"s9"}, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.Node == "s9" {
				return st
			}
		}
		return bus.NodeStatus{}
	}
	for _, step := range []struct {
		off    time.Duration
		health string
		text   string
	}{{5 * time.Second, bus.HealthClockOff, "ahead of"}, {-5 * time.Second, bus.HealthClockOff, "behind"}, {0, "", ""}} {
		before := time.Now().UnixNano()
		rep, err := server.SetClockFault(ctx, nc, "cf", "s9", step.off)
		after := time.Now().UnixNano()
		if err != nil || rep.OffsetNS != int64(step.off) || rep.Clock < before+int64(step.off) || rep.Clock > after+int64(step.off) {
			t.Fatalf("offset %v: %+v %v (real clock %d..%d)", step.off, rep, err, before, after)
		}
		if faulty.ClockOffset() != step.off {
			t.Fatalf("ClockOffset %v, want %v", faulty.ClockOffset(), step.off)
		}
		var st bus.NodeStatus
		testkit.WaitFor(t, "s9's status to show "+step.health+" "+step.text, func() bool {
			st = status()
			if step.off == 0 { // back: no clock note (a loaded machine may make the reply slow)
				return st.ClockOff == "" && st.Health != bus.HealthNoAnswer
			}
			return st.Health == step.health && strings.Contains(st.ClockOff, step.text)
		})
		// The status clock is the real clock plus the offset.
		before = time.Now().UnixNano()
		st = status()
		after = time.Now().UnixNano()
		if st.Clock < before+int64(step.off) || st.Clock > after+int64(step.off) {
			t.Errorf("offset %v: status clock %d, real clock %d..%d", step.off, st.Clock, before, after)
		}
		t.Logf("offset %v: %s %s", step.off, st.Health, st.ClockOff)
	}
	// The member record's heartbeat is written with the node's clock.
	if _, err := server.SetClockFault(ctx, nc, "cf", "s9", time.Hour); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "s9's heartbeat an hour ahead", func() bool {
		ms, err := nodes[1].Meta().Members(ctx)
		if err != nil {
			return false
		}
		for _, m := range ms {
			if m.ID == "s9" {
				return m.Heartbeat > time.Now().Add(50*time.Minute).UnixNano()
			}
		}
		return false
	})
}

// startFaultyNode starts s9 with a clock fault, joined to the mesh of
// peer's NATS system.
func startFaultyNode(t *testing.T, log *slog.Logger, peer *server.Node) *server.Node {
	t.Helper()
	n, err := server.StartNode(server.NodeOptions{ID: "s9", DataDir: t.TempDir(), Cluster: "cf", NATSURL: peer.ClientURL(),
		Insecure: true, NoSync: true, MetaTimeout: 30 * time.Second, Logger: log, ClockFault: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	return n
}
