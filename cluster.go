package raidq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/slotstore"
)

// LocalClusterConfig configures an in-process cluster: one embedded NATS
// server and n storage nodes, each with its own LevelDB under Dir.
type LocalClusterConfig struct {
	Dir     string // data directory (required); node i uses Dir/node-i
	Nodes   int    // default 6
	Cluster string // default "local"
	// Listen is the NATS client address ("127.0.0.1:4222"); empty means
	// in-process only (no port opened).
	Listen string
	NoSync bool // --no-fsync: acknowledged writes may be lost on power failure
	Logger *slog.Logger
	// SlowNodes answer every request SlowDelay late.
	SlowNodes []int
	SlowDelay time.Duration
}

// LocalCluster is an in-process raidq cluster (demo, dev, tests).
type LocalCluster struct {
	cfg     LocalClusterConfig
	server  *bus.Server
	catalog *actors.StaticCatalog
	mu      sync.Mutex
	nodes   []*localNode
}

type localNode struct {
	id    string
	dir   string
	nc    *nats.Conn
	store slotstore.Store
	node  *actors.Node
	slow  time.Duration
}

// StartLocalCluster starts the server and every node.
func StartLocalCluster(cfg LocalClusterConfig) (*LocalCluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("local cluster: Dir is required")
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 6
	}
	if cfg.Nodes < 2 || cfg.Nodes > 64 {
		return nil, fmt.Errorf("local cluster: %d nodes, want 2..64", cfg.Nodes)
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "local"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	so := bus.ServerOptions{Name: "raidq-" + cfg.Cluster, InProcessOnly: cfg.Listen == "", Logger: nil}
	if cfg.Listen != "" {
		host, port, err := splitHostPort(cfg.Listen)
		if err != nil {
			return nil, err
		}
		so.Host, so.Port = host, port
	}
	srv, err := bus.StartServer(so)
	if err != nil {
		return nil, fmt.Errorf("local cluster: start NATS: %w", err)
	}
	lc := &LocalCluster{cfg: cfg, server: srv, catalog: actors.NewStaticCatalog()}
	for i := 0; i < cfg.Nodes; i++ {
		ln := &localNode{id: fmt.Sprintf("n%d", i), dir: filepath.Join(cfg.Dir, fmt.Sprintf("node-%d", i))}
		for _, s := range cfg.SlowNodes {
			if s == i {
				ln.slow = cfg.SlowDelay
			}
		}
		lc.nodes = append(lc.nodes, ln)
		if err := lc.startNode(ln); err != nil {
			lc.Close()
			return nil, err
		}
	}
	return lc, nil
}

func (lc *LocalCluster) startNode(ln *localNode) error {
	log := lc.cfg.Logger.With("node", ln.id)
	st, err := slotstore.Open(ln.dir, slotstore.Options{NoSync: lc.cfg.NoSync, Logger: log})
	if err != nil {
		return fmt.Errorf("node %s: %w", ln.id, err)
	}
	nc, err := lc.server.Connect("raidq-node-" + ln.id)
	if err != nil {
		_ = st.Close()
		return fmt.Errorf("node %s: connect: %w", ln.id, err)
	}
	n, err := actors.StartNode(actors.NodeConfig{ID: ln.id, Cluster: lc.cfg.Cluster, Store: st, Conn: nc,
		Catalog: lc.catalog, Logger: lc.cfg.Logger, ReplyDelay: ln.slow})
	if err != nil {
		nc.Close()
		_ = st.Close()
		return err
	}
	ln.store, ln.nc, ln.node = st, nc, n
	return nil
}

// NodeIDs lists the node ids in order.
func (lc *LocalCluster) NodeIDs() []string {
	ids := make([]string, len(lc.nodes))
	for i, n := range lc.nodes {
		ids[i] = n.id
	}
	return ids
}

// Catalog is the cluster's topic catalog (shared by nodes and clients).
func (lc *LocalCluster) Catalog() *actors.StaticCatalog { return lc.catalog }

// ClientURL is the NATS URL clients use (empty when in-process only).
func (lc *LocalCluster) ClientURL() string {
	if lc.cfg.Listen == "" {
		return ""
	}
	return lc.server.ClientURL()
}

// CreateTopic creates a topic whose ensembles are drawn from the nodes.
func (lc *LocalCluster) CreateTopic(name string, partitions int, p Params) error {
	if err := bus.ValidName("topic", name); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	ens, err := actors.Ensembles(name, partitions, p.N, lc.NodeIDs())
	if err != nil {
		return err
	}
	return lc.catalog.Put(&actors.Topic{Name: name, Partitions: partitions, Params: p, Ensembles: ens, Created: uint64(time.Now().UnixNano())})
}

// Connect returns a client connected in-process.
func (lc *LocalCluster) Connect(opts ...Option) (*Client, error) {
	nc, err := lc.server.Connect("raidq-client")
	if err != nil {
		return nil, err
	}
	opts = append([]Option{WithCluster(lc.cfg.Cluster), WithCatalog(lc.catalog), WithLogger(lc.cfg.Logger)}, opts...)
	c, err := ConnectConn(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownNC = true
	return c, nil
}

// KillNode stops node i abruptly (it stops answering at once; what it
// synced stays on disk).
func (lc *LocalCluster) KillNode(i int) error {
	ln, err := lc.node(i)
	if err != nil || ln.node == nil {
		return err
	}
	ln.node.Kill()
	ln.nc.Close()
	_ = ln.store.Close()
	ln.node = nil
	return nil
}

// RestartNode starts a stopped node again on its data directory.
func (lc *LocalCluster) RestartNode(i int) error {
	ln, err := lc.node(i)
	if err != nil {
		return err
	}
	if ln.node != nil {
		return fmt.Errorf("node %s is running", ln.id)
	}
	return lc.startNode(ln)
}

func (lc *LocalCluster) node(i int) (*localNode, error) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if i < 0 || i >= len(lc.nodes) {
		return nil, fmt.Errorf("no node %d (cluster has %d)", i, len(lc.nodes))
	}
	return lc.nodes[i], nil
}

// NodeStats returns node i's counters (nil if stopped).
func (lc *LocalCluster) NodeStats(i int) *actors.NodeStats {
	ln, err := lc.node(i)
	if err != nil || ln.node == nil {
		return nil
	}
	return ln.node.Stats()
}

// DiskBytes sums the size of every node's data directory.
func (lc *LocalCluster) DiskBytes() int64 {
	var total int64
	_ = filepath.Walk(lc.cfg.Dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			total += info.Size()
		}
		return nil
	})
	return total
}

// Close stops every node gracefully and the server.
func (lc *LocalCluster) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ln := range lc.nodes {
		if ln.node != nil {
			_ = ln.node.Stop(ctx)
			ln.nc.Close()
			_ = ln.store.Close()
			ln.node = nil
		}
	}
	lc.server.Shutdown()
}
