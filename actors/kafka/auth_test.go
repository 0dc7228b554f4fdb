package kafka

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/raidq/raidq/bus/natsserver"
)

const testNKey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"

// testUsers is one user per role (bcrypt at the minimum cost, for speed),
// with the number of bcrypt comparisons made so far.
func testUsers(t *testing.T) (*users, *atomic.Int64) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("opspw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a, err := natsserver.ParseAuthConfig(fmt.Appendf(nil, `users: [
  {user: ops, password: %q, roles: [admin]}
  {user: shop, password: shoppw, producer: [orders, payments]}
  {user: reader, password: readerpw, consumer: [orders], groups: [billing]}
  {user: anyg, password: anygpw, consumer: [orders]}
  {user: all, password: allpw, producer: ["*"], consumer: ["*"], groups: ["*"]}
  {user: node1, password: nodepw, roles: [node, admin]}
  {user: gw1, password: gwpw, roles: [gateway]}
  {nkey: %s, consumer: [orders]}
]`, hash, testNKey))
	if err != nil {
		t.Fatal(err)
	}
	az, err := NewUsers(a)
	if err != nil {
		t.Fatal(err)
	}
	u := az.(*users)
	var n atomic.Int64
	u.compare = func(h, p []byte) error {
		n.Add(1)
		return bcrypt.CompareHashAndPassword(h, p)
	}
	return u, &n
}

func TestUsersAuthenticate(t *testing.T) {
	u, compares := testUsers(t)
	if m := u.Mechanisms(); len(m) != 1 || m[0] != "PLAIN" {
		t.Fatalf("mechanisms %q", m)
	}
	for _, c := range []struct {
		user, password, why string // why: "" accepted, else the log's reason
	}{
		{"ops", "opspw", ""},
		{"ops", "wrong", `user "ops": wrong password`},
		{"shop", "shoppw", ""},
		{"shop", "shoppw2", `user "shop": wrong password`},
		{"shop", "", `user "shop": wrong password`},
		{"nobody", "shoppw", `unknown user "nobody"`},
		{"", "", `unknown user ""`},
		{"node1", "nodepw", "has the node role"},
		{"gw1", "gwpw", "has the gateway role"},
		{testNKey, "", "is an NKey user"},
	} {
		before := compares.Load()
		err := u.Authenticate(c.user, c.password)
		if got := compares.Load() - before; got != 1 {
			t.Errorf("%s: %d bcrypt comparisons, want 1 on every path (no user enumeration by timing)", c.user, got)
		}
		switch {
		case c.why == "" && err != nil:
			t.Errorf("%s/%s refused: %v", c.user, c.password, err)
		case c.why != "" && (!errors.Is(err, ErrAuthFailed) || !strings.Contains(err.Error(), c.why)):
			t.Errorf("%s/%s: %v, want ErrAuthFailed saying %q", c.user, c.password, err, c.why)
		}
	}
}

func TestUsersAllowed(t *testing.T) {
	u, _ := testUsers(t)
	type check struct {
		op    Op
		topic string
		want  bool
	}
	for user, checks := range map[string][]check{
		"ops": {{OpAdmin, "orders", true}, {OpAdmin, "", true}, {OpDescribe, "anything", true}, {OpDescribe, "", true},
			{OpProduce, "orders", false}, {OpConsume, "orders", false}},
		"shop": {{OpProduce, "orders", true}, {OpProduce, "payments", true}, {OpDescribe, "orders", true}, {OpDescribe, "", true},
			{OpProduce, "other", false}, {OpConsume, "orders", false}, {OpDescribe, "other", false}, {OpAdmin, "orders", false},
			{OpAdmin, "", false}, {OpProduce, "", false}},
		"reader": {{OpConsume, "orders", true}, {OpDescribe, "orders", true},
			{OpProduce, "orders", false}, {OpConsume, "payments", false}, {OpAdmin, "orders", false}, {OpConsume, "", false}},
		"all": {{OpProduce, "x", true}, {OpConsume, "y", true}, {OpDescribe, "z", true}, {OpAdmin, "x", false}},
		// Machines, NKey users and unknown users get nothing.
		"node1":  {{OpDescribe, "", false}, {OpAdmin, "orders", false}, {OpProduce, "orders", false}},
		"gw1":    {{OpDescribe, "", false}, {OpProduce, "orders", false}, {OpConsume, "orders", false}},
		testNKey: {{OpConsume, "orders", false}, {OpDescribe, "", false}},
		"nobody": {{OpDescribe, "", false}, {OpProduce, "orders", false}},
		"*":      {{OpDescribe, "", false}},
	} {
		for _, c := range checks {
			if got := u.Allowed(user, c.op, c.topic); got != c.want {
				t.Errorf("Allowed(%s, %d, %q) = %v", user, c.op, c.topic, got)
			}
		}
	}
}

func TestUsersGroupAllowed(t *testing.T) {
	u, _ := testUsers(t)
	for _, c := range []struct {
		user, group string
		want        bool
	}{
		{"ops", "billing", true}, {"ops", "anything", true},
		{"reader", "billing", true}, {"reader", "shipping", false},
		{"anyg", "shipping", true}, // no groups: list: any group
		{"all", "shipping", true},
		{"shop", "billing", false}, // a producer has no groups
		{"node1", "billing", false}, {"gw1", "billing", false}, {testNKey, "billing", false}, {"nobody", "billing", false},
		{"reader", "", false},
	} {
		if got := u.GroupAllowed(c.user, c.group); got != c.want {
			t.Errorf("GroupAllowed(%s, %q) = %v", c.user, c.group, got)
		}
	}
}

func TestNewUsersErrors(t *testing.T) {
	for _, c := range []struct {
		a    *natsserver.AuthConfig
		want string
	}{
		{nil, "no auth file users"},
		{&natsserver.AuthConfig{}, "no auth file users"},
		{&natsserver.AuthConfig{Users: []natsserver.AuthUser{{User: "a", Password: "$2a$10$short", Roles: []string{"admin"}}}},
			"looks like a bcrypt hash"},
		{&natsserver.AuthConfig{Users: []natsserver.AuthUser{{User: "a", Password: "p", Roles: []string{"root"}}}}, `unknown role "root"`},
		{&natsserver.AuthConfig{Users: []natsserver.AuthUser{{User: "a", Password: "p", Producer: []string{"x"}},
			{User: "a", Password: "q", Consumer: []string{"x"}}}}, "listed twice"},
	} {
		if _, err := NewUsers(c.a); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrConfig saying %q", c.a, err, c.want)
		}
	}
}

// TestUsersConcurrent: the Authorizer is used by every connection at once
// (run with -race).
func TestUsersConcurrent(t *testing.T) {
	u, _ := testUsers(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user, pw := "shop", "shoppw"
			if i%2 == 1 {
				user, pw = "ops", "opspw"
			}
			if err := u.Authenticate(user, pw); err != nil {
				errs <- err
			}
			if u.Allowed(user, OpProduce, "orders") != (user == "shop") || !u.Allowed(user, OpDescribe, "orders") {
				errs <- fmt.Errorf("%s: inconsistent Allowed", user)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
