package drill

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The kafka drill: kill-2's faults (SIGKILL two nodes at 30% of the load,
// restart them at 65%) under Kafka clients. Two `raidq kafka` gateway
// processes (kafka_gateway.go) serve the cluster; one kgo producer
// (idempotent, acks=all, RecordDeliveryTimeout 2 min, both gateways as
// seeds) is the drill's only producer, and a kgo consumer group of two
// members reads live through the gateways in place of the `raidq
// consume --group` processes (kafka_clients.go). The read-back, the live
// reader, repair and the shard count are the other drills' own: they
// check, through the native API, what the Kafka clients wrote.

// setupKafka plans the kafka drill: kill-2's schedule, one producer.
func setupKafka(p *plan) {
	p.kafka, p.producers = true, 1
	p.notes = append(p.notes, "kafka: one kgo producer (idempotent, acks=all, RecordDeliveryTimeout 2m) and a kgo group of "+
		"2 members, through 2 `raidq kafka` gateways; --producers does not apply")
	setupKill(2, 0.65)(p)
}

// kafkaDrill is the kafka drill's gateways and clients.
type kafkaDrill struct {
	gateways []*gatewayProc
	producer *kgo.Client
	batches  *batchCounter
	group    *kafkaGroupRun
	exits    chan string // gateways that exited by themselves
}

// startKafka starts the gateways, the kgo producer and the kgo group
// (the topic exists).
func (r *run) startKafka(ctx context.Context) (*kafkaDrill, error) {
	k := &kafkaDrill{batches: &batchCounter{}, exits: make(chan string, kafkaGateways)}
	gws, err := r.startGateways(ctx, func(g *gatewayProc) {
		what := fmt.Sprintf("%s exited by itself (%s): %s", g.id, g.state, lastLine(g.stderr.tail(20)))
		r.event("error", "kafka gateway %s", what)
		k.exits <- what
	})
	if err != nil {
		return nil, err
	}
	k.gateways = gws
	if k.producer, err = r.newKgoProducer(k.seeds(), k.batches); err != nil {
		k.close()
		return nil, fmt.Errorf("kgo producer: %w", err)
	}
	if k.group, err = r.startKafkaGroup(k.seeds()); err != nil {
		k.close()
		return nil, err
	}
	return k, nil
}

// seeds are the gateways' addresses.
func (k *kafkaDrill) seeds() []string {
	var s []string
	for _, g := range k.gateways {
		s = append(s, g.addr)
	}
	return s
}

// close ends everything still running (an early return; after stop it
// does nothing more).
func (k *kafkaDrill) close() {
	if k.group != nil {
		k.group.close()
		k.group = nil
	}
	if k.producer != nil {
		k.producer.Close()
		k.producer = nil
	}
	stopGateways(k.gateways)
}

// kafkaDrained is the kgo group's result and the gateways' stops.
type kafkaDrained struct {
	group    kafkaGroupResult
	stopFail []string
	tails    []string
}

// stop waits for the kgo group (as liveGroup.stop), closes it, then
// stops the gateways with SIGTERM.
func (k *kafkaDrill) stop(want map[uint64]bool, deadline time.Time, progress func(got int)) kafkaDrained {
	var d kafkaDrained
	d.group = k.group.stop(want, deadline, progress)
	k.group = nil
	for _, g := range k.gateways {
		if f := g.stop(); f != "" {
			d.stopFail = append(d.stopFail, f)
		}
		d.tails = append(d.tails, fmt.Sprintf("%s:\n%s", g.id, g.stderr.tail(30)))
	}
	return d
}

// KafkaReport is what the kafka drill's gateways and kgo clients did.
type KafkaReport struct {
	// Gateways names each gateway, its address and the node its NATS
	// list starts at.
	Gateways []string `json:"gateways"`
	Producer string   `json:"producer"`
	// Batches is how many record batches the kgo producer wrote (each is
	// one stripe, or more, at the gateway); RecordsPerBatch their mean size.
	Batches         int64   `json:"batches"`
	RecordsPerBatch float64 `json:"records_per_batch"`
	// MemberErrors counts the errors kgo's PollFetches returned to the
	// group members (kgo retries what it can by itself).
	MemberErrors       int      `json:"member_errors"`
	MemberErrorSamples []string `json:"member_error_samples,omitempty"`
	// GatewayExits: gateways that exited while the drill did not stop
	// them; GatewayStopFailures: gateways that did not exit 0 on SIGTERM.
	GatewayExits        []string `json:"gateway_exits,omitempty"`
	GatewayStopFailures []string `json:"gateway_stop_failures,omitempty"`
	// AckOffsetMismatches: acked records whose Kafka offset is not where
	// the read-back delivered them.
	AckOffsetMismatches int      `json:"ack_offset_mismatches"`
	GatewayTails        []string `json:"gateway_stderr_tails,omitempty"`
}

// kafkaVerdict fills rep.Group (the kgo group, as the live group's) and
// rep.Kafka, and adds the kafka drill's checks.
func (r *run) kafkaVerdict(rep *Report, kd kafkaDrained, dels []delivery) {
	k := r.kafka
	mismatches := r.kafkaStripes(dels)
	res := kd.group
	t := tallyGroup(r.sends(), res.dels)
	r.groupDels = res.dels
	g := &GroupReport{Group: kafkaGroup, Deliveries: len(res.dels), Delivered: t.acked - t.lost, Missing: t.lost,
		Duplicates: t.duplicates, DuplicateRecords: t.duplicateRecords, AcrossMembers: t.acrossMembers,
		DuplicateSamples: t.dupSamples, Unexpected: t.unexpected, WaitS: res.waitS}
	for m := range kafkaGroupMembers {
		g.Members = append(g.Members, fmt.Sprintf("k%d (kgo, seeds from kgw%d)", m, m%kafkaGateways))
	}
	g.MissingSamples = groupMissingSamples(r.sends(), t)
	rep.Group = g
	kr := &KafkaReport{Producer: "kgo: idempotent, acks=all, RecordDeliveryTimeout 2m, linger 10ms (default), seeds " +
		strings.Join(k.seeds(), ","), Batches: k.batches.batches.Load(), MemberErrors: res.errs,
		MemberErrorSamples: res.samples, GatewayStopFailures: kd.stopFail}
	if kr.Batches > 0 {
		kr.RecordsPerBatch = float64(k.batches.records.Load()) / float64(kr.Batches)
	}
	for _, gw := range k.gateways {
		kr.Gateways = append(kr.Gateways, fmt.Sprintf("%s %s (NATS list from %s)", gw.id, gw.addr, gw.from))
	}
	for len(k.exits) > 0 {
		kr.GatewayExits = append(kr.GatewayExits, <-k.exits)
	}
	kr.AckOffsetMismatches = mismatches
	if g.Missing > 0 || kr.MemberErrors > 0 || len(kr.GatewayExits) > 0 || len(kr.GatewayStopFailures) > 0 {
		kr.GatewayTails = kd.tails
	}
	rep.Kafka = kr
	dup := fmt.Sprintf("%d duplicates (%d records, %d across members)", g.Duplicates, g.DuplicateRecords, g.AcrossMembers)
	rep.Checks = append(rep.Checks,
		Check{Name: "kgo group delivered every acked record", OK: g.Missing == 0,
			Detail: fmt.Sprintf("%d missing of %d acked, waited %.1fs after the read-back; %s", g.Missing, t.acked, g.WaitS, dup)},
		Check{Name: "kgo group delivered nothing unexpected", OK: g.Unexpected == 0, Detail: fmt.Sprintf("%d unexpected", g.Unexpected)},
		Check{Name: "kgo group members saw no errors", OK: kr.MemberErrors == 0,
			Detail: short(strings.Join(append([]string{fmt.Sprintf("%d errors", kr.MemberErrors)}, kr.MemberErrorSamples...), "; "), 600)},
		Check{Name: "no kafka gateway exited by itself", OK: len(kr.GatewayExits) == 0, Detail: strings.Join(kr.GatewayExits, "; ")},
		Check{Name: "kafka gateways exit 0 on SIGTERM", OK: len(kr.GatewayStopFailures) == 0,
			Detail: short(strings.Join(kr.GatewayStopFailures, "; "), 600)})
	rep.Notes = append(rep.Notes, fmt.Sprintf("kafka: gateways %s; the producer wrote %d batches, %.1f records per batch",
		strings.Join(kr.Gateways, ", "), kr.Batches, kr.RecordsPerBatch))
}

// groupMissingSamples describes up to 20 acked records no member
// delivered, with the last delivery of their partition.
func groupMissingSamples(prods [][]sendRec, t groupTally) []string {
	var out []string
	for _, k := range t.lost_ {
		if len(out) == 20 {
			break
		}
		prod, seq := int(k>>40), int(k&(1<<40-1))
		rec := prods[prod][seq]
		s := fmt.Sprintf("p%d-%d partition %d offset %d acked at %.2fs", prod, seq, rec.part, rec.off+uint64(rec.idx),
			float64(rec.done)/1e9)
		if last, ok := t.lastByPart[int(rec.part)]; ok {
			s += fmt.Sprintf("; partition %d last delivered by %s at %.2fs (offset %d)", rec.part, last.member,
				float64(last.at)/1e9, last.off+uint64(last.idx))
		} else {
			s += fmt.Sprintf("; no member delivered anything of partition %d", rec.part)
		}
		out = append(out, s)
	}
	return out
}

// kafkaStripes gives every acked Kafka record the stripe id the
// read-back found it in (kgo tells offsets, not stripe ids; the shard
// count and the lost-record analysis need them), preferring a delivery
// at the acked position; it returns how many acked records were
// delivered elsewhere only.
func (r *run) kafkaStripes(dels []delivery) int {
	type pos struct {
		part int
		off  uint64
		idx  int
	}
	at := make(map[uint64]map[pos]string)
	for _, d := range dels {
		if !d.known {
			continue
		}
		k := key(d.prod, d.seq)
		if at[k] == nil {
			at[k] = make(map[pos]string)
		}
		at[k][pos{d.part, d.off, d.idx}] = d.stripe
	}
	mismatches := 0
	for pi, p := range r.hist.prods {
		p.mu.Lock()
		for seq := range p.recs {
			rec := &p.recs[seq]
			if rec.status != statusAcked {
				continue
			}
			found := at[key(pi, seq)]
			rec.stripe = ""
			if st, ok := found[pos{int(rec.part), rec.off, int(rec.idx)}]; ok {
				rec.stripe = st
				continue
			}
			for _, st := range found {
				rec.stripe = st
			}
			if len(found) > 0 {
				mismatches++
			}
		}
		p.mu.Unlock()
	}
	return mismatches
}
