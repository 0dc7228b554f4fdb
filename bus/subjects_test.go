package bus

import (
	"errors"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	good := []string{"a", "A-z_09", strings.Repeat("x", MaxNameLen), "orders", "node-1"}
	for _, s := range good {
		if err := ValidName("topic", s); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", s, err)
		}
	}
	bad := []struct{ s, want string }{
		{"", "empty"},
		{strings.Repeat("x", MaxNameLen+1), "129 bytes"},
		{"a.b", `'.'`},
		{"a*", `'*'`},
		{"a>", `'>'`},
		{"a b", `' '`},
		{"é", "byte 0"},
		{"a\x00", "byte 1"},
	}
	for _, c := range bad {
		err := ValidName("node", c.s)
		if !errors.Is(err, ErrBadName) {
			t.Errorf("ValidName(%q) = %v, want ErrBadName", c.s, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "node name") || !strings.Contains(msg, c.want) || !strings.Contains(msg, "[A-Za-z0-9_-]") {
			t.Errorf("ValidName(%q) error %q: want the kind, %q and the rule", c.s, msg, c.want)
		}
	}
}

func TestSubjects(t *testing.T) {
	if _, err := NewSubjects("a.b"); !errors.Is(err, ErrBadName) {
		t.Fatalf("NewSubjects(a.b) = %v, want ErrBadName", err)
	}
	s, err := NewSubjects("prod")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ got, want string }{
		{s.Cluster(), "prod"},
		{s.Slot("n1", "orders", 7), "raidq.prod.slot.n1.orders.7"},
		{s.Slot("n1", "orders", 4294967295), "raidq.prod.slot.n1.orders.4294967295"},
		{s.SlotAll("n1"), "raidq.prod.slot.n1.>"},
		{s.Deliver("orders", 0), "raidq.prod.deliver.orders.0"},
		{s.DeliverAll("orders"), "raidq.prod.deliver.orders.*"},
		{s.Heartbeat("n2"), "raidq.prod.hb.n2"},
		{s.HeartbeatAll(), "raidq.prod.hb.*"},
		{s.Status("n3"), "raidq.prod.status.n3"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	long := strings.Repeat("n", MaxNameLen)
	for _, c := range []struct {
		node, topic string
		p           uint32
	}{{"n1", "orders", 7}, {long, long, 4294967295}, {"x", "y", 0}} {
		node, topic, p, err := s.ParseSlot(s.Slot(c.node, c.topic, c.p))
		if err != nil || node != c.node || topic != c.topic || p != c.p {
			t.Errorf("ParseSlot(Slot(%q,%q,%d)) = %q,%q,%d,%v", c.node, c.topic, c.p, node, topic, p, err)
		}
	}
}

func TestParseSlotRejects(t *testing.T) {
	s, _ := NewSubjects("prod")
	for _, subj := range []string{
		"", "raidq.prod.slot", "raidq.prod.slot.", "raidq.other.slot.n1.t.1",
		"raidq.prod.deliver.t.1", "raidq.prod.slot.n1.t", "raidq.prod.slot.n1.t.1.2",
		"raidq.prod.slot..t.1", "raidq.prod.slot.n1..1", "raidq.prod.slot.n1.t.",
		"raidq.prod.slot.n1.t.01", "raidq.prod.slot.n1.t.+1", "raidq.prod.slot.n1.t.-1",
		"raidq.prod.slot.n1.t.4294967296", "raidq.prod.slot.n1.t.1x", "raidq.prod.slot.n*.t.1",
		"raidq.prod.slot.n1.>", "raidq.prod.slot.n1.t.*",
	} {
		if _, _, _, err := s.ParseSlot(subj); !errors.Is(err, ErrBadSubject) {
			t.Errorf("ParseSlot(%q) = %v, want ErrBadSubject", subj, err)
		}
	}
	var zero Subjects
	if _, _, _, err := zero.ParseSlot("raidq.prod.slot.n1.t.1"); !errors.Is(err, ErrBadSubject) {
		t.Errorf("zero Subjects ParseSlot = %v, want ErrBadSubject", err)
	}
}
