package natsserver

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/raidq/raidq/bus"
)

// Authentication and subject permissions (docs/security.md). raidq uses
// the NATS security model as it is: the users of an auth file become
// nats-server users (user/password, bcrypt accepted, or an NKey) of one
// account, each with publish and subscribe permissions built from its
// roles:
//
//	node      what a storage node needs: every raidq.<cluster>.> subject,
//	          the JetStream API and $KV subjects of the two metadata
//	          buckets, $SRV (its micro service), replies to requests
//	admin     create, alter and delete topics (the topic.* keys of the
//	          metadata bucket), reset and delete native consumer groups
//	          (the g.> keys of the groups bucket: `raidq group reset`,
//	          `delete`), read the metadata, ask the nodes' status, offset
//	          the clock of a node started with --clock-fault (drills)
//	gateway   a Kafka gateway's own identity (`raidq kafka`): every
//	          topic's write, scan and in-doubt subjects and deliver
//	          subscriptions, topic records (for its Kafka admins), its
//	          gateway.* records and the kgroup.> Kafka group records,
//	          read the metadata. The gateway is trusted to enforce its
//	          Kafka users' roles itself (actors/kafka/auth.go).
//	producer  for topics [A, ...]: write requests (raidq.<c>.slot.*.<A>.*),
//	          read the metadata
//	consumer  for topics [A, ...]: scan requests (raidq.<c>.scan.*.<A>.*),
//	          the deliver subjects raidq.<c>.deliver.<A>.>, in-doubt
//	          reports, read the metadata, write its group keys
//	          (g.<group>.<A>.> of the groups bucket; Groups narrows the
//	          group names)
//	system    the NATS system account ($SYS; auth_system.go) and nothing
//	          else: `nats server ls`, `nats server report jetstream`,
//	          `nats server raft peer-remove`, $SYS.REQ.SERVER.PING. It
//	          cannot touch a raidq subject, so it goes alone.
//
// Every user receives replies only on its own inbox prefix, _INBOX_<name>
// (InboxPrefix; the raidq client sets it with nats.CustomInboxPrefix), so
// no user can read the replies another user's scans get. Nodes answer
// requests through allow_responses.
//
// Routes between servers authenticate with mutual TLS (TLSFiles.CA) and/or
// the auth file's routes user.

// Limits of an auth file.
const (
	MaxAuthFileSize = 1 << 20
	MaxAuthUsers    = 10000
	MaxAuthTopics   = 1024 // topics (or groups) listed for one user and role
)

// Role names of an auth file.
const (
	RoleNode     = "node"
	RoleAdmin    = "admin"
	RoleProducer = "producer"
	RoleConsumer = "consumer"
	RoleGateway  = "gateway"
	RoleSystem   = "system"
)

// roleNames are the roles in the order of messages and summaries.
var roleNames = []string{RoleNode, RoleAdmin, RoleGateway, RoleProducer, RoleConsumer}

// ErrBadAuthConfig is wrapped by every auth file error.
var ErrBadAuthConfig = errors.New("bad auth config")

// AuthConfig is a parsed auth file: the users and how routes authenticate.
type AuthConfig struct {
	Users []AuthUser
	// Routes is the user and password other servers present on the route
	// port (nats-server cluster authorization); nil: routes must use
	// mutual TLS.
	Routes *RouteAuth
}

// AuthUser is one user of an auth file: User and Password, or NKey (a
// public user NKey, "U..."), and what it may do.
type AuthUser struct {
	User     string   `json:"user,omitempty"`
	Password string   `json:"password,omitempty"` // plain, or a bcrypt hash ("$2a$..."; `raidq security passwd`)
	NKey     string   `json:"nkey,omitempty"`
	Roles    []string `json:"roles,omitempty"`    // "node", "admin", "gateway"
	Producer []string `json:"producer,omitempty"` // topics it may write ("*": all)
	Consumer []string `json:"consumer,omitempty"` // topics it may read ("*": all)
	Groups   []string `json:"groups,omitempty"`   // consumer groups it may commit in (default: any)
}

// RouteAuth is the route user of an auth file.
type RouteAuth struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// Identity is the name a user connects as: its user name or its NKey.
func (u AuthUser) Identity() string {
	if u.NKey != "" {
		return u.NKey
	}
	return u.User
}

// Has reports whether u has role (node, admin, gateway; producer and consumer when
// u lists topics for them).
func (u AuthUser) Has(role string) bool {
	switch role {
	case RoleProducer:
		return len(u.Producer) > 0
	case RoleConsumer:
		return len(u.Consumer) > 0
	}
	return slices.Contains(u.Roles, role)
}

// LoadAuthFile reads and parses an auth file (ParseAuthConfig).
func LoadAuthFile(path string) (*AuthConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	if st.Size() > MaxAuthFileSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, limit %d", ErrBadAuthConfig, path, st.Size(), MaxAuthFileSize)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	a, err := ParseAuthConfig(b)
	if err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	return a, nil
}

// ParseAuthConfig parses an auth file, JSON or NATS config syntax:
//
//	users: [
//	  {user: node, password: "$2a$11$...", roles: [node]}
//	  {user: ops, password: "...", roles: [admin]}
//	  {user: gw1, password: "...", roles: [gateway]}
//	  {user: shop, password: "...", producer: [orders]}
//	  {nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4, consumer: [orders], groups: [billing]}
//	]
//	routes: {user: route, password: "..."}
//
// Unknown keys, duplicate users, unknown roles and invalid names are
// errors (wrapping ErrBadAuthConfig) that say where. Passwords starting
// with "$" must be quoted (the NATS syntax reads $NAME as a variable).
func ParseAuthConfig(b []byte) (*AuthConfig, error) {
	if len(b) > MaxAuthFileSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrBadAuthConfig, len(b), MaxAuthFileSize)
	}
	if includeRE.Match(b) {
		// The NATS syntax can include other files; an auth file is one file.
		return nil, fmt.Errorf("%w: include is not supported in an auth file", ErrBadAuthConfig)
	}
	m, err := parseConf(string(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAuthConfig, err)
	}
	a := &AuthConfig{}
	if err := knownKeys("the file", m, "users", "routes"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAuthConfig, err)
	}
	users, ok := m["users"]
	if !ok {
		return nil, fmt.Errorf("%w: no users: want users: [{user: NAME, password: SECRET, roles: [...]}, ...]", ErrBadAuthConfig)
	}
	list, ok := users.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: users is a %s, want a list", ErrBadAuthConfig, kindOf(users))
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%w: users is empty: an auth file lists at least one user", ErrBadAuthConfig)
	}
	if len(list) > MaxAuthUsers {
		return nil, fmt.Errorf("%w: %d users, limit %d", ErrBadAuthConfig, len(list), MaxAuthUsers)
	}
	seen := make(map[string]int)
	for i, e := range list {
		u, err := parseUser(e)
		if err != nil {
			return nil, fmt.Errorf("%w: user %d: %v", ErrBadAuthConfig, i+1, err)
		}
		if j, dup := seen[u.Identity()]; dup {
			return nil, fmt.Errorf("%w: user %d: %q is also user %d", ErrBadAuthConfig, i+1, u.Identity(), j)
		}
		seen[u.Identity()] = i + 1
		a.Users = append(a.Users, u)
	}
	if r, ok := m["routes"]; ok {
		rm, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: routes is a %s, want {user: NAME, password: SECRET}", ErrBadAuthConfig, kindOf(r))
		}
		if err := knownKeys("routes", rm, "user", "password"); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadAuthConfig, err)
		}
		ra := &RouteAuth{}
		ra.User, _ = rm["user"].(string)
		ra.Password, _ = rm["password"].(string)
		if err := bus.ValidName("route user", ra.User); err != nil {
			return nil, fmt.Errorf("%w: routes: %v", ErrBadAuthConfig, err)
		}
		if ra.Password == "" {
			return nil, fmt.Errorf("%w: routes: a password is required", ErrBadAuthConfig)
		}
		a.Routes = ra
	}
	return a, nil
}

// parseConf runs the NATS config parser, which panics on a few inputs.
func parseConf(s string) (m map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("unparsable: %v", r)
		}
	}()
	return conf.Parse(s)
}

// includeRE finds what could be the NATS include directive (conservative:
// also inside strings).
var includeRE = regexp.MustCompile(`(^|[\s{\[,;])include[\s'"]`)

func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case []any:
		return "list"
	case map[string]any:
		return "map"
	case bool:
		return "boolean"
	case int64, float64:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func knownKeys(where string, m map[string]any, known ...string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return fmt.Errorf("%s: unknown key %q (known: %s)", where, k, strings.Join(known, ", "))
		}
	}
	return nil
}

func parseUser(e any) (AuthUser, error) {
	m, ok := e.(map[string]any)
	if !ok {
		return AuthUser{}, fmt.Errorf("a %s, want {user: NAME, password: SECRET, ...} or {nkey: U..., ...}", kindOf(e))
	}
	if err := knownKeys("user", m, "user", "password", "nkey", "roles", "producer", "consumer", "groups"); err != nil {
		return AuthUser{}, err
	}
	var u AuthUser
	var err error
	str := func(k string) (string, error) {
		v, ok := m[k]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%s is a %s, want a string", k, kindOf(v))
		}
		return s, nil
	}
	if u.User, err = str("user"); err != nil {
		return u, err
	}
	if u.Password, err = str("password"); err != nil {
		return u, err
	}
	if u.NKey, err = str("nkey"); err != nil {
		return u, err
	}
	for _, f := range []struct {
		key  string
		dst  *[]string
		kind string
	}{{"roles", &u.Roles, "role"}, {"producer", &u.Producer, "topic"}, {"consumer", &u.Consumer, "topic"}, {"groups", &u.Groups, "group"}} {
		if *f.dst, err = names(m, f.key, f.kind); err != nil {
			return u, err
		}
	}
	return u, u.Validate()
}

// names reads a list of names (or one name) under key.
func names(m map[string]any, key, kind string) ([]string, error) {
	v, ok := m[key]
	if !ok {
		return nil, nil
	}
	var list []any
	switch x := v.(type) {
	case []any:
		list = x
	case string:
		list = []any{x}
	default:
		return nil, fmt.Errorf("%s is a %s, want a list of %s names", key, kindOf(v), kind)
	}
	if len(list) > MaxAuthTopics {
		return nil, fmt.Errorf("%s lists %d names, limit %d", key, len(list), MaxAuthTopics)
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%s: a %s, want a %s name", key, kindOf(e), kind)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Validate checks one user: a valid identity, known roles, valid topic
// and group names ("*" means all).
func (u AuthUser) Validate() error {
	switch {
	case u.NKey != "" && (u.User != "" || u.Password != ""):
		return errors.New("give user and password, or nkey, not both")
	case u.NKey != "":
		if !nkeys.IsValidPublicUserKey(u.NKey) {
			return fmt.Errorf("nkey %q is not a public user NKey (U..., 56 characters; `raidq security nkey` makes one)", u.NKey)
		}
	case u.User == "":
		return errors.New("a user name and password, or an nkey, is required")
	default:
		if err := bus.ValidName("user", u.User); err != nil {
			return err
		}
		if u.Password == "" {
			return fmt.Errorf("user %q: a password is required", u.User)
		}
	}
	for _, r := range u.Roles {
		switch r {
		case RoleNode, RoleAdmin, RoleGateway:
		case RoleSystem:
			if err := u.validateSystem(); err != nil { // auth_system.go
				return err
			}
		case RoleProducer, RoleConsumer:
			return fmt.Errorf("%s: role %q takes its topics as %s: [topic, ...]", u.Identity(), r, r)
		default:
			return fmt.Errorf("%s: unknown role %q (roles: node, admin, gateway, system; producer: [topics]; consumer: [topics])", u.Identity(), r)
		}
	}
	if len(u.Roles) == 0 && len(u.Producer) == 0 && len(u.Consumer) == 0 {
		return fmt.Errorf("%s: no role (roles: [node], [admin] or [gateway], producer: [topics], consumer: [topics])", u.Identity())
	}
	for _, l := range []struct {
		kind string
		list []string
	}{{"producer topic", u.Producer}, {"consumer topic", u.Consumer}, {"group", u.Groups}} {
		for _, t := range l.list {
			if t == "*" {
				continue
			}
			if err := bus.ValidName(l.kind, t); err != nil {
				return fmt.Errorf("%s: %w", u.Identity(), err)
			}
		}
	}
	if len(u.Groups) > 0 && len(u.Consumer) == 0 {
		return fmt.Errorf("%s: groups without consumer topics", u.Identity())
	}
	return nil
}

// Permissions returns the NATS permissions of u in cluster (see the
// package comment of auth.go for the roles). A system user's are nil:
// everything in the system account, which holds no raidq subject.
func (u AuthUser) Permissions(cluster string) (*server.Permissions, error) {
	s, err := bus.NewSubjects(cluster)
	if err != nil {
		return nil, err
	}
	if u.Has(RoleSystem) {
		return nil, nil
	}
	if u.Has(RoleNode) {
		p := NodePermissions(s)
		p.Subscribe.Allow = appendNew(p.Subscribe.Allow, bus.InboxPrefix(u.Identity())+".>")
		return p, nil
	}
	var pub, sub []string
	sub = append(sub, bus.InboxPrefix(u.Identity())+".>")
	pub = append(pub, kvRead(metaBucketName(cluster))...)
	pub = append(pub, kvRead(groupsBucketName(cluster))...)
	if u.Has(RoleAdmin) {
		pub = append(pub, "$KV."+metaBucketName(cluster)+".topic.>", "$KV."+groupsBucketName(cluster)+".g.>",
			"$SRV.PING", "$SRV.PING.>", "$SRV.INFO", "$SRV.INFO.>", "$SRV.STATS", "$SRV.STATS.>",
			s.StatusAny(), s.FaultClockAny())
	}
	if u.Has(RoleGateway) {
		gp, gs := gatewayPermissions(s)
		pub, sub = append(pub, gp...), append(sub, gs...)
	}
	for _, t := range u.Producer {
		pub = append(pub, s.SlotAnyNode(t))
	}
	groups := u.Groups
	if len(groups) == 0 {
		groups = []string{"*"}
	}
	for _, t := range u.Consumer {
		pub = append(pub, s.ScanAnyNode(t), s.InDoubtTopic(t))
		sub = append(sub, s.DeliverTopic(t))
		for _, g := range groups {
			pub = append(pub, "$KV."+groupsBucketName(cluster)+".g."+g+"."+t+".>")
		}
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: dedupe(pub)},
		Subscribe: &server.SubjectPermission{Allow: dedupe(sub)},
	}, nil
}

// NodePermissions are the permissions of a storage node: every subject of
// the cluster, the two metadata buckets (JetStream API and $KV), its micro
// service, its own inboxes, and replies to the requests it receives.
func NodePermissions(s bus.Subjects) *server.Permissions {
	all := bus.SubjectPrefix + "." + s.Cluster() + ".>"
	pub := []string{all, "$JS.API.INFO"}
	for _, b := range []string{metaBucketName(s.Cluster()), groupsBucketName(s.Cluster())} {
		st := "KV_" + b
		pub = append(pub, "$KV."+b+".>", "$JS.API.STREAM.*."+st, "$JS.API.STREAM.MSG.*."+st,
			"$JS.API.CONSUMER.*."+st, "$JS.API.CONSUMER.*."+st+".>", "$JS.API.CONSUMER.MSG.NEXT."+st+".>",
			"$JS.API.CONSUMER.DURABLE.CREATE."+st+".>",
			"$JS.API.DIRECT.GET."+st, "$JS.API.DIRECT.GET."+st+".>", "$JS.FC."+st+".>", "$JS.ACK."+st+".>")
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{all, "$SRV.>", "_INBOX.>"}},
		Response:  &server.ResponsePermission{MaxMsgs: 1},
	}
}

// gatewayPermissions are what a Kafka gateway adds to every user's
// (its inbox, reading both buckets): a producer's and a consumer's
// subjects for every topic ("*", as in the topic lists) minus the native
// group keys, which it only reads (it refuses a Kafka group name a native
// group uses); the topic records, written for its Kafka admin users as
// the admin role does; its registration records (gateway.<id> of the meta
// bucket, any id: gateways are trusted alike) and the Kafka group records
// (kgroup.> of the groups bucket). It gets no member, lease or native
// group keys, no heartbeats, no status or $SRV, and answers no requests.
func gatewayPermissions(s bus.Subjects) (pub, sub []string) {
	meta, groups := "$KV."+metaBucketName(s.Cluster()), "$KV."+groupsBucketName(s.Cluster())
	pub = []string{meta + ".topic.>", meta + ".gateway.*", groups + ".kgroup.>",
		s.SlotAnyNode("*"), s.ScanAnyNode("*"), s.InDoubtTopic("*")}
	return pub, []string{s.DeliverTopic("*")}
}

// kvRead is what reading a KV bucket takes: binding it, getting keys
// (direct or stream get), watching and listing (ordered push consumers
// with flow control).
func kvRead(bucket string) []string {
	st := "KV_" + bucket
	return []string{"$JS.API.STREAM.INFO." + st, "$JS.API.CONSUMER.CREATE." + st, "$JS.API.CONSUMER.CREATE." + st + ".>",
		"$JS.API.CONSUMER.DELETE." + st + ".>", "$JS.API.CONSUMER.INFO." + st + ".>", "$JS.API.CONSUMER.MSG.NEXT." + st + ".>",
		"$JS.API.DIRECT.GET." + st, "$JS.API.DIRECT.GET." + st + ".>", "$JS.API.STREAM.MSG.GET." + st, "$JS.FC." + st + ".>"}
}

// metaBucketName and groupsBucketName are the metadata buckets of a
// cluster (package meta creates them under these names).
func metaBucketName(cluster string) string   { return "raidq_" + cluster + "_meta" }
func groupsBucketName(cluster string) string { return "raidq_" + cluster + "_groups" }

func dedupe(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = appendNew(out, s)
	}
	return out
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// ServerUsers returns the nats-server users (user/password) and NKey
// users of the auth file with their permissions in cluster: system users
// in the system account (SystemAccount), every other user in the global
// account.
func (a *AuthConfig) ServerUsers(cluster string) ([]*server.User, []*server.NkeyUser, error) {
	var users []*server.User
	var nk []*server.NkeyUser
	sys := systemAccount()
	for _, u := range a.Users {
		p, err := u.Permissions(cluster)
		if err != nil {
			return nil, nil, err
		}
		var acc *server.Account // nil: the global account, raidq's
		if u.Has(RoleSystem) {
			acc = sys
		}
		if u.NKey != "" {
			nk = append(nk, &server.NkeyUser{Nkey: u.NKey, Permissions: p, Account: acc})
		} else {
			users = append(users, &server.User{Username: u.User, Password: u.Password, Permissions: p, Account: acc})
		}
	}
	return users, nk, nil
}

// Summary counts the users of each role, for logs: "3 users (node 1,
// admin 1, gateway 0, producer 1, consumer 1)".
func (a *AuthConfig) Summary() string {
	count := map[string]int{}
	for _, u := range a.Users {
		for _, r := range roleNames {
			if u.Has(r) {
				count[r]++
			}
		}
	}
	var parts []string
	for _, r := range roleNames {
		parts = append(parts, fmt.Sprintf("%s %d", r, count[r]))
	}
	if n := a.systemUsers(); n > 0 { // auth_system.go
		parts = append(parts, fmt.Sprintf("system %d", n))
	}
	routes := "routes by mutual TLS"
	if a.Routes != nil {
		routes = "route user " + a.Routes.User
	}
	return fmt.Sprintf("%d users (%s), %s", len(a.Users), strings.Join(parts, ", "), routes)
}

// MustSubjects is bus.NewSubjects for a cluster name known to be valid; it
// panics otherwise.
func MustSubjects(cluster string) bus.Subjects {
	s, err := bus.NewSubjects(cluster)
	if err != nil {
		panic(err)
	}
	return s
}
