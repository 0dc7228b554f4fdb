package meta

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq/bus"
)

// kvKey is nats.go's rule for KV keys.
var kvKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func TestKafkaGroupKeys(t *testing.T) {
	for _, name := range []string{"orders-app", "a_B-9", "orders.app", "a b", "grüße", "=x", strings.Repeat("x", MaxKafkaGroupName),
		strings.Repeat("é", MaxKafkaGroupName/2)} {
		key, err := KafkaGroupKey(name)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if !kvKey.MatchString(key) || strings.Count(key, ".") != 1 {
			t.Fatalf("%q: key %q is not one KV token under kgroup.", name, key)
		}
		if raw := rawKafkaName(name); raw != (key == "kgroup."+name) {
			t.Fatalf("%q: key %q (raw %v)", name, key, raw)
		}
		back, err := KafkaGroupName(key)
		if err != nil || back != name {
			t.Fatalf("%q: key %q decodes to %q, %v", name, key, back, err)
		}
	}
	for _, name := range []string{"", strings.Repeat("x", MaxKafkaGroupName+1), "\xff"} {
		if _, err := KafkaGroupKey(name); !errors.Is(err, bus.ErrBadName) {
			t.Fatalf("%q: %v", name, err)
		}
	}
	for _, key := range []string{"kgroup.=b3JkZXJz" /* "orders": raw form exists */, "kgroup.=!!", "g.x", "kgroup."} {
		if _, err := KafkaGroupName(key); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("key %q: %v", key, err)
		}
	}
}

func goodKafkaGroup() KafkaGroup {
	return KafkaGroup{Name: "app", Generation: 3, State: "Stable", ProtocolType: "consumer", Protocol: "range", Leader: "m1",
		Members: []KafkaMember{
			{ID: "m1", InstanceID: "i1", ClientID: "c", ClientHost: "/10.0.0.1", Session: Duration(45 * time.Second),
				Rebalance: Duration(time.Minute), Metadata: []byte{0, 1}, Assignment: []byte{2}},
			{ID: "m2", Session: Duration(45 * time.Second), Rebalance: Duration(time.Minute)},
		},
		Offsets: map[string]map[int32]KafkaOffset{"orders": {0: {Offset: 17, Metadata: "x", Committed: 5}, 3: {Offset: -1}}}}
}

func TestKafkaGroupValidate(t *testing.T) {
	good := goodKafkaGroup()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(g *KafkaGroup){
		"name":            func(g *KafkaGroup) { g.Name = "" },
		"generation":      func(g *KafkaGroup) { g.Generation = -1 },
		"state":           func(g *KafkaGroup) { g.State = "Dead" },
		"empty, members":  func(g *KafkaGroup) { g.State = "Empty" },
		"leader":          func(g *KafkaGroup) { g.Leader = "m9" },
		"protocol":        func(g *KafkaGroup) { g.Protocol = strings.Repeat("p", MaxKafkaString+1) },
		"repeated member": func(g *KafkaGroup) { g.Members[1].ID = "m1" },
		"empty member":    func(g *KafkaGroup) { g.Members[1].ID = "" },
		"instance":        func(g *KafkaGroup) { g.Members[1].InstanceID = "i1" },
		"client id":       func(g *KafkaGroup) { g.Members[0].ClientID = "\xff" },
		"session":         func(g *KafkaGroup) { g.Members[0].Session = 0 },
		"rebalance":       func(g *KafkaGroup) { g.Members[0].Rebalance = Duration(2 * MaxKafkaTimeout) },
		"assignment":      func(g *KafkaGroup) { g.Members[0].Assignment = make([]byte, MaxKafkaMemberData+1) },
		"too many":        func(g *KafkaGroup) { g.Members = make([]KafkaMember, MaxKafkaMembers+1) },
		"topic":           func(g *KafkaGroup) { g.Offsets["a b"] = map[int32]KafkaOffset{0: {}} },
		"partition":       func(g *KafkaGroup) { g.Offsets["orders"][-1] = KafkaOffset{} },
		"offset":          func(g *KafkaGroup) { g.Offsets["orders"][1] = KafkaOffset{Offset: -2} },
		"metadata": func(g *KafkaGroup) {
			g.Offsets["orders"][1] = KafkaOffset{Metadata: strings.Repeat("m", MaxKafkaOffsetMetadata+1)}
		},
	}
	for what, spoil := range bad {
		g := goodKafkaGroup()
		spoil(&g)
		if err := g.Validate(); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v", what, err)
		}
	}
	huge := goodKafkaGroup()
	for i := range 70 {
		huge.Offsets["t"+strings.Repeat("x", i)] = map[int32]KafkaOffset{0: {Metadata: strings.Repeat("m", MaxKafkaOffsetMetadata)}}
	}
	if _, err := EncodeKafkaGroup(&huge); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("a record over MaxRecord: %v", err)
	}
}

// TestKafkaGroupBudgets: a record whose members and offsets stay within
// the budgets, by the costs the coordinator counts, fits MaxRecord.
func TestKafkaGroupBudgets(t *testing.T) {
	g := KafkaGroup{Name: "app", State: "Stable", Offsets: map[string]map[int32]KafkaOffset{}}
	cost := 0
	for p := int32(0); cost+KafkaOffsetCost("\x01") <= KafkaOffsetsBudget; p++ {
		topic := strings.Repeat("t", 249)
		if g.Offsets[topic] == nil {
			g.Offsets[topic] = map[int32]KafkaOffset{}
			cost += KafkaTopicCost(topic)
		}
		g.Offsets[topic][p+1_000_000_000] = KafkaOffset{Offset: 1 << 62, Metadata: "\x01", Committed: 1 << 62}
		cost += KafkaOffsetCost("\x01")
	}
	// Members at the core's estimate: 256 + 6 per string byte + base64.
	data := (KafkaMembersBudget/4 - 256 - 6*8) * 3 / 4
	for i := range 4 {
		g.Members = append(g.Members, KafkaMember{ID: "member-" + string(rune('a'+i)), Session: Duration(time.Hour),
			Rebalance: Duration(time.Hour), Metadata: make([]byte, data/2), Assignment: make([]byte, data/2)})
	}
	b, err := EncodeKafkaGroup(&g)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes with %d committed partitions", len(b), len(g.Offsets[strings.Repeat("t", 249)]))
}

func TestKafkaGroupStore(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	g := goodKafkaGroup()
	g.Name = "orders.app" // stored under its encoded key
	if _, rev, err := s.KafkaGroup(ctx, g.Name); err != nil || rev != 0 {
		t.Fatalf("absent group: %d %v", rev, err)
	}
	rev, err := s.PutKafkaGroup(ctx, &g, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutKafkaGroup(ctx, &g, 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("second create: %v", err)
	}
	g.Generation++
	rev2, err := s.PutKafkaGroup(ctx, &g, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutKafkaGroup(ctx, &g, rev); !errors.Is(err, ErrFenced) {
		t.Fatalf("write at a stale revision: %v", err)
	}
	got, grev, err := s.KafkaGroup(ctx, g.Name)
	if err != nil || grev != rev2 || got.Generation != 4 || got.Offsets["orders"][0].Offset != 17 || string(got.Members[0].Metadata) != "\x00\x01" {
		t.Fatalf("read back %+v rev %d (want %d) %v", got, grev, rev2, err)
	}
	other := KafkaGroup{Name: "billing", State: "Empty"}
	if _, err := s.PutKafkaGroup(ctx, &other, 0); err != nil {
		t.Fatal(err)
	}
	list, err := s.KafkaGroups(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "billing" || list[1].Name != "orders.app" {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := s.DeleteKafkaGroup(ctx, g.Name, rev); !errors.Is(err, ErrFenced) {
		t.Fatalf("delete at a stale revision: %v", err)
	}
	if err := s.DeleteKafkaGroup(ctx, g.Name, rev2); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.KafkaGroupExists(ctx, g.Name); ok || err != nil {
		t.Fatalf("deleted group exists: %v %v", ok, err)
	}
	if _, err := s.PutKafkaGroup(ctx, &g, 0); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
	if ok, err := s.KafkaGroupExists(ctx, "billing"); !ok || err != nil {
		t.Fatalf("billing: %v %v", ok, err)
	}
}

func TestGroupNameSeparation(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for _, name := range []string{"orders", "or", "a.b"} {
		if ok, err := s.NativeGroupExists(ctx, name); ok || err != nil {
			t.Fatalf("%s before any record: %v %v", name, ok, err)
		}
	}
	if _, _, err := s.ClaimPosition(ctx, "orders", "topic1", 0, "m1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.NativeGroupExists(ctx, "orders"); !ok || err != nil {
		t.Fatalf("native group with a position: %v %v", ok, err)
	}
	if ok, err := s.NativeGroupExists(ctx, "or"); ok || err != nil {
		t.Fatalf("a prefix of a native group's name: %v %v", ok, err)
	}
	if err := s.GroupHeartbeat(ctx, "beats", "topic1", "m1", time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.NativeGroupExists(ctx, "beats"); !ok || err != nil {
		t.Fatalf("native group with a heartbeat: %v %v", ok, err)
	}
	if ok, err := s.KafkaGroupExists(ctx, "orders"); ok || err != nil {
		t.Fatalf("kafka group: %v %v", ok, err)
	}
}

// FuzzDecodeKafkaGroup: a Kafka group record decodes within the size
// limit and validated, or fails with ErrBadRecord; what decodes encodes.
func FuzzDecodeKafkaGroup(f *testing.F) {
	g := goodKafkaGroup()
	b, err := EncodeKafkaGroup(&g)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"name":"=x","generation":0,"state":"Empty","offsets":{"a.b":{"0":{"offset":-1,"committed":1}}}}`))
	f.Add([]byte(`{"name":"g","state":"Stable","members":[{"id":"m","session":"10s","rebalance":"1m","metadata":"AAE="}]}`))
	f.Add([]byte(`{"name":"g","state":"Stable","members":[{"id":"m","session":"-1s"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := DecodeKafkaGroup(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error does not wrap ErrBadRecord: %v", err)
			}
			return
		}
		if len(b) > MaxRecord {
			t.Fatalf("a record of %d bytes was accepted", len(b))
		}
		if _, err := EncodeKafkaGroup(&g); err != nil && !errors.Is(err, ErrBadRecord) {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
	})
}
