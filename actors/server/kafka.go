package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/kafka"
	"github.com/raidq/raidq/bus/meta"
)

// KafkaOptions start a Kafka protocol gateway (docs/kafka.md) beside a
// node (`raidq node --kafka-listen`), a local cluster (`raidq dev
// --kafka-listen`) or alone (`raidq kafka`, StartGateway).
type KafkaOptions struct {
	// Listen is the Kafka listener's host:port (required).
	Listen string
	// Advertise is the host:port given to clients (default: Listen's,
	// with 127.0.0.1 for 0.0.0.0).
	Advertise string
	// ID names the gateway (default: the node's id); BrokerID is its Kafka
	// broker id (< 0 or unset with ID: derived from ID).
	ID       string
	BrokerID int32
	// TLS makes the Kafka port speak TLS.
	TLS *tls.Config
	// Users authenticates Kafka clients with SASL PLAIN and enforces
	// their topic roles (nil: no authentication).
	Users kafka.Authorizer
	// Metrics receives the gateway's raidq_kafka_* metrics (default: the
	// node's or local cluster's registry; nil: none).
	Metrics *prometheus.Registry
}

// Gateway is a running Kafka gateway and the client it reads and writes
// through.
type Gateway struct {
	gw     *kafka.Gateway
	client *raidq.Client
	own    bool // client made here, closed with the gateway
}

// Addr is the gateway's listening address; Advertised what clients are told.
func (g *Gateway) Addr() string       { return g.gw.Addr().String() }
func (g *Gateway) Advertised() string { return g.gw.Advertised() }

// BrokerID is the gateway's Kafka broker id.
func (g *Gateway) BrokerID() int32 { return g.gw.BrokerID() }

// Close stops the gateway (and the client it made).
func (g *Gateway) Close() error {
	err := g.gw.Close()
	if g.own {
		err = errors.Join(err, g.client.Close())
	}
	return err
}

// StartGateway starts a Kafka gateway over client (which it does not
// close) and the cluster metadata store.
func StartGateway(ctx context.Context, client *raidq.Client, store *meta.Store, cluster string, o KafkaOptions, log *slog.Logger) (*Gateway, error) {
	if o.Listen == "" {
		return nil, fmt.Errorf("%w: no listen address", kafka.ErrConfig)
	}
	if o.ID == "" {
		return nil, fmt.Errorf("%w: no gateway id", kafka.ErrConfig)
	}
	if o.BrokerID == 0 {
		o.BrokerID = -1
	}
	gw, err := kafka.Start(ctx, kafka.Config{Client: client, Meta: store, Cluster: cluster, Listen: o.Listen,
		Advertise: o.Advertise, ID: o.ID, BrokerID: o.BrokerID, TLS: o.TLS, Users: o.Users, Logger: log, Metrics: registerer(o.Metrics)})
	if err != nil {
		return nil, err
	}
	return &Gateway{gw: gw, client: client}, nil
}

// registerer is reg as a Registerer, nil (no metrics) for a nil registry.
func registerer(reg *prometheus.Registry) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return reg
}

// startKafka starts the node's gateway (NodeOptions.Kafka) over a client
// on the node's own connection.
func (n *Node) startKafka(ctx context.Context) error {
	ko := n.opts.Kafka
	if ko == nil {
		return nil
	}
	if ko.ID == "" {
		ko.ID = n.opts.ID
	}
	if ko.Metrics == nil {
		ko.Metrics = n.opts.Metrics
	}
	c, err := raidq.ConnectConn(n.nc, raidq.WithCluster(n.opts.Cluster), raidq.WithLogger(n.opts.Logger),
		raidq.WithName("raidq-kafka-"+ko.ID))
	if err != nil {
		return fmt.Errorf("kafka gateway: %w", err)
	}
	gw, err := StartGateway(ctx, c, n.meta, n.opts.Cluster, *ko, n.opts.Logger)
	if err != nil {
		_ = c.Close()
		return err
	}
	gw.own = true
	n.kafka = gw
	return nil
}
