package kafka

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
)

// openMeta is a real groups bucket on an embedded JetStream server.
func openMeta(t *testing.T) *meta.Store {
	t.Helper()
	srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true, JetStream: true, StoreDir: t.TempDir(),
		MaxMemory: 16 << 20, MaxStore: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect("coordinator-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := meta.Open(ctx, nc, "t1", meta.Options{Create: true, Logger: testkit.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func kvRig(t *testing.T, kv CoordinatorKV) *rig {
	t.Helper()
	r := &rig{t: t, clock: testkit.NewClock(int64(time.Hour)), ours: &ours{}}
	c, err := NewCoordinator(CoordinatorConfig{KV: kv, IsCoordinator: r.ours.is, Logger: testkit.Logger(t, slog.LevelWarn),
		Clock: r.clock.Now, Limits: testLimits(), manualTick: true})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	t.Cleanup(func() { _ = c.Close() })
	return r
}

// TestCoordinatorJetStream: the coordinator on a real groups bucket: a
// group (whose name needs the encoded key) with a member and a commit,
// written, taken over by a second coordinator in one rebalance, deleted;
// a native group's name refused.
func TestCoordinatorJetStream(t *testing.T) {
	leakCheck(t)
	store := openMeta(t)
	ctx := context.Background()
	r1 := kvRig(t, store)
	a, gen := r1.stable("orders.app")
	if c := r1.commit("orders.app", a, gen, "orders", 0, 99); c != 0 {
		t.Fatalf("commit: %d", c)
	}
	if err := r1.c.Close(); err != nil {
		t.Fatal(err)
	}
	rec, rev, err := store.KafkaGroup(ctx, "orders.app")
	if err != nil || rev == 0 || rec.Offsets["orders"][0].Offset != 99 || rec.State != "Stable" {
		t.Fatalf("record %+v rev %d: %v", rec, rev, err)
	}
	r2 := kvRig(t, store)
	if c := r2.heartbeat("orders.app", a, gen); c != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat after the takeover: %d", c)
	}
	if off, c := r2.fetch("orders.app", "orders", 0); off != 99 || c != 0 {
		t.Fatalf("fetch after the takeover: %d %d", off, c)
	}
	j := r2.c.JoinGroup(ctx, joinReq(5, "orders.app", a))
	if j.ErrorCode != 0 || j.Generation != gen+1 {
		t.Fatalf("rejoin: %+v", j)
	}
	lv := kmsg.NewPtrLeaveGroupRequest()
	lv.Version, lv.Group, lv.MemberID = 2, "orders.app", a
	if c := r2.c.LeaveGroup(ctx, lv).ErrorCode; c != 0 {
		t.Fatalf("leave: %d", c)
	}
	testkit.WaitFor(t, "the empty group's record", func() bool {
		r2.advance(100 * time.Millisecond)
		rec, _, err := store.KafkaGroup(ctx, "orders.app")
		return err == nil && rec.State == "Empty" && rec.Generation == gen+2
	})
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"orders.app"}
	if c := r2.c.DeleteGroups(ctx, del).Groups[0].ErrorCode; c != 0 {
		t.Fatalf("delete: %d", c)
	}
	if _, rev, err := store.KafkaGroup(ctx, "orders.app"); rev != 0 || err != nil {
		t.Fatalf("deleted record: rev %d %v", rev, err)
	}
	if _, _, err := store.ClaimPosition(ctx, "native", "orders", 0, "m1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if j := r2.c.JoinGroup(ctx, joinReq(9, "native", "")); j.ErrorCode != kerr.InvalidGroupID.Code {
		t.Fatalf("join under a native group's name: %+v", j)
	}
}

// countingKV counts the writes that reach the KV.
type countingKV struct {
	CoordinatorKV
	mu   sync.Mutex
	puts int
}

func (k *countingKV) PutKafkaGroup(ctx context.Context, g *meta.KafkaGroup, rev uint64) (uint64, error) {
	k.mu.Lock()
	k.puts++
	k.mu.Unlock()
	return k.CoordinatorKV.PutKafkaGroup(ctx, g, rev)
}

func (k *countingKV) writes() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.puts
}

// TestCoordinatorCommitLatency logs what an OffsetCommit costs on a real
// groups bucket (acknowledged once written), one at a time and from
// several members at once, and checks that concurrent commits of a group
// share writes.
func TestCoordinatorCommitLatency(t *testing.T) {
	leakCheck(t)
	kv := &countingKV{CoordinatorKV: openMeta(t)}
	r := kvRig(t, kv)
	a, gen := r.stable("lat")
	const n = 200
	lat := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		if c := r.commit("lat", a, gen, "orders", 0, int64(i+1)); c != 0 {
			t.Fatalf("commit %d: %d", i, c)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("%d sequential commits: p50 %v p99 %v max %v", n, lat[n/2], lat[n*99/100], lat[n-1])
	const workers, each = 8, 25
	before := kv.writes()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all []time.Duration
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				start := time.Now()
				if c := r.commit("lat", a, gen, "orders", int32(w+1), int64(i+1)); c != 0 {
					t.Errorf("commit: %d", c)
					return
				}
				d := time.Since(start)
				mu.Lock()
				all = append(all, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(all)
	puts := kv.writes() - before
	t.Logf("%d commits from %d members at once: p50 %v p99 %v, %d KV writes", len(all), workers, all[len(all)/2], all[len(all)*99/100], puts)
	if off, c := r.fetch("lat", "orders", workers); off != each || c != 0 {
		t.Fatalf("fetch: %d %d", off, c)
	}
}
