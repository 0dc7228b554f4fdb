package raidq

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// Refusals (docs/security.md, "Refusals"). A NATS server refuses a
// publish or a subscription the user may not make without failing the
// call: it sends the connection an asynchronous -ERR, which nats.go hands
// to the connection's error handler as nats.ErrPermissionViolation, and
// the request behind it times out. The client's refusalHub listens on each
// of its connections and hands every refusal to the operations that need
// the refused subject (a topic's producers, a topic's consumers, a topic
// create), which end with a *PermissionError at once instead of retrying
// into timeouts. Operations on other subjects never see it: a producer
// refused on one topic keeps writing another over the same connection.

// PermissionError is the cluster's refusal of one subject to one user.
// It matches ErrPermissionDenied and nats.ErrPermissionViolation with
// errors.Is.
type PermissionError struct {
	User    string // the NATS user: its name, public NKey or credentials' name
	Op      string // "publish", "subscribe" or "receive replies"
	Subject string // the refused subject
	What    string // what the subject is for, e.g. "write topic orders"
	Hint    string // what the auth file lacks
	Err     error  // the server's refusal, as nats.go reported it
}

func (e *PermissionError) Error() string {
	what := e.What
	if what == "" {
		what = e.Op + " to " + e.Subject
	}
	return fmt.Sprintf("permission denied: user %s may not %s (%s to %q refused by the cluster): %s (docs/security.md)",
		e.User, what, e.Op, e.Subject, e.Hint)
}

// Is matches ErrPermissionDenied and nats.ErrPermissionViolation (the
// CLI's exit code 4 and every NATS-aware caller know the latter).
func (e *PermissionError) Is(target error) bool {
	return target == ErrPermissionDenied || target == nats.ErrPermissionViolation
}

// Unwrap is the server's refusal (nats.ErrPermissionViolation).
func (e *PermissionError) Unwrap() error { return e.Err }

// refusalRe finds the operation and subject in the server's -ERR:
// `Permissions Violation for Publish to "S"`, `... for Subscription to
// "S"` (maybe followed by ` using queue "Q"`), `... for Publish with Reply
// of "S"`.
var refusalRe = regexp.MustCompile(`(?i)for (Publish|Subscription) (to|with Reply of) "([^"]+)"`)

// parseRefusal is the operation and subject of a permission violation
// reported to an error handler.
func parseRefusal(err error) (op, subject string, ok bool) {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return "", "", false
	}
	m := refusalRe.FindStringSubmatch(err.Error())
	if m == nil {
		return "", "", false
	}
	op = "publish"
	switch {
	case strings.EqualFold(m[1], "subscription"):
		op = "subscribe"
	case strings.EqualFold(m[2], "with reply of"):
		op = "receive replies"
	}
	return op, m[3], true
}

// DescribeRefusal explains a permission violation that an error handler
// of a connection to the cluster received (nats.ErrPermissionViolation):
// the user (from nc's options), the subject, what it is for and what the
// auth file lacks (cluster "": raidq subjects of any cluster, but not its
// metadata buckets). ok is false for any other error.
func DescribeRefusal(cluster string, nc *nats.Conn, err error) (pe *PermissionError, ok bool) {
	op, subject, ok := parseRefusal(err)
	if !ok {
		return nil, false
	}
	pe = &PermissionError{User: connUser(nc), Op: op, Subject: subject, Err: err}
	pe.What, pe.Hint = explainSubject(cluster, op, subject)
	return pe, true
}

// explainSubject says what a refused subject of cluster is for, and which
// role or list of the auth file (docs/security.md) grants it.
func explainSubject(cluster, op, subject string) (what, hint string) {
	tok := strings.Split(subject, ".")
	rq := len(tok) >= 3 && tok[0] == "raidq" && (tok[1] == cluster || cluster == "")
	kvMeta, kvGroups := "$KV.raidq_"+cluster+"_meta.", "$KV.raidq_"+cluster+"_groups."
	switch {
	case rq && tok[2] == "slot" && len(tok) == 6:
		return "write topic " + tok[4], fmt.Sprintf("the auth file must list %s in the user's producer: [...]", tok[4])
	case rq && tok[2] == "scan" && len(tok) == 6:
		return "read topic " + tok[4], fmt.Sprintf("the auth file must list %s in the user's consumer: [...]", tok[4])
	case rq && (tok[2] == "deliver" || tok[2] == "indoubt") && len(tok) >= 4:
		return "read topic " + tok[3], fmt.Sprintf("the auth file must list %s in the user's consumer: [...]", tok[3])
	case rq && tok[2] == "status":
		return "ask the nodes' status", "that needs roles: [admin] in the auth file"
	case strings.HasPrefix(subject, "$SRV."):
		return "discover the nodes ($SRV)", "that needs roles: [admin] in the auth file"
	case strings.HasPrefix(subject, kvMeta+"topic."):
		t := strings.TrimPrefix(subject, kvMeta+"topic.")
		return "create, alter or delete topic " + t, "that needs roles: [admin] in the auth file"
	case strings.HasPrefix(subject, kvGroups+"g."):
		g := strings.Split(strings.TrimPrefix(subject, kvGroups+"g."), ".")
		if len(g) >= 2 {
			return fmt.Sprintf("join or commit in consumer group %s of topic %s", g[0], g[1]),
				fmt.Sprintf("the auth file must list %s in the user's consumer: [...] and, if the user has a groups: list, %s in it "+
					"(or give the user roles: [admin], to reset or delete the group)", g[1], g[0])
		}
	case strings.HasPrefix(subject, kvMeta+"member.") || strings.HasPrefix(subject, kvGroups+"lease."):
		return "write node records", "only nodes (roles: [node]) may"
	case strings.HasPrefix(subject, "_INBOX"):
		return "receive replies on " + subject, "a user receives replies only on _INBOX_<its user name or NKey>: " +
			"check --inbox-prefix (raidq.WithInboxPrefix)"
	}
	return op + " to " + subject, "not permitted for this user"
}

// connUser names the user nc authenticates as: the user name, the public
// NKey, the name in the credentials' JWT, or "(anonymous)".
func connUser(nc *nats.Conn) string {
	if nc == nil {
		return "(unknown)"
	}
	switch o := &nc.Opts; { // fields set at connect, never written after
	case o.User != "":
		return o.User
	case o.Nkey != "":
		return o.Nkey
	case o.UserJWT != nil:
		if jwt, err := o.UserJWT(); err == nil {
			if name := jwtName(jwt); name != "" {
				return name
			}
		}
		return "(credentials file)"
	case o.Token != "" || o.TokenHandler != nil:
		return "(token)"
	}
	if u, err := url.Parse(nc.ConnectedUrl()); err == nil && u.User != nil && u.User.Username() != "" {
		return u.User.Username()
	}
	return "(anonymous)"
}

// jwtName is the name (else the subject) of a user JWT, unverified: it
// only names the user in messages.
func jwtName(jwt string) string {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		Name string `json:"name"`
		Sub  string `json:"sub"`
	}
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	if c.Name != "" {
		return c.Name
	}
	return c.Sub
}

// refusalHub dispatches the refusals of a client's connections to the
// operations that watch the refused subjects.
type refusalHub struct {
	cluster string
	// other receives the refusals no watch claims (WithRefusalHandler).
	other func(*PermissionError)

	mu      sync.Mutex
	seq     uint64
	watches map[uint64]*refusalWatch
	// ended are the patterns of ended watches that claimed a refusal: the
	// refusals of their requests still in flight are theirs too, not
	// other's (at most maxEnded, the latest).
	ended [][]string
	conns []*nats.Conn // the connections it listens on (install)
}

const maxEnded = 64

type refusalWatch struct {
	patterns []string
	on       func(*PermissionError)
	hit      bool
}

func newRefusalHub(cluster string, other func(*PermissionError)) *refusalHub {
	return &refusalHub{cluster: cluster, other: other, watches: make(map[uint64]*refusalWatch)}
}

// WithRefusalHandler receives every refusal of the client's connections
// (a permission violation, as a *PermissionError) that ends none of its
// operations: those return it as their error. f runs on a connection's
// callback goroutine and must not block.
func WithRefusalHandler(f func(*PermissionError)) Option {
	return func(o *options) { o.refusals = f }
}

func matchAny(patterns []string, subject string) bool {
	for _, p := range patterns {
		if subjectMatch(p, subject) {
			return true
		}
	}
	return false
}

// connHubs are the hubs listening on each connection: one error handler
// per connection serves every client over it at once (ConnectConn may
// build many over one connection). An entry goes when its last hub
// leaves, so nothing here outlives the clients.
var connHubs sync.Map // *nats.Conn -> *connRefusals

type connRefusals struct {
	mu   sync.Mutex
	hubs map[*refusalHub]struct{}
}

// install adds the hub to nc's refusal listeners; the first install on a
// connection chains them to its error handler (the handler set before,
// e.g. by nats.ErrorHandler, still receives every error).
func (h *refusalHub) install(nc *nats.Conn) {
	v, loaded := connHubs.LoadOrStore(nc, &connRefusals{hubs: make(map[*refusalHub]struct{})})
	cr := v.(*connRefusals)
	cr.mu.Lock()
	cr.hubs[h] = struct{}{}
	cr.mu.Unlock()
	h.mu.Lock()
	h.conns = append(h.conns, nc)
	h.mu.Unlock()
	if loaded {
		return
	}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		if prev != nil {
			prev(c, s, err)
		}
		cr.mu.Lock()
		hubs := make([]*refusalHub, 0, len(cr.hubs))
		for h := range cr.hubs {
			hubs = append(hubs, h)
		}
		cr.mu.Unlock()
		for _, h := range hubs {
			h.handle(c, err)
		}
	})
}

// close takes the hub off its connections (Client.Close).
func (h *refusalHub) close() {
	h.mu.Lock()
	conns := h.conns
	h.conns = nil
	h.mu.Unlock()
	for _, nc := range conns {
		v, ok := connHubs.Load(nc)
		if !ok {
			continue
		}
		cr := v.(*connRefusals)
		cr.mu.Lock()
		delete(cr.hubs, h)
		if len(cr.hubs) == 0 {
			// Forget the connection (its handler, left in place, finds
			// no hub); a client built over it later installs anew.
			connHubs.Delete(nc)
		}
		cr.mu.Unlock()
	}
}

// handle runs on the connection's callback goroutine: the watchers' on
// functions must not block.
func (h *refusalHub) handle(nc *nats.Conn, err error) {
	pe, ok := DescribeRefusal(h.cluster, nc, err)
	if !ok {
		return
	}
	h.mu.Lock()
	var hit []func(*PermissionError)
	for _, w := range h.watches {
		if matchAny(w.patterns, pe.Subject) {
			w.hit = true
			hit = append(hit, w.on)
		}
	}
	claimed := len(hit) > 0
	for _, ps := range h.ended {
		claimed = claimed || matchAny(ps, pe.Subject)
	}
	h.mu.Unlock()
	for _, on := range hit {
		on(pe)
	}
	if !claimed && h.other != nil {
		h.other(pe)
	}
}

// watch calls on for every refusal of a subject that one of patterns (NATS
// wildcards) matches, until the returned stop is called.
func (h *refusalHub) watch(patterns []string, on func(*PermissionError)) (stop func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	id := h.seq
	h.watches[id] = &refusalWatch{patterns: patterns, on: on}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if w := h.watches[id]; w != nil && w.hit {
			h.ended = append(h.ended, w.patterns)
			if len(h.ended) > maxEnded {
				h.ended = h.ended[1:]
			}
		}
		delete(h.watches, id)
	}
}

// subjectMatch reports whether pattern (with * and > wildcards) covers
// subject. A wildcard token in subject (a refused subscription's) is
// covered only by a wildcard of pattern.
func subjectMatch(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		if p != "*" && p != st[i] {
			return false
		}
	}
	return len(pt) == len(st)
}

// Subjects an operation needs, by the refusals that end it.
func (h *refusalHub) producerSubjects(topic string) []string {
	return []string{"raidq." + h.cluster + ".slot.*." + topic + ".*"}
}

func (h *refusalHub) consumerSubjects(topic, group string) []string {
	s := []string{"raidq." + h.cluster + ".scan.*." + topic + ".*", "raidq." + h.cluster + ".indoubt." + topic + ".*",
		"raidq." + h.cluster + ".deliver." + topic + ".>"}
	if group != "" {
		s = append(s, h.groupSubjects(topic, group)...)
	}
	return s
}

func (h *refusalHub) groupSubjects(topic, group string) []string {
	return []string{"$KV.raidq_" + h.cluster + "_groups.g." + group + "." + topic + ".>"}
}

// groupAdminSubjects are every key of a native group (ResetGroup,
// DeleteGroup).
func (h *refusalHub) groupAdminSubjects(group string) []string {
	return []string{"$KV.raidq_" + h.cluster + "_groups.g." + group + ".>"}
}

func (h *refusalHub) topicSubjects(topic string) []string {
	return []string{"$KV.raidq_" + h.cluster + "_meta.topic." + topic}
}

// StatusSubjects are the subjects asking the nodes' status needs (for
// Client.Refusable): the status requests and the micro service discovery.
func StatusSubjects(cluster string) []string {
	return []string{"raidq." + cluster + ".status.*", "$SRV.>"}
}

// Refusable runs op with a context that is canceled the moment the
// cluster refuses this client a publish or subscription on a subject that
// one of patterns (NATS wildcards, e.g. StatusSubjects) matches; op's
// error is then that refusal, a *PermissionError (errors.Is
// ErrPermissionDenied), instead of the timeout op would meet. A refusal of
// another subject does not touch op.
func (c *Client) Refusable(ctx context.Context, patterns []string, op func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := c.refusals.watch(patterns, func(pe *PermissionError) { cancel(pe) })
	defer stop()
	err := op(ctx)
	if err == nil {
		return nil
	}
	var pe *PermissionError
	if errors.As(context.Cause(ctx), &pe) {
		return pe
	}
	return err
}
