package core_test

// Scripted tests of the pure cores (Writer, Owner, Reader), in the
// data-driven format of scenarios/testkit/datadriven.go: each file under
// testdata/{writer,owner,reader,regress} is a sequence of commands whose
// printed effects are compared with the file. One driver serves every
// directory, so a regression script may use any core.
//
// Times and offsets are written as durations from T0 (a range start far
// from zero): "now=10ms" is T0+10ms, and an offset prints as "10.000384ms"
// (10 ms rounded up to the 1024 ns offset grid). Stripe ids are "pP/S":
// producer P's stripe S. Rewrite the expected outputs after a deliberate
// change with
//
//	RAIDQ_REWRITE=1 go test ./actors/core -run TestScripts
//
// and read the diff before committing it.
//
// The command handlers live in script_writer_test.go, script_owner_test.go
// and script_reader_test.go; this file holds the runner and the argument
// and output helpers they share.

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// T0 is the time and offset scripts count from: a range start.
const T0 = uint64(1_700_000_000) * core.RangeNanos

func TestScripts(t *testing.T) {
	for _, dir := range []string{"writer", "owner", "reader", "regress"} {
		t.Run(dir, func(t *testing.T) {
			for _, path := range testkit.DataDrivenFiles(t, filepath.Join("testdata", dir)) {
				t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
					x := &driver{now: int64(T0)}
					testkit.RunDataDriven(t, path, x.handle)
				})
			}
		})
	}
}

// driver holds the cores one script drives and the time it is at.
type driver struct {
	t   *testing.T
	d   *testkit.TestData
	now int64 // absolute ns

	writers map[string]*scriptWriter // by name
	cur     string                   // the writer named last
	owner   *core.Owner
	rd      *scriptReader
}

func (x *driver) handle(t *testing.T, d *testkit.TestData) string {
	x.t, x.d = t, d
	if d.HasArg("now") {
		x.now = x.at("now", 0)
	}
	var out []string
	emit := func(format string, args ...any) { out = append(out, humanize(fmt.Sprintf(format, args...))) }
	switch {
	case x.writerCmd(emit):
	case x.ownerCmd(emit):
	case x.readerCmd(emit):
	case d.Cmd == "state":
		x.state(emit)
	default:
		d.Fatalf(t, "unknown command")
	}
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out, "\n")
}

// state prints what each core in use holds.
func (x *driver) state(emit func(string, ...any)) {
	for _, name := range slices.Sorted(maps.Keys(x.writers)) {
		w := x.writers[name].w
		emit("writer %s: in-flight=%d skew=%v", name, w.InFlight(), time.Duration(w.Skew()))
	}
	if x.owner != nil {
		emit("owner: seal=%s slots=%d", offs(x.owner.Seal()), x.owner.Len())
	}
	if x.rd != nil {
		r := x.rd.r
		emit("reader: pos=%s frontier=%s low-water=%s deferred=%d", pos(r.Pos()), offs(r.Frontier()), pos(r.LowWater()), r.Deferred())
	}
}

// Arguments.

// dur reads key as a duration ("10ms", "-1s", "0"), or def.
func (x *driver) dur(key string, def int64) int64 {
	v := x.d.Val(key, "")
	if v == "" {
		return def
	}
	return x.parseDur(v)
}

func (x *driver) parseDur(v string) int64 {
	if v == "0" {
		return 0
	}
	dd, err := time.ParseDuration(v)
	if err != nil {
		x.d.Fatalf(x.t, "%s: %v", v, err)
	}
	return int64(dd)
}

// at reads key as a time or offset from T0 (absolute ns).
func (x *driver) at(key string, def int64) int64 { return int64(T0) + x.dur(key, def) }

// off reads key as an offset from T0 (required).
func (x *driver) off(key string) uint64 {
	x.need(key)
	return uint64(x.at(key, 0))
}

func (x *driver) need(key string) {
	if !x.d.HasArg(key) {
		x.d.Fatalf(x.t, "missing argument %s", key)
	}
}

func (x *driver) num(key string, def int) int {
	v := x.d.Val(key, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		x.d.Fatalf(x.t, "%s=%s: %v", key, v, err)
	}
	return n
}

// nums reads key=(1,2,3) (or key=1).
func (x *driver) nums(key string) []int {
	a, _ := x.d.Arg(key)
	var out []int
	for _, v := range a.Vals {
		n, err := strconv.Atoi(v)
		if err != nil {
			x.d.Fatalf(x.t, "%s: %v", key, err)
		}
		out = append(out, n)
	}
	return out
}

// id reads key as a stripe id "pP/S".
func (x *driver) id(key string) stripe.ID {
	x.need(key)
	var p int
	var seq uint64
	if _, err := fmt.Sscanf(x.d.Val(key, ""), "p%d/%d", &p, &seq); err != nil {
		x.d.Fatalf(x.t, "%s=%s: want pP/S", key, x.d.Val(key, ""))
	}
	return sid(p, seq)
}

// status reads key as a status name (ok, conflict, clock_ahead, ...).
func (x *driver) status(key string) core.Status {
	x.need(key)
	v := strings.ToUpper(strings.ReplaceAll(x.d.Val(key, ""), "-", "_"))
	for _, s := range append([]core.Status{core.StatusNoReply}, statusRange()...) {
		if s.String() == v {
			return s
		}
	}
	x.d.Fatalf(x.t, "unknown status %s", v)
	return 0
}

func statusRange() []core.Status {
	var out []core.Status
	for s := core.StatusOK; s <= core.StatusClockOff; s++ {
		out = append(out, s)
	}
	return out
}

// params reads the quorum and timing arguments shared by the cores.
func (x *driver) params() quorum.Params {
	p := quorum.Default()
	p.N, p.K, p.W = x.num("n", p.N), x.num("k", p.K), x.num("w", p.W)
	p.Grid = uint64(x.num("grid", int(p.Grid)))
	p.AcceptWindow = time.Duration(x.dur("accept", int64(p.AcceptWindow)))
	p.ReadDelay = time.Duration(x.dur("read-delay", int64(p.ReadDelay)))
	p.FutureBound = time.Duration(x.dur("future", int64(p.FutureBound)))
	if err := p.Validate(); err != nil {
		x.d.Fatalf(x.t, "%v", err)
	}
	return p
}

// Ids and output.

// sid is producer p's stripe seq (byte 0 = p+1: never the zero id nor a
// record-numbered producer's prefix).
func sid(p int, seq uint64) stripe.ID {
	var pr stripe.ProducerID
	pr[0] = byte(p + 1)
	return stripe.ID{Producer: pr, Seq: seq}
}

// name is the script name of a stripe id.
func name(id stripe.ID) string { return fmt.Sprintf("p%d/%d", int(id.Producer[0])-1, id.Seq) }

// offs prints an offset or time as its distance from T0.
func offs[T int64 | uint64](v T) string {
	if v == 0 {
		return "none"
	}
	return time.Duration(int64(v) - int64(T0)).String()
}

func pos(p core.Position) string { return fmt.Sprintf("%s:%d", offs(p.Offset), p.Index) }

func list(xs []int) string {
	s := make([]string, len(xs))
	for i, v := range xs {
		s[i] = strconv.Itoa(v)
	}
	return "(" + strings.Join(s, ",") + ")"
}

var (
	bigNumber = regexp.MustCompile(`\b1[67]\d{17}\b`)
	stripeHex = regexp.MustCompile(`\b([0-9a-f]{2})0{30}-(\d+)\b`)
)

// humanize rewrites the absolute offsets and stripe ids in a core's
// messages into script terms.
func humanize(s string) string {
	s = bigNumber.ReplaceAllStringFunc(s, func(v string) string {
		n, _ := strconv.ParseUint(v, 10, 64)
		return offs(n)
	})
	return stripeHex.ReplaceAllStringFunc(s, func(v string) string {
		m := stripeHex.FindStringSubmatch(v)
		b, _ := strconv.ParseUint(m[1], 16, 8)
		return fmt.Sprintf("p%d/%s", int(b)-1, m[2])
	})
}
