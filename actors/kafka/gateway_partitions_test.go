package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/raidq/raidq/actors/kafka"
	"github.com/raidq/raidq/bus/natsserver"
)

// createPartitions sends one CreatePartitions request for orders and
// returns its error code.
func createPartitions(ctx context.Context, t *testing.T, cl *kgo.Client, count int32, validateOnly bool, assign bool) int16 {
	t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.ValidateOnly, req.TimeoutMillis = validateOnly, 10000
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = "orders", count
	if assign {
		a := kmsg.NewCreatePartitionsRequestTopicAssignment()
		a.Replicas = []int32{1}
		rt.Assignment = append(rt.Assignment, a)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("CreatePartitions: %v", err)
	}
	return resp.Topics[0].ErrorCode
}

// partitionsOf is orders' partition count in the gateway's Metadata.
func partitionsOf(ctx context.Context, t *testing.T, cl *kgo.Client) int {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("orders")
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("Metadata: %v %+v", err, resp)
	}
	return len(resp.Topics[0].Partitions)
}

// TestCreatePartitions: CreatePartitions grows a topic through the
// cluster's add-partitions; validateOnly changes nothing; a count that
// does not grow and a manual assignment are refused with Kafka's codes;
// and the new partition takes records through the gateway at once.
func TestCreatePartitions(t *testing.T) {
	_, _, addr := startKafka(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := kgoClient(t, addr)
	// Produce first, so the gateway holds a producer opened at 3 partitions.
	prod := kgoClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceTo(ctx, t, prod, 2, "old", 1)
	for _, c := range []struct {
		name     string
		count    int32
		validate bool
		assign   bool
		want     int16
	}{
		{"same count", 3, false, false, kerr.InvalidPartitions.Code},
		{"fewer", 2, false, false, kerr.InvalidPartitions.Code},
		{"manual assignment", 5, false, true, kerr.InvalidReplicaAssignment.Code},
		{"validate only", 5, true, false, 0},
	} {
		if got := createPartitions(ctx, t, cl, c.count, c.validate, c.assign); got != c.want {
			t.Fatalf("%s: error %d, want %d", c.name, got, c.want)
		}
	}
	if n := partitionsOf(ctx, t, cl); n != 3 {
		t.Fatalf("refused and validate-only requests left %d partitions, want 3", n)
	}
	if got := createPartitions(ctx, t, cl, 5, false, false); got != 0 {
		t.Fatalf("grow to 5: error %d", got)
	}
	if n := partitionsOf(ctx, t, cl); n != 5 {
		t.Fatalf("after growing to 5 the gateway lists %d partitions", n)
	}
	// A new client (its metadata lists 5 partitions); the gateway's
	// producer of orders opened at 3.
	prod = kgoClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	vals := produceTo(ctx, t, prod, 4, "new", 3)
	readFrom(ctx, t, addr, 4, 0, vals)
}

// TestCreatePartitionsAuthorized: only a user with the admin role may add
// partitions; a producer of the topic gets TOPIC_AUTHORIZATION_FAILED.
func TestCreatePartitionsAuthorized(t *testing.T) {
	lc, _, _ := startKafka(t, 1)
	auth, err := natsserver.ParseAuthConfig([]byte(`users: [
  {user: shop, password: shoppw, producer: [orders]}
]`))
	if err != nil {
		t.Fatal(err)
	}
	users, err := kafka.NewUsers(auth)
	if err != nil {
		t.Fatal(err)
	}
	addr := startSecondGateway(t, lc, users)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := kgoClient(t, addr, kgo.SASL(plain.Auth{User: "shop", Pass: "shoppw"}.AsMechanism()))
	if got := createPartitions(ctx, t, cl, 2, false, false); got != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("a producer adding partitions: error %d, want TOPIC_AUTHORIZATION_FAILED", got)
	}
}
