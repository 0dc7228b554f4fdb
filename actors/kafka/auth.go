package kafka

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"regexp"

	"golang.org/x/crypto/bcrypt"

	"github.com/raidq/raidq/bus/natsserver"
)

// ErrAuthFailed is wrapped by every Authenticate error. The wrapping says
// why, for the gateway's log; the client is only told "authentication
// failed", whatever the reason.
var ErrAuthFailed = errors.New("authentication failed")

// The Kafka users of an auth file (docs/security.md#kafka-clients-and-the-gateway-role)
// have the roles they have on NATS, enforced by the gateway:
//
//	producer: [A]  OpProduce and OpDescribe on A
//	consumer: [A]  OpConsume and OpDescribe on A; the groups of groups:
//	               (default: any group)
//	admin          OpAdmin (create, delete topics, add partitions) and OpDescribe on every
//	               topic, every group; not produce or consume, which it
//	               may not on NATS either (list the topics, or "*", as
//	               producer/consumer for that)
//
// "*" in a list means every topic or group, as it does in the NATS
// permissions ("*" is the only wildcard an auth file accepts). Every
// user that may log in may describe the cluster (topic ""). Users of the
// node and gateway roles are machines (the nodes' and gateways' own NATS
// identities): they may not log in over Kafka, whatever else they have,
// so a leaked Kafka password is never a node's or a gateway's. NKey users
// have no password and cannot use PLAIN.

// plainMechanism is the only SASL mechanism offered. SCRAM would need
// SCRAM credentials stored per user, which cannot be derived from the
// auth file's bcrypt hashes.
const plainMechanism = "PLAIN"

// bcryptRE is how nats-server tells a bcrypt hash from a plain password
// (server.isBcrypt): the auth file means the same thing to both.
var bcryptRE = regexp.MustCompile(`^\$2[abxy]\$\d{2}\$.*`)

// users is the Authorizer of an auth file. It is immutable after
// NewUsers, so safe for concurrent use without locks.
type users struct {
	byName map[string]*kafkaUser
	// dummy is a bcrypt hash of a random secret, at the highest cost of
	// the file's hashes: every Authenticate runs exactly one bcrypt
	// comparison (the user's hash, else this one), so an unknown user, an
	// NKey user and a plain-password user take as long as a known bcrypt
	// user with a wrong password, and timing tells no user names.
	dummy   []byte
	compare func(hash, password []byte) error // bcrypt.CompareHashAndPassword; tests count calls
}

// kafkaUser is one auth file user as the gateway sees it.
type kafkaUser struct {
	hash    []byte   // bcrypt hash; nil: plain password
	plain   [32]byte // SHA-256 of the plain password (compared in constant time)
	refuse  error    // non-nil: may not log in over Kafka, and why
	admin   bool
	produce nameSet
	consume nameSet
	groups  nameSet // of a consumer; empty: any group
}

// nameSet is a topic or group list of the auth file.
type nameSet struct {
	all   bool // "*"
	names map[string]struct{}
}

func newNameSet(list []string) nameSet {
	s := nameSet{names: make(map[string]struct{}, len(list))}
	for _, n := range list {
		if n == "*" {
			s.all = true
		}
		s.names[n] = struct{}{}
	}
	return s
}

func (s nameSet) has(name string) bool {
	_, ok := s.names[name]
	return s.all || ok
}

func (s nameSet) empty() bool { return len(s.names) == 0 }

// NewUsers makes the Authorizer of an auth file's users (SASL PLAIN). It
// checks every user again (natsserver.AuthUser.Validate) and refuses
// duplicate names and unreadable bcrypt hashes; errors wrap ErrConfig.
func NewUsers(a *natsserver.AuthConfig) (Authorizer, error) {
	if a == nil || len(a.Users) == 0 {
		return nil, fmt.Errorf("%w: kafka users: no auth file users", ErrConfig)
	}
	u := &users{byName: make(map[string]*kafkaUser, len(a.Users)), compare: bcrypt.CompareHashAndPassword}
	cost := 0
	for i, au := range a.Users {
		ku, c, err := newKafkaUser(au)
		if err != nil {
			return nil, fmt.Errorf("%w: kafka users: user %d: %v", ErrConfig, i+1, err)
		}
		if _, dup := u.byName[au.Identity()]; dup {
			return nil, fmt.Errorf("%w: kafka users: user %d: %q is listed twice", ErrConfig, i+1, au.Identity())
		}
		u.byName[au.Identity()] = ku
		cost = max(cost, c)
	}
	var err error
	if u.dummy, err = dummyHash(cost); err != nil {
		return nil, fmt.Errorf("kafka users: %w", err)
	}
	return u, nil
}

// newKafkaUser converts one user; cost is its bcrypt hash's (0: none).
func newKafkaUser(au natsserver.AuthUser) (*kafkaUser, int, error) {
	if err := au.Validate(); err != nil {
		return nil, 0, err
	}
	ku := &kafkaUser{admin: au.Has(natsserver.RoleAdmin), produce: newNameSet(au.Producer),
		consume: newNameSet(au.Consumer), groups: newNameSet(au.Groups)}
	switch {
	case au.NKey != "":
		ku.refuse = fmt.Errorf("%s is an NKey user: SASL PLAIN needs a user with a password", au.NKey)
	case au.Has(natsserver.RoleNode):
		ku.refuse = fmt.Errorf("%q has the node role: a machine identity may not log in over Kafka", au.User)
	case au.Has(natsserver.RoleGateway):
		ku.refuse = fmt.Errorf("%q has the gateway role: a machine identity may not log in over Kafka", au.User)
	}
	if !bcryptRE.MatchString(au.Password) {
		ku.plain = sha256.Sum256([]byte(au.Password))
		return ku, 0, nil
	}
	cost, err := bcrypt.Cost([]byte(au.Password))
	if err != nil {
		return nil, 0, fmt.Errorf("%q: the password looks like a bcrypt hash but is not one: %v", au.User, err)
	}
	ku.hash = []byte(au.Password)
	return ku, cost, nil
}

// dummyHash hashes a random secret at cost (bcrypt.MinCost when the file
// has no hash: every path then costs the same, and little).
func dummyHash(cost int) ([]byte, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	return bcrypt.GenerateFromPassword(secret, max(cost, bcrypt.MinCost))
}

// Mechanisms offers PLAIN only (a fresh slice: callers may keep it).
func (u *users) Mechanisms() []string { return []string{plainMechanism} }

// Authenticate checks user and password against the auth file: a bcrypt
// hash with bcrypt, a plain password in constant time. Every outcome
// costs one bcrypt comparison (see users.dummy) and wraps ErrAuthFailed.
func (u *users) Authenticate(user, password string) error {
	ku, known := u.byName[user]
	hash := u.dummy
	if known && ku.hash != nil {
		hash = ku.hash
	}
	hashErr := u.compare(hash, []byte(password))
	switch {
	case !known:
		return fmt.Errorf("%w: unknown user %q", ErrAuthFailed, user)
	case ku.refuse != nil:
		return fmt.Errorf("%w: %v", ErrAuthFailed, ku.refuse)
	case ku.hash == nil:
		sum := sha256.Sum256([]byte(password))
		if subtle.ConstantTimeCompare(sum[:], ku.plain[:]) != 1 {
			return fmt.Errorf("%w: user %q: wrong password", ErrAuthFailed, user)
		}
	case hashErr != nil:
		return fmt.Errorf("%w: user %q: wrong password", ErrAuthFailed, user)
	}
	return nil
}

// login is the user if it exists and may log in over Kafka, else nil.
func (u *users) login(user string) *kafkaUser {
	ku := u.byName[user]
	if ku == nil || ku.refuse != nil {
		return nil
	}
	return ku
}

// Allowed applies the user's roles to op on topic ("" for the cluster:
// describing it is open to every user, administering it to admins).
func (u *users) Allowed(user string, op Op, topic string) bool {
	ku := u.login(user)
	if ku == nil {
		return false
	}
	switch op {
	case OpProduce:
		return topic != "" && ku.produce.has(topic)
	case OpConsume:
		return topic != "" && ku.consume.has(topic)
	case OpDescribe:
		return topic == "" || ku.admin || ku.produce.has(topic) || ku.consume.has(topic)
	case OpAdmin:
		return ku.admin
	}
	return false
}

// GroupAllowed: admins use every group; a consumer (of any topic) the
// groups of its groups: list, every group without one; nobody else any.
// The topics a group reads are checked per request (Allowed).
func (u *users) GroupAllowed(user, group string) bool {
	ku := u.login(user)
	switch {
	case ku == nil || group == "":
		return false
	case ku.admin:
		return true
	case ku.consume.empty():
		return false
	}
	return ku.groups.empty() || ku.groups.has(group)
}

// compile-time check: users is an Authorizer.
var _ Authorizer = (*users)(nil)
