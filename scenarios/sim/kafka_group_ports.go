package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raidq/raidq/actors/kafka"
	"github.com/raidq/raidq/bus/meta"
)

// The ports of one gateway process (a kgwInc) running the shipped
// kafka.Coordinator: its CoordinatorKV over the simulated KV, with the
// semantics of meta.Store (records encoded and validated as JSON, a put
// is a Create at revision 0 and an Update (compare-and-set) otherwise,
// ErrFenced when the revision moved), its IsCoordinator (the gateway's own
// view of who is ranked first, set by the loop), its clocks and its
// logger. Methods run on the coordinator's goroutines; anything touching
// the simulation goes to the loop through bubble.post.

// kgwInc is one gateway process and its ports.
type kgwInc struct {
	gw   *kgateway
	proc // tag name.run
	c    *kafka.Coordinator

	coord atomic.Bool // IsCoordinator, set by the loop from the gateway's view
	reqs  atomic.Uint64

	// read is the topic's offsets in the record it last read from the
	// KV (load or re-read), by partition; loop-owned, for the checks.
	read map[int32]int64
}

var _ kafka.CoordinatorKV = (*kgwInc)(nil)

// clock is the gateway's monotonic clock (CoordinatorConfig.Clock), wall
// its wall clock (Wall): both the true time off by the gateway's skew and
// drift.
func (in *kgwInc) clock() int64 { return in.gw.clk.at(in.gw.k.s.bubble.trueNow()) - epoch0 }

func (in *kgwInc) wall() time.Time { return time.Unix(0, in.gw.clk.at(in.gw.k.s.bubble.trueNow())) }

func (in *kgwInc) isCoordinator(string) bool { return in.coord.Load() && !in.isDead() }

// kvOpKey is what op asks, in full: its order among concurrent calls.
func kvOpKey(op kvOp) string {
	v := fmt.Sprint(op.val)
	if r, ok := op.val.(*kgRecord); ok && r != nil {
		v = string(r.b)
	}
	return sprintf("%s rev=%d %s", op, op.rev, v)
}

// kvCall sends op through the simulated KV as this gateway (proc.kv),
// bounded by meta.Store's own 5 s. The coordinator's goroutines (requests,
// its writer) call at once: ordered by what they ask (bubble.postKeyed).
func (in *kgwInc) kvCall(ctx context.Context, op kvOp, done func(kvReply)) kvReply {
	return in.kv(in.gw.k.s, ctx, kvCall{client: in.gw.name, op: op, fallback: 5 * time.Second, limit: 5 * time.Second,
		keyed: true, ctxErr: func(err error) error { return err }, done: done})
}

// kgroupKey is meta's key of a Kafka group's record.
func kgroupKey(name string) string { return "kgroup." + name }

// kgRecord is a record as the KV holds it: meta's JSON, and who wrote it
// (for the checks). A nil *kgRecord is a delete's tombstone.
type kgRecord struct {
	b  []byte
	by string // the writer's incarnation tag
}

func (in *kgwInc) KafkaGroup(ctx context.Context, name string) (meta.KafkaGroup, uint64, error) {
	rep := in.kvCall(ctx, kvOp{kind: kvGet, key: kgroupKey(name)}, func(rep kvReply) {
		if rep.err == nil {
			r, _ := rep.entry.val.(*kgRecord)
			in.read = in.gw.k.offsetsOf(r)
		}
	})
	if rep.err != nil {
		return meta.KafkaGroup{}, 0, rep.err
	}
	r, _ := rep.entry.val.(*kgRecord)
	if !rep.found || r == nil {
		return meta.KafkaGroup{}, 0, nil
	}
	g, err := meta.DecodeKafkaGroup(r.b)
	if err != nil {
		return meta.KafkaGroup{}, 0, err
	}
	return g, rep.entry.rev, nil
}

// PutKafkaGroup is meta.Store's: Create at revision 0, else Update at
// rev. (A Create over a delete's tombstone is refused here, where
// JetStream allows it; the simulation deletes no group.)
func (in *kgwInc) PutKafkaGroup(ctx context.Context, g *meta.KafkaGroup, rev uint64) (uint64, error) {
	b, err := meta.EncodeKafkaGroup(g)
	if err != nil {
		return 0, err
	}
	op := kvOp{kind: kvUpdate, key: kgroupKey(g.Name), val: &kgRecord{b: b, by: in.tag}, rev: rev}
	if rev == 0 {
		op.kind = kvCreate
	}
	rep := in.kvCall(ctx, op, nil)
	if errors.Is(rep.err, errKVFenced) {
		return 0, fmt.Errorf("%w: Kafka group %q", meta.ErrFenced, g.Name)
	}
	return rep.rev, rep.err
}

// DeleteKafkaGroup writes a tombstone at rev (a compare-and-set, as
// meta.Store's delete with LastRevision is).
func (in *kgwInc) DeleteKafkaGroup(ctx context.Context, name string, rev uint64) error {
	rep := in.kvCall(ctx, kvOp{kind: kvUpdate, key: kgroupKey(name), val: (*kgRecord)(nil), rev: rev}, nil)
	if errors.Is(rep.err, errKVFenced) {
		return fmt.Errorf("%w: Kafka group %q", meta.ErrFenced, name)
	}
	return rep.err
}

func (in *kgwInc) KafkaGroups(ctx context.Context) ([]meta.KafkaGroup, error) {
	rep := in.kvCall(ctx, kvOp{kind: kvList, key: "kgroup."}, nil)
	if rep.err != nil {
		return nil, rep.err
	}
	var out []meta.KafkaGroup
	for _, e := range rep.list {
		if r, _ := e.val.(*kgRecord); r != nil {
			g, err := meta.DecodeKafkaGroup(r.b)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
	}
	return out, nil
}

// NativeGroupExists lists the native group's keys (there are none here),
// through the KV and its faults.
func (in *kgwInc) NativeGroupExists(ctx context.Context, name string) (bool, error) {
	rep := in.kvCall(ctx, kvOp{kind: kvList, key: "g." + name + "."}, nil)
	if rep.err != nil {
		return false, rep.err
	}
	return len(rep.list) > 0, nil
}

// logger writes the coordinator's log lines into the op log, on the loop.
// Member ids (client id, a dash, random hex) print as their client id:
// the hex is crypto/rand's, which no seed replays.
func (in *kgwInc) logger() *slog.Logger { return slog.New(&kgwLogHandler{in: in}) }

type kgwLogHandler struct {
	in    *kgwInc
	attrs []slog.Attr
}

func (h *kgwLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *kgwLogHandler) Handle(_ context.Context, r slog.Record) error {
	in := h.in
	if in.isDead() {
		return nil // what a dead process's goroutines still say is never heard
	}
	var b strings.Builder
	b.WriteString(r.Message)
	add := func(a slog.Attr) bool {
		switch a.Key {
		case "component", "group":
		case "member":
			fmt.Fprintf(&b, " member=%s", memberName(a.Value.String()))
		default:
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	line := memberIDHex.ReplaceAllString(b.String(), "")
	k := in.gw.k
	k.s.bubble.postLog(in.tag, line, func() { k.coordLog(in, line) })
	return nil
}

func (h *kgwLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &kgwLogHandler{in: h.in, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

func (h *kgwLogHandler) WithGroup(string) slog.Handler { return h }

// memberIDHex is the random part of a member id.
var memberIDHex = regexp.MustCompile(`-[0-9a-f]{32}\b`)

// memberName is a member id's client id part (what a simulated client
// names itself with): the id without its random suffix.
func memberName(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	if id == "" {
		return `""`
	}
	return id
}

// serve runs one client request on the gateway: call (a Coordinator
// method) on a goroutine of the bubble, its answer handed to the loop,
// which sends it back unless the process died meanwhile.
func (in *kgwInc) serve(ctx context.Context, call func(ctx context.Context) any, answer func(any)) {
	s := in.gw.k.s
	n := in.reqs.Add(1) // on the loop: numbered in the loop's order
	s.bubble.wg.Go(func() {
		resp := call(ctx)
		s.bubble.post(sprintf("%s/r%08d", in.tag, n), 0, func() {
			if !in.isDead() {
				answer(resp)
			}
		})
	})
}

// idSource is a gateway process's seeded source of member-id bytes
// (kafka.CoordinatorConfig.IDRand): random ids would change the members'
// order in the coordinator, and with it the op log.
type idSource struct {
	mu  sync.Mutex
	rnd *rand.ChaCha8
}

func newIDSource(seed uint64, tag string) *idSource {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	copy(key[8:], tag)
	return &idSource{rnd: rand.NewChaCha8(key)}
}

func (r *idSource) Read(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rnd.Read(b)
}
