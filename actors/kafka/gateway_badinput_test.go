package kafka_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/bus/kafkawire"
)

// rawRoundTrip sends one framed request and reads the answer's body.
func rawRoundTrip(t *testing.T, conn net.Conn, req kmsg.Request, corr int32) []byte {
	t.Helper()
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("bad-input")).AppendRequest(nil, req, corr)
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	var size [4]byte
	if _, err := io.ReadFull(br, size[:]); err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	return body
}

// expectClosed says the gateway closed conn (after garbage).
func expectClosed(t *testing.T, conn net.Conn, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatalf("%s: the gateway answered instead of closing the connection", what)
	}
}

// TestGatewayBadInput: garbage frames and an oversized frame close their
// connection; a batch with a bad CRC is answered CORRUPT_MESSAGE and
// stores nothing; the gateway goes on serving.
func TestGatewayBadInput(t *testing.T) {
	_, _, addr := startKafka(t, 1)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := dial()
	_, _ = c.Write([]byte{0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4}) // 8 bytes of nonsense
	expectClosed(t, c, "a garbage frame")
	c = dial()
	_, _ = c.Write([]byte{0x7f, 0xff, 0xff, 0xff}) // a 2 GiB frame
	expectClosed(t, c, "an oversized frame")

	// A produce whose batch CRC is wrong.
	spec := kafkawire.BatchSpec{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		Records: []kafkawire.Record{{Timestamp: time.Now().UnixMilli(), Value: []byte("never stored")}}}
	batch, err := kafkawire.AppendBatch(nil, spec)
	if err != nil {
		t.Fatal(err)
	}
	batch[len(batch)-1] ^= 0xff // corrupt the last record byte: the CRC no longer matches
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(7)
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "orders"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	body := rawRoundTrip(t, dial(), req, 7)
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(7)
	if err := resp.ReadFrom(body[4:]); err != nil { // skip the correlation id
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.CorruptMessage.Code {
		t.Fatalf("bad CRC answered %v, want CORRUPT_MESSAGE", kerr.ErrorForCode(code))
	}

	// Still serving, and nothing of the refused batch was stored.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := kgoClient(t, addr)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("ok")}).FirstErr(); err != nil {
		t.Fatalf("produce after bad input: %v", err)
	}
	cons := kgoClient(t, addr, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := cons.PollFetches(ctx)
	for _, r := range fs.Records() {
		if string(r.Value) != "ok" {
			t.Fatalf("read %q: the refused batch was stored", r.Value)
		}
	}
	if fs.NumRecords() != 1 {
		t.Fatalf("read %d records, want 1", fs.NumRecords())
	}
}

// TestGatewayRefusesTransactions: a transaction request (never offered in
// ApiVersions) is answered UNSUPPORTED_VERSION and the connection stays.
func TestGatewayRefusesTransactions(t *testing.T) {
	_, _, addr := startKafka(t, 1)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	end := kmsg.NewPtrEndTxnRequest()
	end.SetVersion(1)
	end.TransactionalID, end.ProducerID, end.Commit = "tx", 1, true
	body := rawRoundTrip(t, conn, end, 1)
	resp := kmsg.NewPtrEndTxnResponse()
	resp.SetVersion(1)
	if err := resp.ReadFrom(body[4:]); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("EndTxn answered %v, want UNSUPPORTED_VERSION", kerr.ErrorForCode(resp.ErrorCode))
	}
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(0)
	body = rawRoundTrip(t, conn, av, 2)
	if got := int32(binary.BigEndian.Uint32(body[:4])); got != 2 {
		t.Fatalf("after EndTxn the connection answered correlation %d, want 2", got)
	}
}
