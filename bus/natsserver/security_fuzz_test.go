package natsserver

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/raidq/raidq/bus"
)

// validSubject reports whether s is a valid NATS subject or wildcard
// subject: non-empty tokens, '*' and '>' only as whole tokens, '>' last.
func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return false
		case t == ">" && i != len(toks)-1:
			return false
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return false
		}
	}
	return true
}

func FuzzParseAuthConfig(f *testing.F) {
	f.Add([]byte(`users: [{user: ops, password: x, roles: [admin]}, {user: shop, password: y, producer: [orders, "*"]}]`))
	f.Add([]byte(`{"users": [{"nkey": "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", "consumer": ["a"], "groups": ["g"]}], "routes": {"user": "r", "password": "p"}}`))
	f.Add([]byte(`users = [ {user: n, password: "$2a$11$abc", roles: node} ]`))
	f.Add([]byte(`users: [{user: a, password: b, roles: [nope]}]`))
	f.Add([]byte(`include "x.conf"`))
	f.Add([]byte(`users: [ {user: a password: b consumer: [t] } ] routes { user: r, password: s }`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseAuthConfig(b)
		if err != nil {
			if !errors.Is(err, ErrBadAuthConfig) {
				t.Fatalf("error does not wrap ErrBadAuthConfig: %v", err)
			}
			return
		}
		if len(a.Users) == 0 || len(a.Users) > MaxAuthUsers {
			t.Fatalf("%d users accepted", len(a.Users))
		}
		seen := map[string]bool{}
		for _, u := range a.Users {
			if err := u.Validate(); err != nil {
				t.Fatalf("accepted user fails Validate: %v", err)
			}
			if seen[u.Identity()] {
				t.Fatalf("duplicate user %q accepted", u.Identity())
			}
			seen[u.Identity()] = true
			p, err := u.Permissions("c")
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range append(append([]string{}, p.Publish.Allow...), p.Subscribe.Allow...) {
				if !validSubject(s) {
					t.Fatalf("user %q: permission subject %q is not a valid subject", u.Identity(), s)
				}
			}
			if !u.Has(RoleNode) {
				for _, s := range p.Subscribe.Allow {
					if strings.HasPrefix(s, "_INBOX") && s != bus.InboxPrefix(u.Identity())+".>" {
						t.Fatalf("user %q may subscribe to another inbox: %q", u.Identity(), s)
					}
				}
			}
		}
		if _, _, err := a.ServerUsers("c"); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzDecodeInDoubt(f *testing.F) {
	f.Add(bus.InDoubtReport{Topic: "orders", Partition: 3, Offset: 1 << 60, Seq: 9, To: "n1"}.Marshal())
	f.Add(bus.InDoubtReport{Topic: "t"}.Marshal())
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := bus.DecodeInDoubt(b)
		if err != nil {
			if !errors.Is(err, bus.ErrBadMessage) {
				t.Fatalf("error does not wrap ErrBadMessage: %v", err)
			}
			return
		}
		if bus.ValidName("topic", r.Topic) != nil || (r.To != "" && bus.ValidName("node", r.To) != nil) {
			t.Fatalf("accepted bad names %q %q", r.Topic, r.To)
		}
		again, err := bus.DecodeInDoubt(r.Marshal())
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("re-decode: %v %#v %#v", err, again, r)
		}
	})
}

func FuzzParseRequestSubject(f *testing.F) {
	s := MustSubjects("prod")
	f.Add(s.Slot("n1", "orders", 7))
	f.Add(s.Scan("n1", "orders", 4294967295))
	f.Add("raidq.prod.scan.n1.t.01")
	f.Add("raidq.prod.slot..t.1")
	f.Fuzz(func(t *testing.T, subject string) {
		scan, node, topic, p, err := s.ParseRequest(subject)
		if err != nil {
			if !errors.Is(err, bus.ErrBadSubject) {
				t.Fatalf("error does not wrap ErrBadSubject: %v", err)
			}
			return
		}
		want := s.Slot(node, topic, p)
		if scan {
			want = s.Scan(node, topic, p)
		}
		if want != subject {
			t.Fatalf("%q parsed to (%v %q %q %d), which builds %q", subject, scan, node, topic, p, want)
		}
	})
}

func FuzzParseServerInfo(f *testing.F) {
	f.Add([]byte("INFO {\"server_name\":\"n1\",\"tls_required\":true,\"auth_required\":true,\"max_payload\":1048576}\r\n"))
	f.Add([]byte("INFO {}"))
	f.Add([]byte("-ERR 'x'\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = bus.ParseServerInfo(b)
	})
}
