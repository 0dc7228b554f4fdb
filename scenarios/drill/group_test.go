package drill

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMemberStarts(t *testing.T) {
	for _, c := range []struct {
		faulted []int
		want    string
	}{
		{nil, "[0 3]"},                     // no faults: spread
		{[]int{2}, "[2 5]"},                // one faulted node: member 0 starts there
		{[]int{1, 4}, "[1 4]"},             // two: one member on each
		{[]int{0, 1, 2, 3, 4, 5}, "[0 5]"}, // rolling
	} {
		if got := fmt.Sprint(memberStarts(c.faulted, 6, 2)); got != c.want {
			t.Errorf("memberStarts(%v) = %s, want %s", c.faulted, got, c.want)
		}
	}
	urls := []string{"a", "b", "c", "d", "e", "f"}
	if got := strings.Join(rotate(urls, 4), ","); got != "e,f,a,b,c,d" {
		t.Fatalf("rotate: %s", got)
	}
}

func TestParseMemberLine(t *testing.T) {
	h := newHistory(time.Now(), 2)
	// What `raidq consume --json` prints (cmd/raidq consume.go).
	line := `{"value":"p1-7|1700000000000000000|ab\u00e9","headers":{"Raidq-Offset":"12345"},"partition":2,"offset":12345,"index":3,"stripe":"0123abcd"}` + "\n"
	d, ok := parseMemberLine(h, []byte(line), 42)
	if !ok || !d.known || d.prod != 1 || d.seq != 7 || d.part != 2 || d.off != 12345 || d.idx != 3 || d.stripe != "0123abcd" || d.at != 42 {
		t.Fatalf("got %+v ok %v", d, ok)
	}
	if _, ok := parseMemberLine(h, []byte("  \n"), 0); ok {
		t.Fatal("a blank line is a delivery")
	}
	for _, bad := range []string{"raidq: connection lost", `{"value":"p9-1|5|x","partition":0}`, `{"value":"hello"}`} {
		d, ok := parseMemberLine(h, []byte(bad), 0)
		if !ok || d.known || d.raw == "" {
			t.Errorf("%q: got %+v ok %v", bad, d, ok)
		}
	}
	if d, _ := parseMemberLine(h, []byte("not json"), 0); !strings.Contains(d.raw, "not JSON") {
		t.Errorf("raw %q", d.raw)
	}
}

func TestTallyGroup(t *testing.T) {
	acked := func(part int) sendRec { return sendRec{status: statusAcked, part: int32(part)} }
	prods := [][]sendRec{
		{acked(0), acked(0), acked(1), {status: statusFailed}}, // p0
		{acked(2), acked(2)}, // p1: p1-1 never delivered
	}
	d := func(member string, prod, seq, part int, at int64) memberDelivery {
		return memberDelivery{delivery: delivery{known: true, prod: prod, seq: seq, part: part, at: at}, member: member}
	}
	dels := []memberDelivery{
		d("g0#1", 0, 0, 0, 1), d("g0#1", 0, 1, 0, 2),
		d("g1#1", 0, 1, 0, 3), // p0-1 again, by the other member
		d("g1#1", 0, 2, 1, 4),
		d("g0#2", 0, 2, 1, 5),                        // p0-2 again, by a restarted member
		d("g1#1", 1, 0, 2, 6), d("g1#1", 1, 0, 2, 7), // p1-0 twice by one process
		d("g0#2", 0, 3, 1, 8), // failed, delivered anyway: recovered
		{delivery: delivery{raw: `not JSON: "x"`}, member: "g0#2"},
	}
	g := tallyGroup(prods, dels)
	if g.acked != 5 || g.lost != 1 || g.lost_[0] != key(1, 1) || g.duplicates != 3 || g.duplicateRecords != 3 ||
		g.acrossMembers != 2 || g.unexpected != 1 || g.recovered != 1 {
		t.Fatalf("%+v", g)
	}
	if len(g.dupSamples) != 3 || g.dupSamples[0] != "p0-1 partition 0: g0#1 at 0.00s, again g1#1 at 0.00s" {
		t.Fatalf("duplicate samples %q", g.dupSamples)
	}
	if last := g.lastByPart[1]; last.member != "g0#2" || last.at != 8 {
		t.Fatalf("last of partition 1: %+v", last)
	}
	if none := tallyGroup(prods, nil); none.lost != 5 || none.duplicates != 0 || len(none.lastByPart) != 0 {
		t.Fatalf("no deliveries: %+v", none)
	}
}

func TestLineTail(t *testing.T) {
	lt := &lineTail{max: 3}
	for _, s := range []string{"one\ntw", "o\nthree\n", strings.Repeat("x", 600) + "\n", "part"} {
		if n, err := lt.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write: %d %v", n, err)
		}
	}
	got := strings.Split(lt.tail(10), "\n")
	if len(got) != 4 || got[0] != "two" || got[1] != "three" || got[2] != strings.Repeat("x", 500) || got[3] != "part" {
		t.Fatalf("%q", got)
	}
	if lt.tail(1) != "part" {
		t.Fatalf("tail(1) = %q", lt.tail(1))
	}
}

// TestLiveGroupSupervision runs a fake member (a shell script, no nodes):
// its first process prints a record and exits 3, the restarted one prints
// the next and exits 0 on SIGINT. The exit is recorded with its stderr and
// the stop is clean.
func TestLiveGroupSupervision(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	mark := filepath.Join(dir, "started")
	script := filepath.Join(dir, "raidq")
	body := `#!/bin/sh
if [ ! -e ` + mark + ` ]; then
	: > ` + mark + `
	echo '{"value":"p0-0|1|x","partition":0,"offset":1,"index":0,"stripe":"s1"}'
	echo "raidq: boom" >&2
	exit 3
fi
trap 'exit 0' INT
echo '{"value":"p0-1|1|x","partition":1,"offset":2,"index":0,"stripe":"s2"}'
while :; do sleep 0.05; done
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	g := &liveGroup{bin: script, args: []string{"consume"}, lists: []string{"nats://x"}, restartDelay: 0,
		event: func(string, string, ...any) {}, got: make(map[uint64]int), quit: make(chan struct{}), procs: make([]*memberProc, 1)}
	g.setStart(start, newHistory(start, 1))
	if err := g.run(); err != nil {
		t.Fatal(err)
	}
	res := g.stop(map[uint64]bool{key(0, 0): true, key(0, 1): true}, time.Now().Add(20*time.Second), func(int) {})
	if len(res.dels) != 2 || res.dels[0].member != "g0#1" || res.dels[1].member != "g0#2" || !res.dels[1].known {
		t.Fatalf("deliveries %+v", res.dels)
	}
	if len(res.exits) != 1 || res.exits[0].member != "g0#1" || res.exits[0].code != 3 || !strings.Contains(res.exits[0].tail, "boom") {
		t.Fatalf("exits %+v", res.exits)
	}
	if len(res.stopFail) != 0 {
		t.Fatalf("stop: %v", res.stopFail)
	}
	g.close() // after stop: nothing left to do
}
