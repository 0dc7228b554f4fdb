package core

import (
	"fmt"
	"slices"
	"testing"
)

const sec = int64(1_000_000_000)

// TestLivenessByRevision: a member is alive while its revision advances
// within its session on the observer's clock, whatever its own clock
// says; time the observer could not list does not count; a member whose
// record is gone has left.
func TestLivenessByRevision(t *testing.T) {
	l := NewLiveness(0)
	beats := map[string]MemberBeat{"a": {Revision: 1, Session: 10 * sec}, "b": {Revision: 2, Session: 10 * sec}}
	l.Observe(0, beats)
	for now := int64(1); now <= 20; now++ {
		beats["a"] = MemberBeat{Revision: uint64(10 + now), Session: 10 * sec} // a heartbeats, b does not
		l.Observe(now*sec, beats)
	}
	if got := l.Live(20 * sec); fmt.Sprint(got) != "[a]" {
		t.Fatalf("live %v, want [a]: b's revision has not moved for 20s", got)
	}
	// A stall: listings fail for 30 s; nobody is judged dead on that time.
	l2 := NewLiveness(0)
	l2.Observe(0, map[string]MemberBeat{"a": {Revision: 1, Session: 10 * sec}})
	l2.Failed(25 * sec)
	if !l2.Alive(30*sec, "a") {
		t.Fatal("a judged dead across a failed listing")
	}
	l2.Observe(31*sec, map[string]MemberBeat{"a": {Revision: 1, Session: 10 * sec}})
	if !l2.Alive(40*sec, "a") || l2.Alive(41*sec, "a") {
		t.Fatal("the time the observer could not list must not count: a's session runs from the listing after the stall")
	}
	// A lossy store: one listing in five fails. A member that stopped
	// heartbeating is still judged dead, a little later than its session
	// (a failure restarting every judgement would never let it die).
	l3 := NewLiveness(0)
	dead := int64(-1)
	for now := int64(0); now <= 60; now++ {
		if now%5 == 4 {
			l3.Failed(now * sec)
			continue
		}
		l3.Observe(now*sec, map[string]MemberBeat{"a": {Revision: 1, Session: 10 * sec}})
		if dead < 0 && !l3.Alive(now*sec, "a") {
			dead = now
		}
	}
	if dead < 10 || dead > 16 {
		t.Fatalf("silent member judged dead at %ds with a lossy store, want 10-16s", dead)
	}
	l2.Observe(40*sec, map[string]MemberBeat{})
	if l2.Alive(40*sec, "a") {
		t.Fatal("a member whose record is gone has left")
	}
}

// TestPlanRevokeBeforeAssign: a new member waits for partitions a live
// member still holds; the holder releases them; then the newcomer claims.
// A dead holder's partitions are claimed at once; a record naming another
// member fences the holder.
func TestPlanRevokeBeforeAssign(t *testing.T) {
	const parts = 8
	all := []string{"a", "b"}
	aWants := AssignPartitions("g", "t", parts, all, "a")
	bWants := AssignPartitions("g", "t", parts, all, "b")
	if len(aWants) == 0 || len(bWants) == 0 {
		t.Fatalf("assignment %v / %v", aWants, bWants)
	}
	owners := make(map[int]string)
	heldA := make(map[int]bool)
	for p := range parts {
		owners[p], heldA[p] = "a", true
	}
	nb := PlanGroup(GroupView{Group: "g", Topic: "t", Partitions: parts, Me: "b", Live: all, Owners: owners, Held: map[int]bool{}})
	if len(nb.Claim) != 0 || !slices.Equal(nb.Wait, bWants) {
		t.Fatalf("newcomer plan %+v, want to wait for %v", nb, bWants)
	}
	pa := PlanGroup(GroupView{Group: "g", Topic: "t", Partitions: parts, Me: "a", Live: all, Owners: owners, Held: heldA})
	if !slices.Equal(pa.Release, bWants) || len(pa.Claim)+len(pa.Fenced)+len(pa.Wait) != 0 {
		t.Fatalf("holder plan %+v, want to release %v", pa, bWants)
	}
	for _, p := range pa.Release {
		owners[p] = ""
	}
	nb = PlanGroup(GroupView{Group: "g", Topic: "t", Partitions: parts, Me: "b", Live: all, Owners: owners, Held: map[int]bool{}})
	if !slices.Equal(nb.Claim, bWants) || len(nb.Wait) != 0 {
		t.Fatalf("after the release: %+v, want to claim %v", nb, bWants)
	}
	// a is dead in b's view: b claims without waiting.
	for p := range parts {
		owners[p] = "a"
	}
	nb = PlanGroup(GroupView{Group: "g", Topic: "t", Partitions: parts, Me: "b", Live: []string{"b"}, Owners: owners, Held: map[int]bool{}})
	if len(nb.Claim) != parts {
		t.Fatalf("dead holder: %+v, want every partition claimed", nb)
	}
	// A record naming a but neither held nor assigned to it (a claim
	// whose answer was lost) is an orphan: a releases it.
	pa = PlanGroup(GroupView{Group: "g", Topic: "t", Partitions: parts, Me: "a", Live: all, Owners: map[int]string{bWants[0]: "a"},
		Held: map[int]bool{}})
	if !slices.Equal(pa.Orphans, []int{bWants[0]}) {
		t.Fatalf("plan %+v, want partition %d released as an orphan", pa, bWants[0])
	}
	// Held, but the record was rewritten since a's last write and names
	// no one (claimed and released by another meanwhile): fenced.
	pa = PlanGroup(GroupView{Group: "g", Topic: "t", Partitions: parts, Me: "a", Live: all, Owners: map[int]string{aWants[0]: ""},
		Held: map[int]bool{aWants[0]: true}, Revs: map[int]uint64{aWants[0]: 9}, HeldRevs: map[int]uint64{aWants[0]: 5}})
	if !slices.Equal(pa.Fenced, []int{aWants[0]}) {
		t.Fatalf("plan %+v, want the rewritten partition %d fenced", pa, aWants[0])
	}
	// b claimed partition 0 while a still held it: a is fenced there.
	owners[0] = "b"
	pa = PlanGroup(GroupView{Group: "g", Topic: "t", Partitions: parts, Me: "a", Live: []string{"a"}, Owners: owners, Held: heldA})
	if !slices.Equal(pa.Fenced, []int{0}) {
		t.Fatalf("plan %+v, want partition 0 fenced", pa)
	}
}

func TestPauseAfterWithinSession(t *testing.T) {
	if s := 10 * sec; PauseAfter(s) >= s || PauseAfter(s) <= s/2 {
		t.Fatalf("PauseAfter(%d) = %d", s, PauseAfter(s))
	}
}

// TestLeaseWatch: a lease lapses only after its revision stood still for
// the TTL on the observer's clock; a renewal or a failed read restarts it.
func TestLeaseWatch(t *testing.T) {
	var w LeaseWatch
	w.Observe(0, 7)
	if w.Lapsed(4*sec, 5*sec) {
		t.Fatal("lapsed before the TTL")
	}
	w.Observe(4*sec, 8) // renewed
	if w.Lapsed(8*sec, 5*sec) || !w.Lapsed(9*sec, 5*sec) {
		t.Fatal("a renewal must restart the TTL")
	}
	w.Failed(10 * sec)
	if w.Lapsed(20*sec, 5*sec) {
		t.Fatal("lapsed without a successful read")
	}
	w.Observe(20*sec, 8)
	if w.Lapsed(24*sec, 5*sec) || !w.Lapsed(25*sec, 5*sec) {
		t.Fatal("after a failed read the TTL runs from the next read")
	}
}

// TestClockWatch: the median of the peers' offsets decides, with
// hysteresis; one wild peer or too few answers change nothing.
func TestClockWatch(t *testing.T) {
	w := ClockWatch{Bound: sec, MinPeers: 2}
	if w.Observe([]int64{10 * sec}) {
		t.Fatal("one answer must not decide")
	}
	if w.Observe([]int64{0, 1, 10 * sec, -2, 3}) {
		t.Fatal("one wild peer moved the median")
	}
	if !w.Observe([]int64{-10 * sec, -10 * sec, -10*sec + 5, -10 * sec}) {
		t.Fatal("ten seconds off: must turn off")
	}
	if off, med := w.Off(); !off || med > -9*sec {
		t.Fatalf("off %v median %d", off, med)
	}
	if w.Observe([]int64{-sec * 3 / 4, -sec * 3 / 4, -sec * 3 / 4}) {
		t.Fatal("within the bound but above half of it: must stay off")
	}
	if !w.Observe([]int64{0, 1, 2}) {
		t.Fatal("back within half the bound: must turn on")
	}
}

// TestLivenessBehind: a listing showing a member at a lower revision than
// already observed was answered from an older state; a higher or equal
// one, or a member not seen yet, is not.
func TestLivenessBehind(t *testing.T) {
	l := NewLiveness(0)
	l.Observe(0, map[string]MemberBeat{"a": {Revision: 5, Session: 10 * sec}, "b": {Revision: 7, Session: 10 * sec}})
	if l.Behind(map[string]MemberBeat{"a": {Revision: 5}, "b": {Revision: 9}, "c": {Revision: 1}}) {
		t.Fatal("a current listing taken for an old one")
	}
	if !l.Behind(map[string]MemberBeat{"a": {Revision: 6}, "b": {Revision: 4}}) {
		t.Fatal("b's revision went back from 7 to 4: the listing is from an older state")
	}
}
