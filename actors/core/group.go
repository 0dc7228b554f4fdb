package core

import (
	"fmt"
	"slices"
	"sort"

	"github.com/raidq/raidq/stripe/invariants"
	"github.com/raidq/raidq/stripe/placement"
)

// Consumer groups (docs/design.md#consumers-groups-and-fencing; the generations of Kafka's group protocol).
//
// The policy of a group member lives here, pure: who is alive, which
// partitions a member owns, and when it may claim, must release or must
// pause one. The driver (the root package's groups.go) reads the groups
// bucket, feeds the results in with its own monotonic clock, and carries
// out the plan.
//
// Liveness is judged the way Kafka's coordinator does, by each observer on
// its own clock: a member is alive while its heartbeat revision (the KV
// entry's revision, which every heartbeat write advances) keeps changing
// within the member's session timeout. No timestamp written by a member's
// clock, nor the clock of the KV stream's leader, is compared with
// anything. Time during which the observer's listings fail does not count:
// a stall of the metadata KV (seconds while its Raft leader moves) makes
// nobody dead, and a lossy one still lets a crashed member be judged dead.
//
// Handover is revoke before assign: a member claims a partition only once
// its position record names no owner (released), names itself, or names a
// member the claimant judges dead. The owner that must give a partition up
// stops its reader, commits what the application processed and releases
// the record in one compare-and-set write. So two live members never read
// one partition at once, and a partition moves without redelivery.

// MemberBeat is one member's heartbeat as listed: its record's revision
// and the session timeout it asked for (ns).
type MemberBeat struct {
	Revision uint64
	Session  int64
}

// Liveness is one observer's view of a group's members.
type Liveness struct {
	members map[string]*beatSeen
	// lastOK is the last successful listing; failing says a listing
	// failed since. The time from lastOK to the next success does not
	// count toward anyone's session: the observer could not see whether
	// revisions moved then.
	lastOK  int64
	failing bool
}

type beatSeen struct {
	rev     uint64
	session int64
	since   int64 // observer time when rev was first seen
	blind   int64 // time since then when the observer could not list
}

// NewLiveness starts an observer at now: every member gets a full session
// from its first sighting.
func NewLiveness(now int64) *Liveness {
	return &Liveness{members: make(map[string]*beatSeen), lastOK: now}
}

// Observe records a successful listing at now. Members missing from it
// have left (their record was deleted) and are forgotten.
func (l *Liveness) Observe(now int64, beats map[string]MemberBeat) {
	var blind int64
	if l.failing {
		blind = now - l.lastOK
	}
	l.lastOK, l.failing = now, false
	for m := range l.members {
		if _, ok := beats[m]; !ok {
			delete(l.members, m)
		}
	}
	for m, b := range beats {
		s := l.members[m]
		if s == nil || s.rev != b.Revision {
			l.members[m] = &beatSeen{rev: b.Revision, session: b.Session, since: now}
			continue
		}
		s.session = b.Session
		s.blind += blind
	}
}

// Behind reports whether a listing shows a member at a lower revision
// than one this observer already took for it: revisions only grow (a
// deleted and recreated record gets a higher one), so the listing was
// answered from an older state of the KV (a replica behind, a former
// leader resuming). The caller takes it for a failed listing (Failed):
// observed, it would make a live member's heartbeat look stopped.
func (l *Liveness) Behind(beats map[string]MemberBeat) bool {
	for m, b := range beats {
		if s := l.members[m]; s != nil && b.Revision < s.rev {
			return true
		}
	}
	return false
}

// Failed records a listing that failed at now. Sessions stop running
// until the next success: a metadata stall judges nobody dead, and a
// lossy metadata store only slows the judgement by the time it hid.
func (l *Liveness) Failed(now int64) { l.failing = true }

// Alive reports whether member m is alive at now in this observer's view.
func (l *Liveness) Alive(now int64, m string) bool {
	s := l.members[m]
	if s == nil {
		return false
	}
	seen := now - s.since - s.blind
	if l.failing {
		seen -= now - max(l.lastOK, s.since)
	}
	return seen < s.session
}

// Live lists the members alive at now, sorted.
func (l *Liveness) Live(now int64) []string {
	var out []string
	for m := range l.members {
		if l.Alive(now, m) {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}

// AssignPartitions returns the partitions member owns among members: those
// for which it has the highest rendezvous hash of group/topic/partition/
// member (ties to the smaller id). A member joining or leaving moves only
// its own share.
func AssignPartitions(group, topic string, partitions int, members []string, member string) []int {
	var out []int
	for p := 0; p < partitions; p++ {
		best := placement.Winner(fmt.Sprintf("%s/%s/%d", group, topic, p), members)
		if best == member {
			out = append(out, p)
		}
	}
	return out
}

// GroupView is what a member knows at one rebalance.
type GroupView struct {
	Group, Topic string
	Partitions   int
	Me           string
	// Live are the members alive in this member's view (Liveness.Live).
	// Me is counted whether or not its own heartbeat is listed yet.
	Live []string
	// Owners is each partition's position record owner ("" or absent: no
	// record, or released).
	Owners map[int]string
	// Held are the partitions this member reads now.
	Held map[int]bool
	// Revs are the listed records' revisions and HeldRevs the revision
	// of this member's last write of each held record (nil: not known).
	Revs, HeldRevs map[int]uint64
	// Releasing are partitions this member gave up whose record it has
	// not released yet (it retries).
	Releasing map[int]bool
}

// GroupPlan is what a member must do after a rebalance.
type GroupPlan struct {
	// Release: held partitions assigned elsewhere now. Stop reading,
	// commit what was processed and release the record.
	Release []int
	// Fenced: held partitions whose record names another member (it
	// judged this one dead). Stop reading; commit nothing.
	Fenced []int
	// Claim: partitions assigned here that are free to take.
	Claim []int
	// Wait: partitions assigned here still held by a live member, which
	// releases them at its next rebalance (revoke before assign).
	Wait []int
	// Orphans: records naming this member that it neither holds nor is
	// releasing, assigned elsewhere: a claim or commit whose answer was
	// lost. Release them (keeping the position), or the assignee would
	// wait for ever.
	Orphans []int
}

// PlanGroup decides a member's moves from its view.
func PlanGroup(v GroupView) GroupPlan {
	members := v.Live
	if !slices.Contains(members, v.Me) {
		members = append(append([]string(nil), members...), v.Me)
	}
	want := make(map[int]bool)
	for _, p := range AssignPartitions(v.Group, v.Topic, v.Partitions, members, v.Me) {
		want[p] = true
	}
	var plan GroupPlan
	for p := 0; p < v.Partitions; p++ {
		owner := v.Owners[p]
		// A held record rewritten by another since this member's last
		// write (claimed and released meanwhile: it names no one now) is
		// lost too, not only one naming another member.
		rewritten := v.HeldRevs != nil && v.Revs[p] > v.HeldRevs[p] && owner != v.Me
		switch {
		case v.Held[p] && (owner != "" && owner != v.Me || rewritten):
			plan.Fenced = append(plan.Fenced, p)
		case v.Held[p] && !want[p]:
			plan.Release = append(plan.Release, p)
		case v.Held[p]:
		case !want[p]:
			if owner == v.Me && !v.Releasing[p] {
				plan.Orphans = append(plan.Orphans, p)
			}
		case owner == "" || owner == v.Me || !slices.Contains(v.Live, owner):
			plan.Claim = append(plan.Claim, p)
		default:
			plan.Wait = append(plan.Wait, p)
		}
	}
	if invariants.Enabled {
		checkPlan(v, want, plan)
	}
	return plan
}

// checkPlan asserts that a plan keeps one owner per partition: each
// partition is in at most one of its lists; the member goes on reading
// (held and not given up) or claims only partitions assigned to it whose
// record names no one, itself, or (a claim) a member it judges dead; it
// waits for a partition whose record names a live member; it releases
// or is fenced on only what it holds. With every member's plan so, and
// one assignee per partition (AssignPartitions), no two live members
// read one partition.
func checkPlan(v GroupView, want map[int]bool, plan GroupPlan) {
	in := make(map[int]string)
	note := func(list string, ps []int) {
		for _, p := range ps {
			if prev, dup := in[p]; dup || p < 0 || p >= v.Partitions {
				invariants.Failf("group %s member %s: partition %d of %d in plan list %s (and %q)", v.Group, v.Me, p, v.Partitions, list, prev)
			}
			in[p] = list
		}
	}
	note("release", plan.Release)
	note("fenced", plan.Fenced)
	note("claim", plan.Claim)
	note("wait", plan.Wait)
	note("orphans", plan.Orphans)
	for p := 0; p < v.Partitions; p++ {
		owner, list := v.Owners[p], in[p]
		otherLive := owner != "" && owner != v.Me && slices.Contains(v.Live, owner)
		reads := list == "claim" || v.Held[p] && list == ""
		switch {
		case reads && (!want[p] || otherLive || v.Held[p] && owner != "" && owner != v.Me):
			invariants.Failf("group %s member %s: reads partition %d (held=%v, assigned=%v), whose record names %q (live: %v)",
				v.Group, v.Me, p, v.Held[p], want[p], owner, v.Live)
		case list == "wait" && (!want[p] || v.Held[p] || !otherLive):
			invariants.Failf("group %s member %s: waits for partition %d (held=%v, assigned=%v), whose record names %q (live: %v)",
				v.Group, v.Me, p, v.Held[p], want[p], owner, v.Live)
		case (list == "release" || list == "fenced") && !v.Held[p]:
			invariants.Failf("group %s member %s: %s partition %d, which it does not hold", v.Group, v.Me, list, p)
		}
	}
}

// PauseAfter is how long a member may go without a successful heartbeat
// before it pauses delivery: past it, another member may judge it dead
// (after its session, measured from a later point on the observer's
// clock) and claim its partitions, so it stops first. Three quarters of
// the session leaves a margin for the clocks' rates and the write's
// flight time.
func PauseAfter(session int64) int64 { return session * 3 / 4 }
