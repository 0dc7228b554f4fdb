package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/meta"
)

// kafkaFlags are the Kafka gateway's flags of `raidq node` and `raidq
// dev` (prefix "kafka-") and of `raidq kafka` (no prefix).
type kafkaFlags struct {
	listen, advertise, id string
	brokerID              int32
	tlsCert, tlsKey       string
	users                 string // auth file whose users SASL authenticates (node/dev: --auth's by default)
	metrics               string // raidq kafka --metrics
}

func (k *kafkaFlags) register(f *pflag.FlagSet, prefix string) {
	f.StringVar(&k.listen, prefix+"listen", "", "serve the Kafka protocol on this host:port (e.g. 127.0.0.1:9092; docs/kafka.md)")
	f.StringVar(&k.advertise, prefix+"advertise", "", "host:port given to Kafka clients (default: the listen address)")
	f.Int32Var(&k.brokerID, prefix+"broker-id", -1, "Kafka broker id (-1: derived from the gateway id)")
	// The TLS flags keep their prefix on `raidq kafka` too: --tls-cert and
	// --tls-key there are the NATS client's.
	f.StringVar(&k.tlsCert, "kafka-tls-cert", "", "TLS certificate (PEM) for the Kafka port")
	f.StringVar(&k.tlsKey, "kafka-tls-key", "", "TLS key (PEM) for the Kafka port")
	f.StringVar(&k.users, prefix+"auth", "", "auth file of the Kafka users (SASL PLAIN; default: --auth's file)")
}

// options turns the flags into gateway options (nil without a listener).
func (k *kafkaFlags) options(authFile string) (*server.KafkaOptions, error) {
	if k.listen == "" {
		if k.advertise != "" || k.tlsCert != "" || k.users != "" {
			return nil, fmt.Errorf("the Kafka gateway flags need --kafka-listen")
		}
		return nil, nil
	}
	o := &server.KafkaOptions{Listen: k.listen, Advertise: k.advertise, ID: k.id, BrokerID: k.brokerID}
	if (k.tlsCert == "") != (k.tlsKey == "") {
		return nil, fmt.Errorf("the Kafka port's TLS needs both a certificate and a key")
	}
	if k.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(k.tlsCert, k.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("Kafka TLS: %w", err)
		}
		o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	file := k.users
	if file == "" {
		file = authFile
	}
	if file != "" {
		u, err := loadKafkaUsers(file)
		if err != nil {
			return nil, err
		}
		o.Users = u
	}
	return o, nil
}

// kafkaCmd is `raidq kafka`: a stateless gateway that joins a cluster as
// a client.
func kafkaCmd() *cobra.Command {
	var cf clientFlags
	var k kafkaFlags
	var logLevel string
	cmd := &cobra.Command{
		Use:   "kafka",
		Short: "Run a stateless Kafka protocol gateway in front of a cluster",
		Long: `kafka serves the Kafka protocol for an existing raidq cluster, as a client
of it: it stores nothing, so gateways scale apart from the storage nodes and
any number may run. Every gateway tells clients it leads every partition;
give clients several gateways as bootstrap servers and losing one costs
them one address. Consumer groups are coordinated by whichever live gateway
ranks first for the group, with their state in the cluster metadata.

Kafka users authenticate with SASL PLAIN against --auth (the raidq auth
file; their producer/consumer topic roles apply) and the gateway reaches
NATS with its own identity (--user of a user with the gateway role, or
--creds). See docs/kafka.md.`,
		Example: `  raidq kafka --nats nats://h1:4222,nats://h2:4222 --listen 0.0.0.0:9092 \
    --advertise kafka1.example.com:9092 --id kafka1 --user gw1 --password "$GW1_PASSWORD" --auth auth.conf \
    --kafka-tls-cert kafka1.pem --kafka-tls-key kafka1-key.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runKafka(&cf, &k, logLevel) },
	}
	cf.register(cmd)
	f := cmd.Flags()
	k.register(f, "")
	f.StringVar(&k.id, "id", "", "gateway id: stable across restarts, unique in the cluster (default: the hostname and port)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error (text on stderr)")
	f.StringVar(&k.metrics, "metrics", "", "serve Prometheus metrics (raidq_kafka_*, the client's) and /healthz on this address (host:port)")
	return cmd
}

func runKafka(cf *clientFlags, k *kafkaFlags, logLevel string) error {
	log, err := newLogger(logLevel)
	if err != nil {
		return err
	}
	if k.listen == "" {
		return usageErr(fmt.Errorf("--listen is required (e.g. 127.0.0.1:9092)"))
	}
	if k.id == "" {
		host, _ := os.Hostname()
		k.id = sanitizeID(host + "-" + portOf(k.listen))
	}
	o, err := k.options("")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reg, stopMetrics, err := serveMetrics(k.metrics)
	if err != nil {
		return err
	}
	defer stopMetrics()
	o.Metrics, cf.metrics = reg, reg
	c, err := cf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	store, err := meta.Open(sctx, c.Conn(), cf.cluster, meta.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("kafka gateway: cluster metadata: %w", err)
	}
	gw, err := server.StartGateway(sctx, c, store, cf.cluster, *o, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "kafka gateway %s listening on %s (clients told %s, broker id %d)\n", k.id, gw.Addr(), gw.Advertised(), gw.BrokerID())
	<-ctx.Done()
	log.Info("kafka gateway: stopping")
	return gw.Close()
}

// sanitizeID keeps the characters a gateway id may hold.
func sanitizeID(s string) string {
	out := []byte(s)
	for i, c := range out {
		ok := c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok {
			out[i] = '-'
		}
	}
	return string(out)
}

func portOf(hostport string) string {
	for i := len(hostport) - 1; i >= 0; i-- {
		if hostport[i] == ':' {
			return hostport[i+1:]
		}
	}
	return hostport
}
