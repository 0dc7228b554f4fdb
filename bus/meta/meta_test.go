package meta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openTest(t *testing.T) *Store {
	t.Helper()
	srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true, JetStream: true, StoreDir: t.TempDir(),
		MaxMemory: 16 << 20, MaxStore: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect("meta-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Open(ctx, nc, "t1", Options{}); !errors.Is(err, ErrNoMetadata) {
		t.Fatalf("binding before any node created the buckets: want ErrNoMetadata, got %v", err)
	}
	s, err := Open(ctx, nc, "t1", Options{Create: true, Logger: testkit.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func addMembers(t *testing.T, s *Store, n int, now time.Time) {
	for i := 0; i < n; i++ {
		if err := s.PutMember(context.Background(), Member{ID: fmt.Sprintf("n%d", i), Heartbeat: now.UnixNano()}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTopicsAndCatalog(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	now := time.Now()
	addMembers(t, s, 5, now)
	spec := TopicSpec{Name: "orders", Partitions: 3, Params: quorum.Default()}
	if _, err := s.CreateTopic(ctx, spec, now); err == nil {
		t.Fatal("created a 6-node topic with 5 members")
	}
	addMembers(t, s, 8, now)
	cat, err := s.WatchCatalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	r, err := s.CreateTopic(ctx, spec, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTopic(ctx, spec, now); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("second create: %v", err)
	}
	bad := spec
	bad.Name, bad.Params.W = "bad", 3
	if _, err := s.CreateTopic(ctx, bad, now); !errors.Is(err, quorum.ErrInvalidParams) {
		t.Fatalf("W=3 accepted: %v", err)
	}
	bad = spec
	bad.Name, bad.Params.Grid = "bad", 1000
	if _, err := s.CreateTopic(ctx, bad, now); !errors.Is(err, quorum.ErrInvalidParams) {
		t.Fatalf("grid 1000 accepted: %v", err)
	}
	plain := spec
	plain.Name, plain.Params.Grid = "plain", 0
	if r, err := s.CreateTopic(ctx, plain, now); err != nil || r.Grid != 0 {
		t.Fatalf("topic without grid: grid %d, %v", r.Grid, err)
	}
	if err := s.DeleteTopic(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Topic(ctx, "orders")
	if err != nil || got.Partitions != 3 || len(got.Ensembles[0]) != 6 || got.Params() != quorum.Default() || got.Grid != quorum.DefaultGrid {
		t.Fatalf("describe: %+v %v", got, err)
	}
	if r.Created != got.Created {
		t.Fatal("created time not kept")
	}
	testkit.WaitFor(t, "the catalog to show the topic", func() bool { _, err := cat.Topic("orders"); return err == nil })
	if err := s.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the catalog to drop the deleted topic", func() bool { _, err := cat.Topic("orders"); return errors.Is(err, ErrUnknownTopic) })
	if _, err := s.Topic(ctx, "orders"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("deleted topic still there: %v", err)
	}
	ts, err := s.Topics(ctx)
	if err != nil || len(ts) != 0 {
		t.Fatalf("topics after delete: %v %v", ts, err)
	}
}

func TestPositionsFenceStaleMember(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	now := time.Now()
	_, revA, err := s.ClaimPosition(ctx, "g", "orders", 0, "a", now)
	if err != nil {
		t.Fatal(err)
	}
	revA, err = s.CommitPosition(ctx, "g", "orders", 0, GroupPosition{Offset: 100, Member: "a"}, revA)
	if err != nil {
		t.Fatal(err)
	}
	// b takes over partition 0 (a is presumed dead after a rebalance).
	pos, revB, err := s.ClaimPosition(ctx, "g", "orders", 0, "b", now)
	if err != nil || pos.Offset != 100 {
		t.Fatalf("claim: %+v %v", pos, err)
	}
	if _, err := s.CommitPosition(ctx, "g", "orders", 0, GroupPosition{Offset: 200, Member: "a"}, revA); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale member committed: %v", err)
	}
	if _, err := s.CommitPosition(ctx, "g", "orders", 0, GroupPosition{Offset: 150, Member: "b"}, revB); err != nil {
		t.Fatal(err)
	}
	if err := s.GroupHeartbeat(ctx, "g", "orders", "a", now, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.GroupHeartbeat(ctx, "g", "orders", "b", now.Add(-time.Minute), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	beats, err := s.GroupBeats(ctx, "g", "orders")
	if err != nil || len(beats) != 2 || beats["a"].Session != GroupTTL || beats["b"].Session != 3*time.Second {
		t.Fatalf("beats: %+v %v", beats, err)
	}
	// Reads of the groups bucket go to the stream leader (bindGroups),
	// also after another node opened it again.
	s2, err := Open(ctx, s.js.Conn(), "t1", Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s2.js.Stream(ctx, "KV_"+groupsBucket("t1")); err != nil || st.CachedInfo().Config.AllowDirect {
		t.Fatalf("groups bucket allows direct gets (stale replica reads): %v", err)
	}
	revA1 := beats["a"].Revision
	if err := s.GroupHeartbeat(ctx, "g", "orders", "a", now, 0); err != nil {
		t.Fatal(err)
	}
	if beats, _ = s.GroupBeats(ctx, "g", "orders"); beats["a"].Revision <= revA1 {
		t.Fatalf("a heartbeat must advance the revision: %d then %d", revA1, beats["a"].Revision)
	}
	if err := s.LeaveGroup(ctx, "g", "orders", "b"); err != nil {
		t.Fatal(err)
	}
	if beats, _ = s.GroupBeats(ctx, "g", "orders"); len(beats) != 1 {
		t.Fatalf("b left but is listed: %+v", beats)
	}
	ps, err := s.GroupPositions(ctx, "g", "orders")
	if err != nil || len(ps) != 1 || ps[0].Pos.Offset != 150 || ps[0].Pos.Member != "b" {
		t.Fatalf("positions %+v %v", ps, err)
	}
}

func TestLease(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	now := time.Now()
	l, rev, ok, err := s.AcquireLease(ctx, "fanout.orders.0", "n1", time.Second, now)
	if err != nil || !ok || l.Holder != "n1" {
		t.Fatalf("acquire: %+v %v %v", l, ok, err)
	}
	if _, _, ok, _ := s.AcquireLease(ctx, "fanout.orders.0", "n2", time.Second, now); ok {
		t.Fatal("n2 took a live lease")
	}
	rev, err = s.RenewLease(ctx, "fanout.orders.0", "n1", time.Second, now, rev, []byte("pos"))
	if err != nil {
		t.Fatal(err)
	}
	l2, _, ok, err := s.AcquireLease(ctx, "fanout.orders.0", "n2", time.Second, now.Add(2*time.Second))
	if err != nil || !ok || string(l2.Data) != "pos" {
		t.Fatalf("expired lease not taken over with its data: %+v %v %v", l2, ok, err)
	}
	if _, err := s.RenewLease(ctx, "fanout.orders.0", "n1", time.Second, now, rev, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("old holder renewed: %v", err)
	}
}

func TestDecodeRejectsBadRecords(t *testing.T) {
	for _, b := range []string{``, `{`, `{"name":"a b","partitions":1}`, `{"name":"x","partitions":1,"n":6,"k":4,"w":3}`,
		`{"name":"x","partitions":1,"n":6,"k":4,"w":4,"read_delay":"1s","accept_window":"250ms","future_bound":"250ms","max_skew":"250ms","ensembles":[["a","a","b","c","d","e"]]}`} {
		if _, err := DecodeTopic([]byte(b)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v", b, err)
		}
	}
}

func FuzzDecodeTopic(f *testing.F) {
	f.Add([]byte(`{"name":"x","partitions":1,"n":6,"k":4,"w":4,"read_delay":"1s","accept_window":"250ms","future_bound":"250ms","max_skew":"250ms","ensembles":[["a","b","c","d","e","f"]]}`))
	f.Add(gridRecord(`,"grid":1024`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeTopic(b)
		if err == nil {
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
