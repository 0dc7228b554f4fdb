package raidq

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestSubjectMatch: the refusals of an operation are those its patterns
// cover, NATS wildcards included, and a refused subscription's wildcard
// only by a wildcard.
func TestSubjectMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"raidq.c.slot.*.orders.*", "raidq.c.slot.n1.orders.0", true},
		{"raidq.c.slot.*.orders.*", "raidq.c.slot.n1.orders2.0", false},
		{"raidq.c.slot.*.orders.*", "raidq.c.slot.n1.orders", false},
		{"raidq.c.slot.*.orders.*", "raidq.c.slot.n1.orders.0.x", false},
		{"raidq.c.deliver.orders.>", "raidq.c.deliver.orders.*", true},
		{"raidq.c.deliver.orders.>", "raidq.c.deliver.orders", false},
		{"$KV.raidq_c_groups.g.billing.orders.>", "$KV.raidq_c_groups.g.billing.orders.m.m1", true},
		{"$KV.raidq_c_groups.g.billing.orders.>", "$KV.raidq_c_groups.g.other.orders.m.m1", false},
		{"$KV.raidq_c_meta.topic.x", "$KV.raidq_c_meta.topic.x", true},
		{"$KV.raidq_c_meta.topic.x", "$KV.raidq_c_meta.topic.xy", false},
	} {
		if got := subjectMatch(c.pattern, c.subject); got != c.want {
			t.Errorf("subjectMatch(%q, %q) = %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
}

// TestDescribeRefusal: the server's refusals, as nats.go reports them,
// become PermissionErrors that say what the subject is for and which
// entry of the auth file grants it; other errors are not refusals.
func TestDescribeRefusal(t *testing.T) {
	violation := func(text string) error {
		return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, text)
	}
	for _, c := range []struct {
		text, op, subject string
		want              []string
	}{
		{`Permissions Violation for Publish to "raidq.c.slot.n1.orders.0"`, "publish", "raidq.c.slot.n1.orders.0",
			[]string{"write topic orders", "producer: [...]"}},
		{`Permissions Violation for Publish to "raidq.c.scan.n1.orders.3"`, "publish", "raidq.c.scan.n1.orders.3",
			[]string{"read topic orders", "consumer: [...]"}},
		{`Permissions Violation for Subscription to "raidq.c.deliver.orders.*" using queue "q"`, "subscribe", "raidq.c.deliver.orders.*",
			[]string{"read topic orders", "consumer: [...]"}},
		{`Permissions Violation for Publish to "$KV.raidq_c_groups.g.billing.orders.m.m1"`, "publish", "$KV.raidq_c_groups.g.billing.orders.m.m1",
			[]string{"consumer group billing of topic orders", "groups:"}},
		{`Permissions Violation for Publish to "$KV.raidq_c_meta.topic.x"`, "publish", "$KV.raidq_c_meta.topic.x",
			[]string{"topic x", "roles: [admin]"}},
		{`Permissions Violation for Publish to "raidq.c.status.n1"`, "publish", "raidq.c.status.n1", []string{"status", "roles: [admin]"}},
		{`Permissions Violation for Subscription to "_INBOX.>"`, "subscribe", "_INBOX.>", []string{"_INBOX_<"}},
		{`Permissions Violation for Publish with Reply of "_INBOX.x"`, "receive replies", "_INBOX.x", []string{"--inbox-prefix"}},
		{`Permissions Violation for Publish to "foo.bar"`, "publish", "foo.bar", []string{"not permitted"}},
	} {
		pe, ok := DescribeRefusal("c", nil, violation(c.text))
		if !ok {
			t.Errorf("%s: not taken for a refusal", c.text)
			continue
		}
		if pe.Op != c.op || pe.Subject != c.subject {
			t.Errorf("%s: op %q subject %q, want %q %q", c.text, pe.Op, pe.Subject, c.op, c.subject)
		}
		if !errors.Is(pe, ErrPermissionDenied) || !errors.Is(pe, nats.ErrPermissionViolation) {
			t.Errorf("%s: %v matches not both sentinels", c.text, pe)
		}
		for _, w := range c.want {
			if !strings.Contains(pe.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.text, pe, w)
			}
		}
	}
	for _, err := range []error{nats.ErrTimeout, errors.New(`Permissions Violation for Publish to "x"`), nats.ErrPermissionViolation} {
		if _, ok := DescribeRefusal("c", nil, err); ok {
			t.Errorf("%v taken for a refusal", err)
		}
	}
}
