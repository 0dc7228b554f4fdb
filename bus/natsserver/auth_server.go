package natsserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/raidq/raidq/bus"
)

// TLSFiles name the PEM files of a server's TLS (--tls-cert, --tls-key,
// --tls-ca). With them the client port requires TLS, and the route port
// requires mutual TLS: both ends present a certificate signed by CA.
type TLSFiles struct {
	Cert, Key string // this server's certificate (serverAuth and clientAuth, for routes) and key
	CA        string // CA bundle: verifies route peers and, when given, client certificates
	// VerifyClients requires every client to present a certificate signed
	// by CA (mutual TLS on the client port too). Off, a client
	// certificate is verified when one is presented.
	VerifyClients bool
}

// Check reports missing or unreadable files. Routes (clustered) need CA.
func (f *TLSFiles) Check(clustered bool) error {
	if f.Cert == "" || f.Key == "" {
		return errors.New("TLS needs both a certificate and its key (--tls-cert, --tls-key)")
	}
	if clustered && f.CA == "" {
		return errors.New("routes use mutual TLS: give the CA that signed every node's certificate (--tls-ca)")
	}
	if f.VerifyClients && f.CA == "" {
		return errors.New("verifying client certificates needs the CA that signs them (--tls-ca)")
	}
	_, err := f.ServerConfig()
	return err
}

// ServerConfig is the TLS of the client port.
func (f *TLSFiles) ServerConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s / key %s: %w", f.Cert, f.Key, err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := bus.LoadPool(f.CA)
		if err != nil {
			return nil, err
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if f.VerifyClients {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return c, nil
}

// RouteConfig is the mutual TLS of the route port: this server presents
// its certificate both ways and requires peers to present one signed by CA.
func (f *TLSFiles) RouteConfig() (*tls.Config, error) {
	c, err := f.ServerConfig()
	if err != nil {
		return nil, err
	}
	if f.CA == "" {
		return nil, errors.New("route TLS needs the CA (--tls-ca)")
	}
	c.RootCAs = c.ClientCAs
	c.ClientAuth = tls.RequireAndVerifyClientCert
	return c, nil
}

// Security is what ServerOptions.Security turns on in an embedded server:
// users with permissions (from an AuthConfig), route authentication, TLS
// on the client port and mutual TLS on the route port. Build it with
// NewSecurity.
type Security struct {
	Users []*server.User
	Nkeys []*server.NkeyUser
	// RouteUser and RoutePassword authenticate routes (both ways: the
	// route URLs get them when they carry no user).
	RouteUser, RoutePassword string
	// System declares the system account (auth_system.go): some user is in it.
	System   bool
	TLS      *tls.Config // client port; nil: plaintext
	RouteTLS *tls.Config // route port (mutual); nil: plaintext

	// internal is the NKey of the process's own in-process connections
	// (nodes, the metadata): a node-role user that exists only in this
	// server's memory. Server.Connect uses it.
	internal nkeys.KeyPair
	pub      string
	// violations counts permission errors on the internal connections:
	// each is a bug in NodePermissions (logged at Error). replyRefusals
	// counts replies the server refused (allow_responses: one reply per
	// request received; a requester that reuses a reply subject for many
	// requests gets the first answer only), logged at most once a minute.
	violations    atomic.Int64
	replyRefusals atomic.Int64
	lastReplyLog  atomic.Int64
}

// MaxSubsPerConn bounds the subscriptions of one connection when
// authentication is on (nats-server max_subscriptions).
const MaxSubsPerConn = 65536

// NewSecurity builds the Security of a server of cluster from an auth
// config (nil: no authentication) and TLS files (nil: no TLS). With auth,
// it adds an in-process node identity with a fresh NKey for the
// process's own connections (Server.Connect).
func NewSecurity(cluster string, auth *AuthConfig, files *TLSFiles) (*Security, error) {
	s := &Security{}
	if auth != nil {
		subj, err := bus.NewSubjects(cluster)
		if err != nil {
			return nil, err
		}
		s.Users, s.Nkeys, err = auth.ServerUsers(cluster)
		if err != nil {
			return nil, err
		}
		s.System = auth.HasSystemUser()
		if auth.Routes != nil {
			s.RouteUser, s.RoutePassword = auth.Routes.User, auth.Routes.Password
		}
		s.internal, err = nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		s.pub, err = s.internal.PublicKey()
		if err != nil {
			return nil, err
		}
		s.Nkeys = append(s.Nkeys, &server.NkeyUser{Nkey: s.pub, Permissions: NodePermissions(subj)})
	}
	if files != nil {
		var err error
		if s.TLS, err = files.ServerConfig(); err != nil {
			return nil, err
		}
		if files.CA != "" {
			if s.RouteTLS, err = files.RouteConfig(); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// AuthRequired reports whether clients must authenticate.
func (s *Security) AuthRequired() bool { return s != nil && (len(s.Users) > 0 || len(s.Nkeys) > 0) }

// ConnectOptions are the options of the process's own, in-process
// connections: its internal node identity (nil without authentication),
// and an error handler that logs (to log, nil: slog.Default) and counts
// permission violations, which would be bugs in NodePermissions.
func (s *Security) ConnectOptions(log *slog.Logger) []nats.Option {
	if s == nil || s.internal == nil {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	kp := s.internal
	return []nats.Option{nats.Nkey(s.pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) && isReplyRefusal(err) {
				n := s.replyRefusals.Add(1)
				now := time.Now().UnixNano()
				if last := s.lastReplyLog.Load(); now-last > int64(time.Minute) && s.lastReplyLog.CompareAndSwap(last, now) {
					log.Warn("replies refused: a requester reused its reply subject for several requests (only one reply each is allowed)",
						"conn", nc.Opts.Name, "refused_so_far", n, "err", err)
				}
				return
			}
			if errors.Is(err, nats.ErrPermissionViolation) {
				s.violations.Add(1)
				log.Error("permission violation on an internal connection (raidq's node permissions lack it)",
					"conn", nc.Opts.Name, "err", err)
				return
			}
			args := []any{"conn", nc.Opts.Name, "err", err}
			if sub != nil {
				args = append(args, "subject", sub.Subject)
			}
			log.Warn("NATS error", args...)
		})}
}

// isReplyRefusal: a publish to an inbox was refused (allow_responses).
func isReplyRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Publish to \"_INBOX")
}

// ReplyRefusals counts the internal connections' replies the server
// refused because the requester had already had its one reply.
func (s *Security) ReplyRefusals() int64 {
	if s == nil {
		return 0
	}
	return s.replyRefusals.Load()
}

// InternalViolations counts the permission violations of the internal
// connections so far (0 unless NodePermissions misses a subject).
func (s *Security) InternalViolations() int64 {
	if s == nil {
		return 0
	}
	return s.violations.Load()
}

// apply sets s on nats-server options (after the routes are set).
func (s *Security) apply(n *server.Options) error {
	if s == nil {
		return nil
	}
	if err := s.applySystem(n); err != nil { // auth_system.go; before the users
		return err
	}
	n.Users, n.Nkeys = s.Users, s.Nkeys
	if s.AuthRequired() && n.MaxSubs == 0 {
		// Bound what one authenticated connection can make the server
		// hold: raidq's clients and nodes use a few dozen subscriptions.
		n.MaxSubs = MaxSubsPerConn
	}
	if s.TLS != nil {
		n.TLSConfig = s.TLS
		n.TLSVerify = s.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	}
	if n.Cluster.Port == 0 {
		return nil
	}
	if s.RouteTLS != nil {
		n.Cluster.TLSConfig = s.RouteTLS
	}
	if s.RouteUser != "" {
		n.Cluster.Username, n.Cluster.Password = s.RouteUser, s.RoutePassword
		for i, u := range n.Routes {
			if u.User == nil {
				c := *u
				c.User = url.UserPassword(s.RouteUser, s.RoutePassword)
				n.Routes[i] = &c
			}
		}
	}
	return nil
}

// Security returns the server's Security (nil: none).
func (s *Server) Security() *Security { return s.opts.Security }
