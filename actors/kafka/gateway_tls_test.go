package kafka_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/raidq/raidq/actors/kafka"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestKgoTLSAndSASL: over TLS, a producer of the topic produces, a
// consumer of it reads but may not produce, and a wrong password is
// refused.
func TestKgoTLSAndSASL(t *testing.T) {
	dir := t.TempDir()
	b, _, err := natsserver.EnsureDevTLS(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(b.Cert, b.Key)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := natsserver.ParseAuthConfig([]byte(`users: [
  {user: shop, password: shoppw, producer: [orders]}
  {user: bill, password: billpw, consumer: [orders], groups: [billing]}
]`))
	if err != nil {
		t.Fatal(err)
	}
	users, err := kafka.NewUsers(auth)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), NoSync: true, Logger: testkit.Logger(t, slog.LevelInfo),
		Kafka: &server.KafkaOptions{Listen: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, Users: users}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	if err := lc.CreateTopic("orders", 1, quorum.Default()); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(b.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := func(user, pass string, opts ...kgo.Opt) *kgo.Client {
		return kgoClient(t, lc.Kafka().Advertised(), append(opts, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}),
			kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()), kgo.RecordRetries(2))...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := client("shop", "shoppw").ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("paid")}).FirstErr(); err != nil {
		t.Fatalf("producer of orders: %v", err)
	}
	err = client("bill", "billpw").ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("forged")}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a consumer producing: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	cons := client("bill", "billpw", kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("billing"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := cons.PollFetches(ctx)
	if errs := fs.Errors(); len(errs) > 0 {
		t.Fatalf("consumer: %v", errs)
	}
	if fs.NumRecords() != 1 || string(fs.Records()[0].Value) != "paid" {
		t.Fatalf("consumer read %d records, want the one produced", fs.NumRecords())
	}
	bad := client("bill", "wrong")
	if err := bad.Ping(ctx); err == nil {
		t.Fatal("a wrong password was accepted")
	}
}
