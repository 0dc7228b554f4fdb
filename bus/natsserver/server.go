// Package natsserver embeds nats-server in a raidq node: clustered
// JetStream for the metadata, raidq's users and permissions (auth.go),
// TLS on the client and route ports, and slog logging. Only nodes and
// the dev and test tools link it; clients need package bus alone.
package natsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus"
)

// Defaults of ServerOptions.
const (
	DefaultJetStreamMaxMemory int64 = 64 << 20
	DefaultJetStreamMaxStore  int64 = 1 << 30
	DefaultReadyTimeout             = 10 * time.Second
)

// LevelTrace is the slog level of nats-server trace lines (protocol
// traces); they are only produced when the logger enables this level.
const LevelTrace = slog.LevelDebug - 4

// ServerOptions configure an embedded nats-server. The zero value plus a
// Port gives a plain listening server.
type ServerOptions struct {
	// Name is the server name; required with JetStream in a cluster, and it
	// must be unique there.
	Name string

	// Host and Port are the client listen address. Host "" means all
	// interfaces (nats-server's default); Port -1 picks a random free port,
	// 0 nats-server's default 4222.
	Host string
	Port int

	// HTTPHost and HTTPPort serve nats-server's monitoring endpoints
	// (/varz, /jsz, /connz, /routez, /healthz, ...; monitor.go) over plain
	// HTTP. They have no authentication: bind them to a loopback or
	// private address. HTTPPort 0: no monitoring; -1: a random free port.
	HTTPHost string
	HTTPPort int

	// InProcessOnly starts no listener (nats-server DontListen): clients
	// connect only through Server.Connect in the same process. It cannot be
	// combined with clustering.
	InProcessOnly bool

	// ClusterName turns clustering on. ClusterHost and ClusterPort are the
	// route listen address (ClusterPort is required; -1 picks a random
	// port). Routes are the route URLs (nats-route://host:port) of the
	// cluster's servers; clustered JetStream sizes its meta group from
	// them, so give the full list (including this server is fine).
	ClusterName string
	ClusterHost string
	ClusterPort int
	Routes      []string
	// ClusterAdvertise is the route address (host:port) this server tells
	// its peers to dial, and ClientAdvertise the client address it tells
	// clients (nats-server cluster.advertise and client_advertise); empty:
	// the addresses the server finds on its interfaces. With TLS, give
	// names the certificates hold: peers and clients otherwise dial bare
	// IP addresses the certificates do not name.
	ClusterAdvertise string
	ClientAdvertise  string

	// JetStream enables JetStream with its files under StoreDir (required).
	// MaxMemory and MaxStore bound its memory and file storage; <= 0 means
	// DefaultJetStreamMaxMemory and DefaultJetStreamMaxStore.
	JetStream bool
	StoreDir  string
	MaxMemory int64
	MaxStore  int64
	// SyncAlways makes JetStream fsync every write before acknowledging it
	// (nats-server "sync_interval: always"); otherwise SyncInterval is how
	// often it flushes to disk (<= 0: nats-server's default, 2 minutes).
	SyncAlways   bool
	SyncInterval time.Duration

	// MaxPayload is the largest message the server accepts; <= 0 means
	// bus.DefaultMaxPayload (1 MiB).
	MaxPayload int32

	// ReadyTimeout bounds how long StartServer waits for the server to be
	// ready for connections; <= 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration

	// Security turns on authentication and subject permissions, route
	// authentication, TLS on the client port and mutual TLS on the route
	// port (auth_server.go, NewSecurity); nil: none of them.
	Security *Security

	// Logger receives nats-server's log lines (notice → Info, warn → Warn,
	// error and fatal → Error, debug → Debug, trace → LevelTrace); debug and
	// trace lines are only produced when the logger enables those levels.
	// nil discards them.
	Logger *slog.Logger
}

// Server is an embedded nats-server. Its methods are safe for concurrent use.
type Server struct {
	ns   *server.Server
	opts ServerOptions
	log  *slogAdapter
	once sync.Once
}

// StartServer starts a nats-server configured by o and waits until it is
// ready for connections (ReadyTimeout). On failure nothing is left running
// and the error says why, including the server's last error log line.
func StartServer(o ServerOptions) (*Server, error) {
	nopts, err := o.natsOptions()
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(nopts)
	if err != nil {
		return nil, fmt.Errorf("bus: nats server %q: %w", o.Name, err)
	}
	l := o.Logger
	if l != nil {
		l = l.With("component", "nats-server", "server", o.Name)
	}
	s := &Server{ns: ns, opts: o, log: newSlogAdapter(l)}
	ns.SetLoggerV2(s.log, s.log.enabled(slog.LevelDebug), s.log.enabled(LevelTrace), false)
	ns.Start()
	wait := o.ReadyTimeout
	if wait <= 0 {
		wait = DefaultReadyTimeout
	}
	if err := s.waitReady(wait); err != nil {
		s.Shutdown()
		return nil, err
	}
	if o.JetStream && !ns.JetStreamEnabled() {
		s.Shutdown()
		msg := fmt.Sprintf("bus: nats server %q: JetStream did not start", o.Name)
		if last := s.log.lastError(); last != "" {
			msg += ": " + last
		}
		return nil, errors.New(msg)
	}
	return s, nil
}

// waitReady waits up to wait for the server to accept connections, and
// gives up early when the server logs a fatal error (a listener that
// cannot bind never becomes ready).
func (s *Server) waitReady(wait time.Duration) error {
	start := time.Now()
	for {
		step := min(wait-time.Since(start), 100*time.Millisecond)
		ready := s.ns.ReadyForConnections(max(step, time.Millisecond))
		if fatal := s.log.fatal(); fatal != "" {
			return fmt.Errorf("bus: nats server %q failed to start: %s", s.opts.Name, fatal)
		}
		if ready {
			return nil
		}
		if time.Since(start) >= wait {
			msg := fmt.Sprintf("bus: nats server %q not ready for connections after %s", s.opts.Name, wait)
			if last := s.log.lastError(); last != "" {
				msg += " (last error: " + last + ")"
			}
			return errors.New(msg)
		}
	}
}

// invalid says what is wrong with o's listeners, cluster and JetStream
// settings ("" when nothing is).
func (o ServerOptions) invalid() string {
	clustered := o.ClusterName != ""
	if !clustered && (o.ClusterPort != 0 || len(o.Routes) > 0 || o.ClusterHost != "") {
		return "cluster host, port or routes given without ClusterName"
	}
	if clustered && o.InProcessOnly {
		return "InProcessOnly (no listener) cannot be used with a cluster"
	}
	if clustered && o.ClusterPort == 0 {
		return fmt.Sprintf("cluster %q needs a ClusterPort (-1 for a random port)", o.ClusterName)
	}
	if clustered && o.JetStream && o.Name == "" {
		return "clustered JetStream needs a unique server Name"
	}
	if o.JetStream && o.StoreDir == "" {
		return "JetStream needs a StoreDir"
	}
	if o.Port < -1 || o.Port > 65535 || o.ClusterPort < -1 || o.ClusterPort > 65535 {
		return fmt.Sprintf("port %d / cluster port %d out of range (-1 = random)", o.Port, o.ClusterPort)
	}
	if o.HTTPPort < -1 || o.HTTPPort > 65535 {
		return fmt.Sprintf("monitoring port %d out of range (-1 = random)", o.HTTPPort)
	}
	return ""
}

// natsOptions checks o and translates it to nats-server options.
func (o ServerOptions) natsOptions() (*server.Options, error) {
	fail := func(format string, args ...any) (*server.Options, error) {
		return nil, fmt.Errorf("bus: server %q: %s", o.Name, fmt.Sprintf(format, args...))
	}
	if msg := o.invalid(); msg != "" {
		return fail("%s", msg)
	}
	clustered := o.ClusterName != ""
	n := &server.Options{
		ServerName:         o.Name,
		Host:               o.Host,
		Port:               o.Port,
		DontListen:         o.InProcessOnly,
		HTTPHost:           o.HTTPHost,
		HTTPPort:           o.HTTPPort,
		NoSigs:             true,
		MaxPayload:         o.MaxPayload,
		JetStream:          o.JetStream,
		StoreDir:           o.StoreDir,
		JetStreamMaxMemory: o.MaxMemory,
		JetStreamMaxStore:  o.MaxStore,
		SyncAlways:         o.SyncAlways,
		SyncInterval:       o.SyncInterval,
	}
	if n.MaxPayload <= 0 {
		n.MaxPayload = bus.DefaultMaxPayload
	}
	if n.JetStreamMaxMemory <= 0 {
		n.JetStreamMaxMemory = DefaultJetStreamMaxMemory
	}
	if n.JetStreamMaxStore <= 0 {
		n.JetStreamMaxStore = DefaultJetStreamMaxStore
	}
	n.ClientAdvertise = o.ClientAdvertise
	if clustered {
		n.Cluster.Name = o.ClusterName
		n.Cluster.Host = o.ClusterHost
		n.Cluster.Port = o.ClusterPort
		n.Cluster.Advertise = o.ClusterAdvertise
		for _, r := range o.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" || u.Port() == "" {
				return fail("route %q is not a URL like nats-route://host:port", r)
			}
			n.Routes = append(n.Routes, u)
		}
	}
	if err := o.Security.apply(n); err != nil {
		return fail("%v", err)
	}
	return n, nil
}

// NATS returns the underlying nats-server, for what this package does not wrap.
func (s *Server) NATS() *server.Server { return s.ns }

// Interest reports whether any client of the cluster (this server's or,
// through routes, another's) subscribes to subject. raidq uses one NATS
// account, so the global account's subscriptions are all of them.
func (s *Server) Interest(subject string) bool {
	return s.ns.GlobalAccount().SubscriptionInterest(subject)
}

// Options returns the options the server was started with.
func (s *Server) Options() ServerOptions { return s.opts }

// MaxPayload returns the server's max payload, the input of bus.ScanPageBudget.
func (s *Server) MaxPayload() int {
	if s.opts.MaxPayload <= 0 {
		return bus.DefaultMaxPayload
	}
	return int(s.opts.MaxPayload)
}

// ClientURL returns the URL clients connect to (nats://host:port, with the
// actual port when Port was -1). An unspecified listen host (all
// interfaces) is reported as the loopback address so that the URL is
// connectable from this machine. It is "" for an InProcessOnly server.
func (s *Server) ClientURL() string {
	if s.opts.InProcessOnly {
		return ""
	}
	a, ok := s.ns.Addr().(*net.TCPAddr)
	if !ok || a == nil {
		return s.ns.ClientURL()
	}
	return "nats://" + hostPort(s.opts.Host, a)
}

// ClusterURL returns this server's route URL (nats-route://host:port, with
// the actual port when ClusterPort was -1), for the Routes of other
// servers; "" when the server is not clustered.
func (s *Server) ClusterURL() string {
	a := s.ns.ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats-route://" + hostPort(s.opts.ClusterHost, a)
}

// hostPort formats a listen address as a connectable host:port: an
// unspecified address becomes the loopback of its family (an IPv4 wildcard
// listener may report itself as "::", so configured hosts decide).
func hostPort(configured string, a *net.TCPAddr) string {
	host := a.IP.String()
	if a.IP == nil || a.IP.IsUnspecified() {
		host = "127.0.0.1"
		if ip := net.ParseIP(configured); ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// Connect opens a client connection named name (ClientOptions says how).
func (s *Server) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	addr, all := s.ClientOptions(name)
	nc, err := nats.Connect(addr, append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect %q to server %q: %w", name, s.opts.Name, err)
	}
	return nc, nil
}

// ClientOptions are the URL and options of a connection named name to
// this server: in process when the server is InProcessOnly or requires
// TLS (URL ""), else to ClientURL; with Security's authentication, as
// the process's internal node identity. Options given after them may
// override them.
func (s *Server) ClientOptions(name string) (string, []nats.Option) {
	all := []nats.Option{nats.Name(name)}
	all = append(all, s.opts.Security.ConnectOptions(s.opts.Logger)...)
	if s.opts.InProcessOnly || (s.opts.Security != nil && s.opts.Security.TLS != nil) {
		return "", append(all, nats.InProcessServer(s.ns))
	}
	return s.ClientURL(), all
}

// Shutdown stops the server and waits until it has stopped. It is safe to
// call more than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

// slogAdapter routes nats-server's Logger calls to slog and remembers the
// last error or fatal line for StartServer's errors.
type slogAdapter struct {
	l *slog.Logger // nil: discard

	mu       sync.Mutex
	last     string // last error or fatal line
	fatalMsg string // first fatal line

	refusals refusalCounts // auth_refusals.go
	routes   routeLog      // route_log.go
	now      func() time.Time
}

var _ server.Logger = (*slogAdapter)(nil)

func newSlogAdapter(l *slog.Logger) *slogAdapter { return &slogAdapter{l: l, now: time.Now} }

// logLine writes a line routeLog decided on.
func (a *slogAdapter) logLine(line *routeLine) {
	if line != nil && a.enabled(line.level) {
		a.l.Log(context.Background(), line.level, line.msg, line.attrs...)
	}
}

func (a *slogAdapter) enabled(level slog.Level) bool {
	return a.l != nil && a.l.Enabled(context.Background(), level)
}

func (a *slogAdapter) log(level slog.Level, format string, v []any) {
	if a.enabled(level) {
		a.l.Log(context.Background(), level, fmt.Sprintf(format, v...))
	}
}

func (a *slogAdapter) remember(format string, v []any) {
	msg := fmt.Sprintf(format, v...)
	a.mu.Lock()
	a.last = msg
	a.mu.Unlock()
}

func (a *slogAdapter) fatal() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fatalMsg
}

func (a *slogAdapter) lastError() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// Noticef logs at Info, and says so when a route to a peer that was down
// is back (route_log.go).
func (a *slogAdapter) Noticef(format string, v ...any) {
	a.log(slog.LevelInfo, format, v)
	if strings.Contains(format, "Route connection created") && a.routes.anyDown() {
		msg, now := fmt.Sprintf(format, v...), a.now()
		go a.logLine(a.routes.created(now, msg, lookupHostAddrs)) // may resolve a host name
	}
}

// Warnf logs at Warn.
func (a *slogAdapter) Warnf(format string, v ...any) { a.log(slog.LevelWarn, format, v) }

// Fatalf logs at Error with fatal=true; it does not exit the process (an
// embedded server must not kill its host), StartServer reports it instead.
func (a *slogAdapter) Fatalf(format string, v ...any) {
	a.remember(format, v)
	a.mu.Lock()
	if a.fatalMsg == "" {
		a.fatalMsg = fmt.Sprintf(format, v...)
	}
	a.mu.Unlock()
	if a.enabled(slog.LevelError) {
		a.l.Log(context.Background(), slog.LevelError, fmt.Sprintf(format, v...), "fatal", true)
	}
}

// Errorf logs at Error; the repeated dial errors of a route to a peer
// that is down are folded (route_log.go).
func (a *slogAdapter) Errorf(format string, v ...any) {
	if format == routeConnErrFormat {
		if line, handled := a.routes.failed(a.now(), v); handled {
			a.logLine(line)
			return
		}
	}
	a.remember(format, v)
	a.countRefusal(format, v) // auth_refusals.go
	a.log(slog.LevelError, format, v)
}

// Debugf logs at Debug.
func (a *slogAdapter) Debugf(format string, v ...any) { a.log(slog.LevelDebug, format, v) }

// Tracef logs at LevelTrace.
func (a *slogAdapter) Tracef(format string, v ...any) { a.log(LevelTrace, format, v) }
