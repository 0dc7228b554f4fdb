package security

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
)

// violationWait bounds the wait for the server's -ERR after a refused
// publish or subscribe (it comes asynchronously).
const violationWait = 3 * time.Second

// attacks runs every attempt, with a legitimate producer of topic A
// running meanwhile, then the final round trip.
func (r *run) attacks(ctx context.Context) error {
	cs, err := r.connectCast(ctx)
	if err != nil {
		return err
	}
	start := time.Now().Add(-time.Second)
	if err := r.seedTopicB(ctx, cs.bravo); err != nil {
		return err
	}

	stop, done := make(chan struct{}), make(chan struct{})
	go r.background(ctx, cs.legit, stop, done)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()

	ta, err := cs.mallory.meta.Topic(ctx, TopicA)
	if err != nil {
		return err
	}
	tb, err := cs.mallory.meta.Topic(ctx, TopicB)
	if err != nil {
		return err
	}
	r.producerAttacks(ctx, cs.mallory, ta, tb, start)
	r.clockFaultChecks(ctx, cs.mallory) // clock.go
	r.consumerAttacks(ctx, cs.reader, ta)
	r.connectAttacks(ctx)
	r.flood(ctx, cs.mallory, ta)

	close(stop)
	<-done
	rep := r.report
	r.check(Check{Name: "legitimate writes during the attacks", Who: "writer-a", Tried: fmt.Sprintf("write topic %s every 20ms throughout", TopicA),
		Want: "works", Got: fmt.Sprintf("%d sent, %d acked, %d failed", rep.BackgroundSent, rep.BackgroundAcked, rep.BackgroundFailed),
		Pass: rep.BackgroundSent > 0 && rep.BackgroundFailed == 0 && rep.BackgroundAcked == rep.BackgroundSent})
	r.roundTrip(ctx, cs.legit, cs.reader, start)
	return nil
}

// cast is the attacks' clients.
type cast struct {
	mallory *actor // writer-a, attacking
	legit   *actor // writer-a, writing topic A in the background
	reader  *actor // reader-a
	bravo   *actor // writer-b
}

// connectCast connects the attacks' clients and waits until each one
// sees both topics.
func (r *run) connectCast(ctx context.Context) (cast, error) {
	var cs cast
	var err error
	if cs.mallory, err = r.connect("writer-a", raidq.ClientAuth{User: "writer-a", Password: r.pw["writer-a"]}); err != nil {
		return cs, err
	}
	if cs.legit, err = r.connect("writer-a", raidq.ClientAuth{User: "writer-a", Password: r.pw["writer-a"]}); err != nil {
		return cs, err
	}
	if cs.reader, err = r.connect("reader-a", raidq.ClientAuth{User: "reader-a", Password: r.pw["reader-a"]}); err != nil {
		return cs, err
	}
	if cs.bravo, err = r.connect("writer-b", raidq.ClientAuth{User: "writer-b", Password: r.pw["writer-b"]}); err != nil {
		return cs, err
	}
	for _, a := range []*actor{cs.mallory, cs.legit, cs.reader, cs.bravo} {
		for _, t := range []string{TopicA, TopicB} {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := a.c.WaitTopic(wctx, t)
			cancel()
			if err != nil {
				return cs, fmt.Errorf("security drill: %s does not see topic %s: %w", a.name, t, err)
			}
		}
	}
	return cs, nil
}

// seedTopicB writes five messages to topic B as writer-b: data worth
// stealing.
func (r *run) seedTopicB(ctx context.Context, bravo *actor) error {
	pb, err := bravo.c.Producer(TopicB)
	if err != nil {
		return err
	}
	for i := range 5 {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := pb.Send(sctx, raidq.Message{Value: fmt.Appendf(nil, "bravo secret %d", i)})
		cancel()
		if err != nil {
			_ = pb.Close()
			return fmt.Errorf("security drill: writer-b cannot write topic %s: %w", TopicB, err)
		}
	}
	_ = pb.Close()
	return nil
}

// shardFor encodes a one-record stripe for topic t, partition 0, at a
// fresh offset and returns the write request of ensemble position pos.
func shardFor(t meta.TopicRecord, pos int, value string) bus.WriteReq {
	off := uint64(time.Now().UnixNano())
	payload, _ := stripe.AppendBatch(nil, []stripe.Record{{Value: []byte(value)}})
	var id stripe.ID
	id.Producer[0], id.Seq = 0xEE, rand.Uint64()
	shards, err := stripe.Encode(id, off, t.N, t.K, payload)
	if err != nil {
		panic(err)
	}
	return bus.WriteReq{Topic: t.Name, Partition: 0, Offset: off, Shard: shards[pos].Marshal()}
}

// nodeReply sends a raw write request and describes the node's answer.
func nodeReply(a *actor, subject string, data []byte) (bus.WriteReply, string, error) {
	m, err := a.c.Conn().Request(subject, data, 2*time.Second)
	if err != nil {
		return bus.WriteReply{}, "", err
	}
	w, err := bus.DecodeWriteReply(m.Data)
	if err != nil {
		return w, "", err
	}
	return w, fmt.Sprintf("node answered %s: %s", w.Status, w.Detail), nil
}

// refusedByNATS checks that a publish or subscribe was refused.
func (r *run) refusedByNATS(a *actor, name, tried string, parts ...string) {
	got, ok := a.violation(violationWait, parts...)
	if !ok {
		got = "no permission violation reported"
	}
	r.check(Check{Name: name, Who: a.name, Tried: tried, Got: got, Pass: ok})
}

// refusedByNode checks a node's BAD_REQUEST answer.
func (r *run) refusedByNode(a *actor, name, tried, subject string, data []byte, detail string) {
	w, got, err := nodeReply(a, subject, data)
	ok := err == nil && w.Status == bus.StatusBadRequest && strings.Contains(w.Detail, detail)
	if err != nil {
		got = "no answer: " + err.Error()
	}
	r.check(Check{Name: name, Who: a.name, Tried: tried, Got: got, Pass: ok})
}

// producerAttacks checks, as m (writer-a), everything a producer of
// topic A must not do: touch topic B (written since start), write raw
// or forged shards, write the metadata, read the status, sniff replies.
func (r *run) producerAttacks(ctx context.Context, m *actor, ta, tb meta.TopicRecord, start time.Time) {
	r.writeOtherTopic(ctx, m)
	r.scanOtherTopic(m, start)
	r.subscribeOtherTopic(m)
	r.rawWrites(m, ta, tb)
	r.metadataAttacks(ctx, m)
	r.sniffReplies(m)
}

// writeOtherTopic checks that m cannot write topic B through the client.
func (r *run) writeOtherTopic(ctx context.Context, m *actor) {
	p, err := m.c.Producer(TopicB)
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		_, err = p.Send(sctx, raidq.Message{Value: []byte("forged")})
		cancel()
		_ = p.Close()
	}
	got, ok := m.violation(violationWait, "Publish to", ".slot.", "."+TopicB+".")
	if err == nil {
		got, ok = "the write was acknowledged", false
	} else if !ok {
		got = "failed without a permission violation: " + err.Error()
	}
	r.check(Check{Name: "write another topic", Who: m.name, Tried: "produce to topic " + TopicB, Got: got, Pass: ok})
}

// scanOtherTopic checks that m cannot read topic B (from start) by
// scanning.
func (r *run) scanOtherTopic(m *actor, start time.Time) {
	n := 0
	cons, err := m.c.Consumer(TopicB, raidq.WithStart(start))
	if err == nil {
		timeout := time.After(3 * time.Second)
	read:
		for {
			select {
			case _, ok := <-cons.Messages():
				if !ok { // the consumer ended: the client takes the refusal as the end
					break read
				}
				n++
			case <-timeout:
				break read
			}
		}
		cons.Close()
	}
	got, ok := m.violation(violationWait, "Publish to", ".scan.", "."+TopicB+".")
	if n > 0 {
		got, ok = fmt.Sprintf("read %d messages of topic %s", n, TopicB), false
	}
	r.check(Check{Name: "read another topic (scan)", Who: m.name, Tried: "consume topic " + TopicB, Got: got, Pass: ok})
}

// subscribeOtherTopic checks that m cannot read topic B on its deliver
// subjects.
func (r *run) subscribeOtherTopic(m *actor) {
	sub, err := m.c.Conn().SubscribeSync(r.subj.DeliverAll(TopicB))
	if err != nil {
		return
	}
	r.refusedByNATS(m, "read another topic (subscribe)", "subscribe to "+r.subj.DeliverAll(TopicB), "Subscription to", ".deliver."+TopicB)
	if msg, err := sub.NextMsg(500 * time.Millisecond); err == nil {
		r.check(Check{Name: "read another topic (subscribe)", Who: m.name, Tried: "receive on " + r.subj.DeliverAll(TopicB),
			Got: "received " + msg.Subject, Pass: false})
	}
	_ = sub.Unsubscribe()
}

// rawWrites checks that raw write requests are refused: by NATS on topic
// B's slot subject, by the node for a write naming another topic, a
// forged repair write and garbage on topic A's.
func (r *run) rawWrites(m *actor, ta, tb meta.TopicRecord) {
	nodeB := tb.Ensembles[0][0]
	_, _ = m.c.Conn().Request(r.subj.Slot(nodeB, TopicB, 0), shardFor(tb, 0, "raw").Marshal(), 500*time.Millisecond)
	r.refusedByNATS(m, "raw write to another topic's slot", "publish a write request on "+r.subj.Slot(nodeB, TopicB, 0),
		"Publish to", r.subj.Slot(nodeB, TopicB, 0))
	nodeA := ta.Ensembles[0][0]
	wrong := shardFor(tb, 0, "smuggled")
	r.refusedByNode(m, "raw write naming another topic", fmt.Sprintf("write for %s/0 sent on %s", TopicB, r.subj.Slot(nodeA, TopicA, 0)),
		r.subj.Slot(nodeA, TopicA, 0), wrong.Marshal(), "subject names")
	forged := shardFor(ta, 0, "forged repair")
	forged.Repair = true
	r.refusedByNode(m, "forged repair write", "a write with the repair flag (allowed below the seal) on "+r.subj.Slot(nodeA, TopicA, 0),
		r.subj.Slot(nodeA, TopicA, 0), forged.Marshal(), "repair loop")
	garbage := make([]byte, 300)
	for i := range garbage {
		garbage[i] = byte(rand.Uint32())
	}
	r.refusedByNode(m, "garbage request", "300 random bytes on "+r.subj.Slot(nodeA, TopicA, 0), r.subj.Slot(nodeA, TopicA, 0), garbage, "bad message")
}

// metadataAttacks checks that m cannot create topics, forge member
// records or heartbeats, delete the metadata or read the nodes' status:
// topics and members are not a producer's to write.
func (r *run) metadataAttacks(ctx context.Context, m *actor) {
	c := r.cfg.Cluster
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := m.c.CreateTopic(cctx, raidq.TopicConfig{Name: "rogue", Partitions: 1, Params: r.params})
	cancel()
	metaB := "$KV.raidq_" + c + "_meta"
	if err == nil {
		r.check(Check{Name: "create a topic", Who: m.name, Tried: "create topic rogue", Got: "created", Pass: false})
	} else {
		r.refusedByNATS(m, "create a topic", "create topic rogue", "Publish to", metaB+".topic.rogue")
	}
	cctx, cancel = context.WithTimeout(ctx, 3*time.Second)
	err = m.meta.PutMember(cctx, meta.Member{ID: "n0", ClientURL: "nats://203.0.113.1:4222", Started: 1, Heartbeat: time.Now().UnixNano()})
	cancel()
	if err == nil {
		r.check(Check{Name: "forge a node's member record", Who: m.name, Tried: "rewrite member n0", Got: "written", Pass: false})
	} else {
		r.refusedByNATS(m, "forge a node's member record", "rewrite member n0 (a heartbeat pointing elsewhere)", "Publish to", metaB+".member.n0")
	}
	_ = m.c.Conn().Publish(r.subj.Heartbeat("n0"), []byte("alive"))
	r.refusedByNATS(m, "publish a node heartbeat", "publish on "+r.subj.Heartbeat("n0"), "Publish to", r.subj.Heartbeat("n0"))
	_, _ = m.c.Conn().Request("$JS.API.STREAM.DELETE.KV_raidq_"+c+"_meta", nil, 500*time.Millisecond)
	r.refusedByNATS(m, "delete the metadata", "delete the metadata bucket (JetStream API)", "Publish to", "$JS.API.STREAM.DELETE")
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = actors.StatusWith(sctx, m.c.Conn(), c, actors.StatusOptions{Timeout: 500 * time.Millisecond})
	cancel()
	if err == nil {
		r.check(Check{Name: "read the nodes' status", Who: m.name, Tried: "raidq status", Got: "answered", Pass: false})
	} else {
		r.refusedByNATS(m, "read the nodes' status", "discover the nodes ($SRV.PING) for raidq status", "Publish to", "$SRV.PING")
	}
}

// sniffReplies checks that m cannot subscribe to other clients' replies.
func (r *run) sniffReplies(m *actor) {
	for _, s := range []string{"_INBOX.>", bus.InboxPrefix("reader-a") + ".>"} {
		sub, err := m.c.Conn().SubscribeSync(s)
		if err == nil {
			r.refusedByNATS(m, "sniff replies", "subscribe to "+s, "Subscription to", s)
			_ = sub.Unsubscribe()
		}
	}
}

func (r *run) consumerAttacks(ctx context.Context, a *actor, ta meta.TopicRecord) {
	node := ta.Ensembles[0][0]
	w := shardFor(ta, 0, "through the scan subject")
	r.refusedByNode(a, "write through the scan subject", "a write request on "+r.subj.Scan(node, TopicA, 0),
		r.subj.Scan(node, TopicA, 0), w.Marshal(), "write request on a scan subject")
	_, _ = a.c.Conn().Request(r.subj.Slot(node, TopicA, 0), w.Marshal(), 500*time.Millisecond)
	r.refusedByNATS(a, "consumer writes", "a write request on "+r.subj.Slot(node, TopicA, 0), "Publish to", r.subj.Slot(node, TopicA, 0))
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := a.meta.GroupHeartbeat(cctx, "intruders", TopicA, "m1", time.Now(), 0)
	cancel()
	if err == nil {
		r.check(Check{Name: "join another consumer group", Who: a.name, Tried: "commit in group intruders", Got: "written", Pass: false})
	} else {
		r.refusedByNATS(a, "join another consumer group", "write group intruders' keys", "Publish to", ".g.intruders.")
	}
}

// connectAttacks: anonymous, wrong password, plaintext, rogue route,
// oversized message.
func (r *run) connectAttacks(ctx context.Context) {
	try := func(name, who, tried string, a raidq.ClientAuth, want ...string) {
		c, err := raidq.Connect(r.url(), raidq.WithCluster(r.cfg.Cluster), raidq.WithAuth(a), raidq.WithTimeout(3*time.Second),
			raidq.WithLogger(r.log), raidq.WithNATSOptions(nats.MaxReconnects(0)))
		if err == nil {
			c.Close()
			r.check(Check{Name: name, Who: who, Tried: tried, Got: "connected", Pass: false})
			return
		}
		msg := strings.ToLower(err.Error())
		ok := false
		for _, w := range want {
			ok = ok || strings.Contains(msg, w)
		}
		r.check(Check{Name: name, Who: who, Tried: tried, Got: firstLine(err.Error()), Pass: ok})
	}
	try("connect without credentials", "anonymous", "connect with TLS but no user", raidq.ClientAuth{TLSCA: r.tls.CA}, "authorization")
	try("connect with a wrong password", "writer-a", "connect as writer-a with a wrong password",
		raidq.ClientAuth{User: "writer-a", Password: "guess", TLSCA: r.tls.CA}, "authorization")
	try("connect without TLS", "writer-a", "connect as writer-a without TLS",
		raidq.ClientAuth{User: "writer-a", Password: r.pw["writer-a"]}, "tls", "certificate", "x509")

	host := hostOf(r.urls[0])
	got, ok := plaintextConnect(host, "writer-a", r.pw["writer-a"])
	r.check(Check{Name: "plaintext protocol", Who: "writer-a", Tried: "CONNECT and PING in plaintext on a TLS port", Got: got, Pass: ok})

	route := hostOf(r.routes[0])
	got, ok = rogueRoute(route, r.tls.CA)
	r.check(Check{Name: "join the routes without a certificate", Who: "rogue server", Tried: "dial the route port with TLS but no client certificate",
		Got: got, Pass: ok})
	got, ok = plaintextRoute(route)
	r.check(Check{Name: "join the routes in plaintext", Who: "rogue server", Tried: "CONNECT on the route port without TLS", Got: got, Pass: ok})

	got, ok = oversized(host, r.tls.CA, "writer-a", r.pw["writer-a"], r.subj.Slot("n0", TopicA, 0))
	r.check(Check{Name: "oversized message", Who: "writer-a", Tried: "publish 2 MiB (the max payload is 1 MiB)", Got: got, Pass: ok})
}

func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Host
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// plaintextConnect speaks the client protocol without TLS on a port that
// requires it: the server must not answer PONG.
func plaintextConnect(host, user, pass string) (string, bool) {
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return "dial: " + err.Error(), false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	info, _ := bus.ParseServerInfo([]byte(line))
	fmt.Fprintf(c, "CONNECT {\"user\":%q,\"pass\":%q,\"verbose\":false,\"pedantic\":false}\r\nPING\r\n", user, pass)
	for {
		l, err := br.ReadString('\n')
		if strings.HasPrefix(l, "PONG") {
			return "the server answered PONG", false
		}
		if err != nil {
			return fmt.Sprintf("refused (server INFO tls_required=%v, then the connection closed: %v)", info.TLSRequired, errText(err)), info.TLSRequired
		}
		if strings.HasPrefix(l, "-ERR") {
			return "refused: " + strings.TrimSpace(l), true
		}
	}
}

func errText(err error) string {
	if errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "EOF") {
		return "EOF"
	}
	return err.Error()
}

// rogueRoute dials the route port with TLS but without a client
// certificate: the handshake (or the first read) must fail.
func rogueRoute(host, ca string) (string, bool) {
	cfg, err := bus.ClientTLSConfig(ca, "", "")
	if err != nil {
		return err.Error(), false
	}
	cfg.ServerName = "127.0.0.1"
	d := &net.Dialer{Timeout: 2 * time.Second}
	raw, err := d.Dial("tcp", host)
	if err != nil {
		return "dial: " + err.Error(), false
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(3 * time.Second))
	tc := tls.Client(raw, cfg) // with TLS the route port handshakes first
	if err := tc.Handshake(); err != nil {
		return "refused: TLS handshake: " + err.Error(), true
	}
	fmt.Fprintf(tc, "CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"rogue\"}\r\nPING\r\n")
	tbr := bufio.NewReader(tc)
	for {
		l, err := tbr.ReadString('\n')
		if strings.HasPrefix(l, "PONG") {
			return "the route answered PONG", false
		}
		if err != nil {
			return "refused: " + firstLine(err.Error()), true
		}
	}
}

// plaintextRoute speaks the route protocol without TLS.
func plaintextRoute(host string) (string, bool) {
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return "dial: " + err.Error(), false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	br := bufio.NewReader(c)
	_, _ = br.ReadString('\n')
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"rogue\"}\r\nPING\r\n")
	for {
		l, err := br.ReadString('\n')
		if strings.HasPrefix(l, "PONG") {
			return "the route answered PONG", false
		}
		if err != nil {
			return "refused: the connection closed (" + errText(err) + ")", true
		}
		if strings.HasPrefix(l, "-ERR") {
			return "refused: " + strings.TrimSpace(l), true
		}
	}
}

// oversized authenticates over TLS and publishes more than the max payload.
func oversized(host, ca, user, pass, subject string) (string, bool) {
	cfg, err := bus.ClientTLSConfig(ca, "", "")
	if err != nil {
		return err.Error(), false
	}
	cfg.ServerName = "127.0.0.1"
	raw, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return "dial: " + err.Error(), false
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(raw)
	if _, err := br.ReadString('\n'); err != nil {
		return "no INFO: " + err.Error(), false
	}
	tc := tls.Client(raw, cfg)
	if err := tc.Handshake(); err != nil {
		return "TLS: " + err.Error(), false
	}
	size := 2 << 20
	fmt.Fprintf(tc, "CONNECT {\"user\":%q,\"pass\":%q,\"verbose\":false,\"pedantic\":false,\"tls_required\":true}\r\nPING\r\n", user, pass)
	tbr := bufio.NewReader(tc)
	if l, err := tbr.ReadString('\n'); err != nil || !strings.HasPrefix(l, "PONG") {
		return fmt.Sprintf("could not authenticate first: %q %v", l, err), false
	}
	fmt.Fprintf(tc, "PUB %s %d\r\n", subject, size)
	go func() { _, _ = tc.Write(make([]byte, size)) }()
	for {
		l, err := tbr.ReadString('\n')
		if strings.HasPrefix(l, "-ERR") {
			return "refused: " + strings.TrimSpace(l), strings.Contains(l, "Maximum Payload")
		}
		if err != nil {
			return "the connection closed without -ERR: " + errText(err), false
		}
	}
}

// flood sends cfg.Flood hostile requests at topic A's nodes (random
// bytes, truncated and mismatched requests, 512 KiB of garbage) while the
// background producer keeps writing; every one must be answered
// BAD_REQUEST (or dropped), and the producer must not notice.
func (r *run) flood(ctx context.Context, m *actor, ta meta.TopicRecord) {
	nc := m.c.Conn()
	inbox := bus.InboxPrefix("writer-a") + ".flood"
	var bad, other atomic.Int64
	sub, err := nc.Subscribe(inbox+".*", func(msg *nats.Msg) {
		if w, err := bus.DecodeWriteReply(msg.Data); err == nil && w.Status == bus.StatusBadRequest {
			bad.Add(1)
		} else {
			other.Add(1)
		}
	})
	if err != nil {
		r.check(Check{Name: "flood", Who: m.name, Tried: "flood", Got: err.Error(), Pass: false})
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	good := shardFor(ta, 0, "flood").Marshal()
	big := make([]byte, 512<<10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	began := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range r.cfg.Flood {
		node := ta.Ensembles[i%2][i%len(ta.Ensembles[i%2])]
		subject := r.subj.Slot(node, TopicA, uint32(i%2))
		var data []byte
		switch i % 4 {
		case 0:
			data = make([]byte, 1+rng.IntN(200))
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
		case 1:
			data = good[:rng.IntN(len(good))]
		case 2:
			w := shardFor(ta, 0, "x")
			w.Partition = 1 - uint32(i%2)
			data = w.Marshal()
		case 3:
			if i%40 == 3 {
				data = big
			} else {
				data = []byte{1, 1, 0xff}
			}
		}
		if err := nc.PublishRequest(subject, inbox+"."+strconv.Itoa(i), data); err != nil {
			break
		}
		if i%200 == 0 && ctx.Err() != nil {
			break
		}
	}
	_ = nc.FlushTimeout(10 * time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for bad.Load()+other.Load() < int64(r.cfg.Flood) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(began)
	answered := bad.Load() + other.Load()
	r.check(Check{Name: "flood of hostile requests", Who: m.name,
		Tried: fmt.Sprintf("%d garbage, truncated, mismatched and 512 KiB requests at topic %s's nodes", r.cfg.Flood, TopicA),
		Got:   fmt.Sprintf("%d answered BAD_REQUEST, %d otherwise, %d unanswered, in %v", bad.Load(), other.Load(), int64(r.cfg.Flood)-answered, took.Round(time.Millisecond)),
		Pass:  other.Load() == 0 && bad.Load() > int64(r.cfg.Flood)*9/10})
}

// roundTrip: a legitimate producer and consumer of topic A at the end.
func (r *run) roundTrip(ctx context.Context, w, rd *actor, start time.Time) {
	p, err := w.c.Producer(TopicA)
	if err != nil {
		r.check(Check{Name: "legitimate round trip", Who: "writer-a, reader-a", Want: "works", Got: err.Error()})
		return
	}
	defer p.Close()
	mark := fmt.Sprintf("round trip %d", time.Now().UnixNano())
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = p.Send(sctx, raidq.Message{Value: []byte(mark)})
	cancel()
	if err != nil {
		r.check(Check{Name: "legitimate round trip", Who: "writer-a, reader-a", Tried: "produce and consume topic " + TopicA, Want: "works",
			Got: "send: " + err.Error()})
		return
	}
	cons, err := rd.c.Consumer(TopicA, raidq.WithStart(start))
	if err != nil {
		r.check(Check{Name: "legitimate round trip", Who: "writer-a, reader-a", Tried: "produce and consume topic " + TopicA, Want: "works", Got: err.Error()})
		return
	}
	defer cons.Close()
	n := 0
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-cons.Messages():
			n++
			if string(m.Value) == mark {
				r.check(Check{Name: "legitimate round trip", Who: "writer-a, reader-a", Tried: "produce and consume topic " + TopicA,
					Want: "works", Got: fmt.Sprintf("read back after %d messages of topic %s", n, TopicA), Pass: true})
				return
			}
		case <-timeout:
			r.check(Check{Name: "legitimate round trip", Who: "writer-a, reader-a", Tried: "produce and consume topic " + TopicA,
				Want: "works", Got: fmt.Sprintf("not read back in 30s (%d other messages)", n)})
			return
		}
	}
}
