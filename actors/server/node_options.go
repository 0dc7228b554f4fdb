package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/actors/node"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/natsserver"
)

// NodeOptions configure one production storage node (`raidq node`): its
// slot store, its NATS server (embedded, or an existing NATS system), its
// metadata and its heartbeat.
type NodeOptions struct {
	// ID names the node (required; a NATS subject token). With an embedded
	// server it is also the NATS server name, unique in the NATS cluster.
	ID string
	// DataDir holds the slot store (DataDir/slots) and, with an embedded
	// server, JetStream's files (DataDir/nats/jetstream). Required.
	DataDir string
	// Cluster is the raidq cluster name (subject token, metadata bucket
	// names, and the NATS cluster name of an embedded server). Default "raidq".
	Cluster string

	// Listen is the embedded server's client address, host:port (default
	// 127.0.0.1:4222; port -1 picks a free port).
	Listen string
	// ClusterListen is the embedded server's route address, host:port;
	// empty runs a single server. Routes are the route URLs
	// (nats-route://host:port) of every server of the NATS cluster; give
	// the full list on every server (this server's own URL is fine), since
	// clustered JetStream sizes its meta group from it.
	ClusterListen string
	Routes        []string
	// ClusterAdvertise and ClientAdvertise are the route and client
	// addresses (host:port) the server tells peers and clients to dial
	// (natsserver.ServerOptions); empty: its interfaces' addresses.
	ClusterAdvertise string
	ClientAdvertise  string
	// JetStreamMaxMemory and JetStreamMaxStore bound the embedded server's
	// JetStream (default 64 MiB and 1 GiB: it only holds metadata).
	JetStreamMaxMemory int64
	JetStreamMaxStore  int64
	// HTTPListen serves the embedded server's NATS monitoring endpoints
	// (/varz, /jsz, /connz, /routez, /healthz, ...) on host:port, without
	// authentication (natsserver.ServerOptions.HTTPHost); "" none.
	HTTPListen string

	// NATSURL joins an existing NATS system (JetStream enabled) instead of
	// embedding a server; Listen, ClusterListen and Routes must be empty.
	NATSURL string
	// NATSOptions are extra nats.Connect options (credentials, TLS) for NATSURL.
	NATSOptions []nats.Option

	// NoSync acknowledges writes before fsync (--no-fsync).
	NoSync bool
	// ClockBound: the node refuses writes (CLOCK_OFF) while its clock is
	// further than this from its peers' median (0: 1s; negative: never).
	ClockBound time.Duration
	// DiskWatermark is the share of the data file system in use past which
	// the node reports disk pressure in status, metrics and its log
	// (0: bus.DefaultDiskWatermark, 90%; --disk-watermark).
	DiskWatermark float64
	// ReplyDelay makes the node answer every request this late: a slow
	// node for failure drills (hidden flag --reply-delay). Zero: none.
	ReplyDelay time.Duration
	// ClockFault lets failure drills offset the node's clock at run time
	// (hidden flag --clock-fault; clock_fault.go): the node's clock is
	// Now plus an offset set on raidq.<cluster>.fault.clock.<id>, and it
	// checks its clock against its peers' every second. Off: the node
	// does not subscribe to that subject.
	ClockFault bool
	// Insecure allows a node without authentication (ErrNoAuth otherwise).
	Insecure bool
	// Auth turns on authentication and subject permissions on the
	// embedded server (the users of an auth file, --auth; see
	// node_security.go and docs/security.md); the node then starts without
	// Insecure. TLS makes the client port require TLS and the route port
	// mutual TLS (--tls-cert, --tls-key, --tls-ca).
	Auth *natsserver.AuthConfig
	TLS  *natsserver.TLSFiles
	// NATSAuthenticated says NATSOptions carry credentials for NATSURL:
	// the node then starts without Insecure.
	NATSAuthenticated bool

	// MetaReplicas is the replica count of the metadata buckets; 0 means
	// min(5, servers): the servers of Routes for an embedded server, the
	// servers the NATS connection knows of otherwise.
	MetaReplicas int
	// MetaTimeout bounds the wait for JetStream (meta leader, enough
	// servers for the replicas) at start (default 60s).
	MetaTimeout time.Duration
	// Heartbeat is how often the member record is refreshed (default 2s).
	Heartbeat time.Duration

	// Repair tunes the node's repair, scrub and retention loops (zero
	// value: the defaults of node.RepairConfig; flags --repair-rate,
	// --repair-interval, --scrub-interval, --scrub-rate).
	Repair node.RepairConfig

	// Replace is the id of a dead node whose ensemble positions this node
	// takes over (--replace OLD_ID): at start, every topic's ensembles get
	// this node in OLD_ID's place (metadata only, no data moves) and repair
	// refills the positions. The data directory must be newer than those
	// topics (normally empty: a new incarnation), and OLD_ID's heartbeat
	// must have been silent for meta.ReplaceQuiet.
	Replace string

	// Kafka, when set, runs a Kafka protocol gateway in the node
	// (--kafka-listen; docs/kafka.md), over the node's NATS connection.
	Kafka *KafkaOptions

	// Metrics receives the node's Prometheus metrics (nil: none).
	Metrics *prometheus.Registry

	// Logger receives the node's logs (nil: slog.Default()).
	Logger *slog.Logger
	// Now is the node clock (unix ns) for the node and its heartbeat; nil = time.Now.
	Now func() int64
}

// ErrBadOptions is wrapped by every refusal of NodeOptions that
// StartNode makes before starting anything (a missing id, a bad address,
// no authentication configured...): the caller's configuration is wrong.
var ErrBadOptions = errors.New("bad node options")

// badOptions wraps a refusal of check with ErrBadOptions, keeping its message.
type badOptions struct{ err error }

func (b badOptions) Error() string   { return b.err.Error() }
func (b badOptions) Unwrap() []error { return []error{b.err, ErrBadOptions} }

// check fills in defaults and refuses options that cannot be meant.
func (o *NodeOptions) check() error {
	o.defaults()
	if err := o.checkNames(); err != nil {
		return err
	}
	if o.MetaReplicas < 0 || o.MetaReplicas > MaxMetaReplicas {
		return fmt.Errorf("node: metadata replicas %d: must be 1..%d (0 = automatic)", o.MetaReplicas, MaxMetaReplicas)
	}
	if err := o.checkListen(); err != nil {
		return err
	}
	if err := checkRepair(o.Repair); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if o.DiskWatermark < 0 || o.DiskWatermark >= 1 {
		return fmt.Errorf("node: disk watermark %g%%: must be above 0 and below 100", 100*o.DiskWatermark)
	}
	return o.checkSecurity() // node_security.go
}

// defaults sets every unset option that has a default.
func (o *NodeOptions) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Cluster == "" {
		o.Cluster = DefaultCluster
	}
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixNano() }
	}
	if o.MetaTimeout <= 0 {
		o.MetaTimeout = DefaultMetaTimeout
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.JetStreamMaxMemory <= 0 {
		o.JetStreamMaxMemory = DefaultNodeJSMaxMemory
	}
	if o.JetStreamMaxStore <= 0 {
		o.JetStreamMaxStore = DefaultNodeJSMaxStore
	}
}

// checkNames checks the node id, the cluster name, the data directory and
// the node being replaced.
func (o *NodeOptions) checkNames() error {
	if o.ID == "" {
		return errors.New("node: an id is required (--id)")
	}
	if err := bus.ValidName("node id", o.ID); err != nil {
		return fmt.Errorf("node: --id: %w", err)
	}
	if err := bus.ValidName("cluster", o.Cluster); err != nil {
		return fmt.Errorf("node: --cluster: %w", err)
	}
	if o.DataDir == "" {
		return errors.New("node: a data directory is required (--data)")
	}
	if o.Replace != "" {
		if err := bus.ValidName("node id", o.Replace); err != nil {
			return fmt.Errorf("node: --replace: %w", err)
		}
		if o.Replace == o.ID {
			return fmt.Errorf("node: --replace %s: a node cannot replace itself", o.Replace)
		}
	}
	return nil
}

// checkListen checks how the node reaches NATS: an existing system
// (--nats) or its own embedded server's client and route addresses.
func (o *NodeOptions) checkListen() error {
	if o.NATSURL != "" {
		if o.Listen != "" || o.ClusterListen != "" || len(o.Routes) > 0 || o.HTTPListen != "" {
			return errors.New("node: --nats joins an existing NATS system; it cannot be combined with --listen, --cluster-listen, --routes or --http-listen")
		}
		return nil
	}
	if _, _, err := natsserver.SplitMonitorListen(o.HTTPListen); err != nil {
		return fmt.Errorf("node: --http-listen: %w", err)
	}
	if o.Listen == "" {
		o.Listen = DefaultNodeListen
	}
	if _, _, err := splitHostPort(o.Listen); err != nil {
		return fmt.Errorf("node: --listen: %w", err)
	}
	if o.ClusterListen != "" {
		if _, p, err := splitHostPort(o.ClusterListen); err != nil {
			return fmt.Errorf("node: --cluster-listen: %w", err)
		} else if p == 0 {
			return fmt.Errorf("node: --cluster-listen %q: a port is required", o.ClusterListen)
		}
	} else if len(o.Routes) > 0 {
		return errors.New("node: --routes needs --cluster-listen (the address other servers route to)")
	}
	for _, r := range o.Routes {
		if _, err := routeHostPort(r); err != nil {
			return fmt.Errorf("node: --routes: %w", err)
		}
	}
	return nil
}

// checkRepair refuses repair settings that cannot be meant.
func checkRepair(r node.RepairConfig) error {
	switch {
	case r.RateMBps < 0 || r.RateMBps > 10000:
		return fmt.Errorf("--repair-rate %g MB/s: must be 0 (default 20) to 10000", r.RateMBps)
	case r.ScrubRateMBps < 0 || r.ScrubRateMBps > 10000:
		return fmt.Errorf("--scrub-rate %g MB/s: must be 0 (default 10) to 10000", r.ScrubRateMBps)
	case r.Interval < 0 || (r.Interval > 0 && r.Interval < 100*time.Millisecond):
		return fmt.Errorf("--repair-interval %s: must be at least 100ms (0: default 10s)", r.Interval)
	case r.ScrubInterval > 0 && r.ScrubInterval < time.Second:
		return fmt.Errorf("--scrub-interval %s: must be at least 1s (0: default 1h; negative: no scrub)", r.ScrubInterval)
	}
	return nil
}

// routeHostPort returns the host:port of a route URL.
func routeHostPort(r string) (string, error) {
	u, err := url.Parse(r)
	if err != nil || u.Host == "" || u.Port() == "" {
		return "", fmt.Errorf("route %q is not a URL like nats-route://host:port", r)
	}
	return u.Host, nil
}

// routeServers counts the servers of a NATS cluster from this server's
// route address and its route list, which may or may not include this
// server. A route with this server's port is taken to be this server (or,
// on hosts that all use one port, means the list is full); without one,
// this server is added. It can undercount by one (a list of the others
// only, all on this port), never overcount: replicas above the number of
// servers could never be placed.
func routeServers(clusterListen string, routes []string) int {
	if clusterListen == "" {
		return 1
	}
	_, selfPort, _ := splitHostPort(clusterListen)
	seen := make(map[string]bool)
	listed := false
	for _, r := range routes {
		hp, err := routeHostPort(r)
		if err != nil {
			continue
		}
		h, p, _ := net.SplitHostPort(hp)
		if h == "localhost" {
			h = "127.0.0.1"
		}
		seen[net.JoinHostPort(h, p)] = true
		if p == strconv.Itoa(selfPort) {
			listed = true
		}
	}
	if !listed {
		return len(seen) + 1
	}
	return max(1, len(seen))
}
