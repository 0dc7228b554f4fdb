package raidq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

func groupCluster(t *testing.T, partitions int) (*server.LocalCluster, *slog.Logger) {
	t.Helper()
	log := testkit.Logger(t, slog.LevelWarn)
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), Logger: log, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	if err := lc.CreateTopic("orders", partitions, quorum.Default()); err != nil {
		t.Fatal(err)
	}
	return lc, log
}

func connect(t *testing.T, lc *server.LocalCluster) *raidq.Client {
	t.Helper()
	c, err := lc.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// owns reports whether the members' partitions are disjoint and cover 0..n-1.
func owns(n int, cs ...*raidq.Consumer) bool {
	seen := make(map[int]bool)
	for _, c := range cs {
		for _, p := range c.Partitions() {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return len(seen) == n
}

// member consumes on its own goroutine, committing every message.
type member struct {
	name    string
	cons    *raidq.Consumer
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	got     []raidq.Message
	fenced  int
	lastErr error
}

// testSession is the group members' session timeout in these tests (the
// default, meta.GroupTTL, would make a crash takeover take 15 s).
const testSession = 4 * time.Second

// startMember starts a group member that commits every commitEvery-th
// message (0: none; with AutoCommit the consumer commits).
func startMember(t *testing.T, c *raidq.Client, name string, commitEvery int, opts ...raidq.ConsumerOption) *member {
	t.Helper()
	// The test session comes first: opts may override it.
	opts = append([]raidq.ConsumerOption{raidq.WithSessionTimeout(testSession), raidq.WithGroup("g"), raidq.WithMember(name)}, opts...)
	cons, err := c.Consumer("orders", opts...)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{name: name, cons: cons, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			case msg, ok := <-cons.Messages():
				if !ok {
					return
				}
				m.mu.Lock()
				m.got = append(m.got, msg)
				m.mu.Unlock()
				if commitEvery == 0 || len(m.got)%commitEvery != 0 {
					continue
				}
				err := cons.Commit(context.Background(), msg)
				m.mu.Lock()
				switch {
				case errors.Is(err, raidq.ErrFenced):
					m.fenced++ // rebalanced away: the new owner redelivers
				case err != nil:
					m.lastErr = err
				}
				m.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { m.halt(); cons.Close() })
	return m
}

func (m *member) halt() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

func (m *member) messages() []raidq.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]raidq.Message(nil), m.got...)
}

// produce sends n records valued prefix-i, a few at a time, and returns the
// acknowledged values.
func produce(t *testing.T, c *raidq.Client, prefix string, n, burst int, pause time.Duration) map[string]bool {
	t.Helper()
	// A delivery timeout rides out a starved machine (the race detector,
	// parallel packages): these tests are about the consumers.
	p, err := c.Producer("orders", raidq.WithDeliveryTimeout(time.Minute))
	if err != nil {
		t.Error(err)
		return nil
	}
	defer func() { _ = p.Close() }()
	acked := make(map[string]bool)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		v := fmt.Sprintf("%s-%d", prefix, i)
		wg.Add(1)
		p.Produce(context.Background(), raidq.Message{Key: []byte(v), Value: []byte(v)}, func(_ raidq.Message, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("send %s: %v", v, err)
				return
			}
			mu.Lock()
			acked[v] = true
			mu.Unlock()
		})
		if (i+1)%burst == 0 {
			time.Sleep(pause)
		}
	}
	wg.Wait()
	return acked
}

func TestGroupCrashTakeoverAndFencing(t *testing.T) {
	const parts = 8
	lc, _ := groupCluster(t, parts)
	ms := []*member{
		startMember(t, connect(t, lc), "a", 1),
		startMember(t, connect(t, lc), "b", 1),
		// c commits every 7th message: its successors redeliver the rest.
		startMember(t, connect(t, lc), "c", 7),
	}
	a, b, c := ms[0], ms[1], ms[2]
	took := testkit.WaitFor(t, "three members sharing the partitions", func() bool {
		return owns(parts, a.cons, b.cons, c.cons) && len(a.cons.Partitions()) > 0 && len(b.cons.Partitions()) > 0 && len(c.cons.Partitions()) > 0
	})
	t.Logf("assignment settled in %v: a=%v b=%v c=%v", took.Round(time.Millisecond), a.cons.Partitions(), b.cons.Partitions(), c.cons.Partitions())
	want := raidq.AssignForTest("g", "orders", parts, []string{"a", "b", "c"}, "c")
	if got := c.cons.Partitions(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("c owns %v, rendezvous says %v", got, want)
	}

	prod := connect(t, lc)
	ackedCh := make(chan map[string]bool, 1)
	go func() { ackedCh <- produce(t, prod, "m", 2400, 40, 50*time.Millisecond) }()

	// Crash c mid-way: it stops reading, committing and heartbeating.
	testkit.WaitFor(t, "c consuming", func() bool { return len(c.messages()) >= 100 })
	c.halt()
	cParts := c.cons.Partitions()
	c.cons.CrashForTest()
	crashed := time.Now()
	cGot := c.messages()
	last := cGot[len(cGot)-1]

	took = testkit.WaitFor(t, "a and b taking over c's partitions", func() bool {
		return owns(parts, a.cons, b.cons)
	})
	t.Logf("c's partitions %v taken over %v after the crash (session %v)", cParts, time.Since(crashed).Round(time.Millisecond), testSession)
	if took > testSession+2*raidq.GroupInterval+time.Second {
		t.Errorf("takeover took %v", took)
	}

	acked := <-ackedCh
	if len(acked) != 2400 {
		t.Fatalf("%d of 2400 sends acknowledged", len(acked))
	}
	delivered := func() map[string]int {
		got := make(map[string]int)
		for _, m := range ms {
			for _, msg := range m.messages() {
				got[string(msg.Value)]++
			}
		}
		return got
	}
	testkit.WaitFor(t, "every acknowledged record delivered", func() bool {
		got := delivered()
		for v := range acked {
			if got[v] == 0 {
				return false
			}
		}
		return true
	})
	dups := 0
	for _, n := range delivered() {
		dups += n - 1
	}
	t.Logf("delivered a=%d b=%d c=%d (before its crash), %d redelivered after the rebalances", len(a.messages()), len(b.messages()), len(cGot), dups)

	// Per member and partition, positions never go backwards within a
	// claim, and a message's key matches its value.
	for _, m := range ms {
		for _, msg := range m.messages() {
			if string(msg.Key) != string(msg.Value) || msg.Topic != "orders" || msg.Partition < 0 || msg.Partition >= parts {
				t.Fatalf("%s: bad message %+v", m.name, msg)
			}
		}
		m.mu.Lock()
		if m.lastErr != nil {
			t.Errorf("%s: commit: %v", m.name, m.lastErr)
		}
		m.mu.Unlock()
	}

	// The crashed member wakes up as a zombie and commits the next record
	// of its partition (it had committed last already): fenced.
	next := last
	next.Position.Index++
	err := c.cons.Commit(context.Background(), next)
	if !errors.Is(err, raidq.ErrFenced) || !errors.Is(err, meta.ErrFenced) {
		t.Fatalf("stale member's commit of partition %d: %v, want ErrFenced", last.Partition, err)
	}
	t.Logf("zombie commit: %v", err)
	if ps := c.cons.Partitions(); len(ps) != len(cParts)-1 {
		t.Errorf("fenced partition not dropped: zombie still claims %v of %v", ps, cParts)
	}

	// A graceful Close leaves the group: a takes b's partitions within an
	// interval or two, without waiting for the heartbeat to expire.
	b.halt()
	closed := time.Now()
	b.cons.Close()
	took = testkit.WaitFor(t, "a owning every partition after b left", func() bool { return owns(parts, a.cons) })
	t.Logf("b left; a owns everything %v later", time.Since(closed).Round(time.Millisecond))
	if limit := 3*raidq.GroupInterval + 2*time.Second; took > limit {
		t.Errorf("a took %v to own b's partitions after b left, want within %v (a Close must not wait for the session to expire)", took.Round(time.Millisecond), limit)
	}
	// And the positions b committed hold: a resumes after them.
	more := produce(t, prod, "late", 200, 50, 20*time.Millisecond)
	testkit.WaitFor(t, "a receiving the late records", func() bool {
		got := make(map[string]bool)
		for _, msg := range a.messages() {
			got[string(msg.Value)] = true
		}
		for v := range more {
			if !got[v] {
				return false
			}
		}
		return true
	})
}

func TestGroupAutoCommitResumes(t *testing.T) {
	const parts = 4
	lc, _ := groupCluster(t, parts)
	c := connect(t, lc)
	m1 := startMember(t, c, "one", 0, raidq.WithAutoCommit(100*time.Millisecond))
	testkit.WaitFor(t, "one owning every partition", func() bool { return owns(parts, m1.cons) })
	first := produce(t, c, "first", 300, 100, 10*time.Millisecond)
	testkit.WaitFor(t, "first batch consumed", func() bool { return len(m1.messages()) >= len(first) })
	m1.halt()
	m1.cons.Close() // commits everything taken and leaves

	second := produce(t, c, "second", 200, 100, 10*time.Millisecond)
	m2 := startMember(t, c, "two", 0, raidq.WithAutoCommit(100*time.Millisecond))
	testkit.WaitFor(t, "second batch consumed by the next member", func() bool { return len(m2.messages()) >= len(second) })
	time.Sleep(300 * time.Millisecond)
	var vals []string
	for _, msg := range m2.messages() {
		vals = append(vals, string(msg.Value))
		if !second[string(msg.Value)] {
			t.Errorf("the next member got %s, committed by the first", msg.Value)
		}
	}
	if len(vals) != len(second) {
		sort.Strings(vals)
		t.Errorf("next member got %d messages, want %d", len(vals), len(second))
	}
}

func TestGroupAssignmentSpreadsAndMovesLittle(t *testing.T) {
	members := []string{"a", "b", "c", "d"}
	owner := make(map[int]string)
	for _, m := range members {
		for _, p := range raidq.AssignForTest("g", "t", 64, members, m) {
			if o, ok := owner[p]; ok {
				t.Fatalf("partition %d owned by %s and %s", p, o, m)
			}
			owner[p] = m
		}
	}
	if len(owner) != 64 {
		t.Fatalf("%d of 64 partitions assigned", len(owner))
	}
	count := make(map[string]int)
	for _, m := range owner {
		count[m]++
	}
	for _, m := range members {
		if count[m] < 6 {
			t.Errorf("member %s owns only %d of 64: %v", m, count[m], count)
		}
	}
	// d leaves: only d's partitions move.
	for _, m := range members[:3] {
		for _, p := range raidq.AssignForTest("g", "t", 64, members[:3], m) {
			if owner[p] != "d" && owner[p] != m {
				t.Errorf("partition %d moved from %s to %s when d left", p, owner[p], m)
			}
		}
	}
}

func TestGroupOptionErrors(t *testing.T) {
	lc, _ := groupCluster(t, 2)
	c := connect(t, lc)
	if _, err := c.Consumer("orders", raidq.WithGroup("g"), raidq.WithPartitions([]int{0}...)); err == nil {
		t.Error("group with explicit partitions accepted")
	}
	if _, err := c.Consumer("orders", raidq.WithGroup("bad group")); err == nil {
		t.Error("bad group name accepted")
	}
	plain, err := c.Consumer("orders")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Commit(context.Background(), raidq.Message{Topic: "orders"}); err == nil {
		t.Error("commit without a group accepted")
	}
}

// TestGroupRefusesKafkaGroupName: a name a Kafka group holds (the Kafka
// gateway's record) cannot be a native group's.
func TestGroupRefusesKafkaGroupName(t *testing.T) {
	lc, _ := groupCluster(t, 1)
	c := connect(t, lc)
	kg := meta.KafkaGroup{Name: "kafka-app", State: "Empty"}
	if _, err := lc.Meta().PutKafkaGroup(context.Background(), &kg, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Consumer("orders", raidq.WithGroup("kafka-app")); !errors.Is(err, raidq.ErrKafkaGroup) {
		t.Fatalf("joining a Kafka group's name: %v", err)
	}
	cons, err := c.Consumer("orders", raidq.WithGroup("native-app"))
	if err != nil {
		t.Fatal(err)
	}
	_ = cons.Close()
}

// TestGroupStartTogetherNoDuplicates: two members that start together
// share the partitions with revoke before assign, so without any fault no
// record is delivered twice and none is missed. They read the way the CLI
// does: Next in a loop, AutoCommit.
func TestGroupStartTogetherNoDuplicates(t *testing.T) {
	const parts = 4
	lc, _ := groupCluster(t, parts)
	prod := connect(t, lc)
	ackedCh := make(chan map[string]bool, 1)
	go func() { ackedCh <- produce(t, prod, "s", 1500, 50, 20*time.Millisecond) }()
	var mu sync.Mutex
	got := make(map[string]int)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	var conss []*raidq.Consumer
	for _, name := range []string{"a", "b"} {
		cons, err := connect(t, lc).Consumer("orders", raidq.WithGroup("g"), raidq.WithMember(name), raidq.WithAutoCommit(200*time.Millisecond), raidq.WithSessionTimeout(testSession))
		if err != nil {
			t.Fatal(err)
		}
		conss = append(conss, cons)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := cons.Next(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				got[string(m.Value)]++
				mu.Unlock()
			}
		}()
	}
	acked := <-ackedCh
	testkit.WaitFor(t, "every acknowledged record delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for v := range acked {
			if got[v] == 0 {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	for _, cons := range conss {
		if err := cons.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	dups := 0
	for v, n := range got {
		if n > 1 {
			dups++
			if dups < 5 {
				t.Errorf("%s delivered %d times", v, n)
			}
		}
	}
	if dups > 0 {
		t.Errorf("%d records delivered more than once without a fault", dups)
	}
}

// TestConsumerEndsWhenTopicDeleted: a deleted topic is the one fault a
// consumer does not ride through: Next returns an error wrapping
// ErrUnknownTopic, for a plain consumer and a group member alike.
func TestConsumerEndsWhenTopicDeleted(t *testing.T) {
	lc, _ := groupCluster(t, 2)
	c := connect(t, lc)
	plain, err := c.Consumer("orders")
	if err != nil {
		t.Fatal(err)
	}
	member, err := c.Consumer("orders", raidq.WithGroup("g"), raidq.WithSessionTimeout(testSession))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	for name, cons := range map[string]*raidq.Consumer{"plain": plain, "group member": member} {
		if _, err := cons.Next(ctx); !errors.Is(err, raidq.ErrUnknownTopic) {
			t.Errorf("%s: Next after the topic was deleted: %v, want ErrUnknownTopic", name, err)
		}
		if err := cons.Close(); !errors.Is(err, raidq.ErrUnknownTopic) {
			t.Errorf("%s: Close: %v, want the fatal error", name, err)
		}
	}
}
