package sim

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"time"
)

// The metadata KV (the JetStream KV bucket of bus/meta that holds group
// heartbeats, group positions and fan-out leases), simulated: keys with
// values and revisions drawn from one stream sequence, as JetStream's
// are, and the operations bus/meta uses: Put, Create (fails if the key
// exists), Update (compare-and-set on the key's revision), Delete, Get
// and List (by key prefix: bus/meta's eachEntry, a key listing then a Get
// of each key; atomic unless KVConfig.PartialLists says otherwise).
//
// Every call crosses the network both ways (kvHop each way, each message
// lost with KVConfig.Drop, a write's reply also with KVConfig.LostAcks:
// applied, but the client never hears) and has a client timeout, as the driver's
// context deadlines give it. A call that times out may still have been
// applied: its reply was lost, or the KV applied it late. Faults:
//   - stalls (KVConfig.Stalls): every call fails for everyone, the Raft
//     leader of the KV stream moving. A failing stall answers at once with
//     an error; a hanging one holds the requests and applies them when it
//     ends (the new leader commits the proposals), so a client that gave
//     up meanwhile may find its write applied after all.
//   - cut-offs: one client cannot reach the KV while the others can
//     (GroupConfig.CutOffs, LeaseConfig.CutOffs): its requests and the
//     replies to it are lost (hang) or refused at once (fail).
//   - partial listings (KVConfig.PartialLists): a key listing is a
//     JetStream watch that ends when its pending count reaches zero, so a
//     key updated while it runs (its old message gone, the new one after
//     the end) is missed without an error. Such a List runs for up to
//     KVConfig.ListTime and quietly leaves out every key whose revision
//     changed (or that was created or deleted) while it ran; the others
//     carry their values at its end, as bus/meta's Get of each key does.
//   - stale reads (KVConfig.MaxStale): a replica behind, or a former
//     leader resuming (a stopped server continued), answers reads from
//     its old state while the stream moved on. In a stale window, half of
//     the Gets and Lists (drawn per read) see the KV as it was when the
//     window's fault began, at most MaxStale before the read; writes and
//     their compare-and-set always apply to the current state. Windows:
//     StaleFor after every stall (every client) and after every cut-off
//     (the client cut off: the server it was stuck on resumes), and
//     StaleWindows random ones of StaleFor, each for the first client that
//     reads in it.
//
// With every one of these knobs zero the KV draws nothing for them, so
// seeds without them replay as before.

// errKVTimeout: the client's deadline passed without a reply.
var errKVTimeout = errors.New("kv: timeout")

// errKVUnavailable: the KV refused the request (a stall or cut-off that
// fails fast: no responders, no leader).
var errKVUnavailable = errors.New("kv: unavailable")

// errKVFenced: a Create found the key or an Update a newer revision
// (meta.ErrFenced).
var errKVFenced = errors.New("kv: wrong last revision")

// kvHop bounds one KV message's flight, in ns: 0.2 ms to this.
const kvHop = 3 * int64(time.Millisecond)

type kvKind uint8

const (
	kvPut kvKind = iota
	kvCreate
	kvUpdate
	kvDelete
	kvGet
	kvList
)

var kvKindNames = []string{"put", "create", "update", "delete", "get", "list"}

// kvOp is one KV request.
type kvOp struct {
	kind kvKind
	key  string // the key, or the prefix of a List
	val  any
	rev  uint64 // Update: the revision the key must have
	// issued runs on the loop when the client sends op, applied when the
	// KV applies it (a write that succeeded): the group checks' view of
	// the position records' writes (group_ports.go).
	issued, applied func()
}

func (op kvOp) String() string { return kvKindNames[op.kind] + " " + op.key }

// kvEntry is one key's value and revision.
type kvEntry struct {
	val any
	rev uint64
}

// kvReply is the KV's answer to one call.
type kvReply struct {
	err   error
	rev   uint64             // the new revision of a write
	entry kvEntry            // Get
	found bool               // Get: the key exists
	list  map[string]kvEntry // List
	stale bool               // a read answered from an old state
}

// kvFault is one stall (everyone) or cut-off (one client): [from, to).
type kvFault struct {
	from, to int64
	hang     bool
}

// kvStore is the KV and its fault plan.
type kvStore struct {
	s    *sim
	seq  uint64
	data map[string]kvEntry
	// hist keeps every version of every key, with when it was written (a
	// delete is a version with gone set), for the stale reads; only
	// with KVConfig.MaxStale.
	hist   map[string][]kvVersion
	stale  []*staleWin // KVConfig.StaleWindows
	stalls []kvFault
	cuts   map[string][]kvFault // by client name
	losses map[string][]int64   // by client name: when a request or reply of its was lost
	calls  int
	failed int
}

// kvVersion is one write of a key, kept for the stale reads.
type kvVersion struct {
	at    int64
	entry kvEntry
	gone  bool
}

// staleWin is a random stale window: [from, to), for client (the first
// one that reads in it), seeing the KV as of snap.
type staleWin struct {
	from, to, snap int64
	client         string
}

func newKV(s *sim) *kvStore {
	return &kvStore{s: s, data: map[string]kvEntry{}, cuts: map[string][]kvFault{}, losses: map[string][]int64{},
		hist: map[string][]kvVersion{}}
}

// stalled returns the stall open at t, if any.
func (kv *kvStore) stalled(t int64) (kvFault, bool) { return faultAt(kv.stalls, t) }

// cutOff returns client's cut-off open at t, if any.
func (kv *kvStore) cutOff(client string, t int64) (kvFault, bool) { return faultAt(kv.cuts[client], t) }

func faultAt(fs []kvFault, t int64) (kvFault, bool) {
	for _, f := range fs {
		if f.from <= t && t < f.to {
			return f, true
		}
	}
	return kvFault{}, false
}

// call sends op for client and calls done exactly once: with the KV's
// reply, or with errKVTimeout at now+timeout. Callers guard done against
// their own crashes (member.guard, holder.guard).
func (kv *kvStore) call(client string, op kvOp, timeout int64, done func(kvReply)) {
	s := kv.s
	kv.calls++
	settled := false
	finish := func(rep kvReply) {
		if settled {
			return
		}
		settled = true
		if rep.err != nil {
			kv.failed++
		}
		done(rep)
	}
	s.at(s.now+max(timeout, 0), func() { finish(kvReply{err: errKVTimeout}) })
	if timeout <= 0 {
		return
	}
	if c, ok := kv.cutOff(client, s.now); ok {
		if !c.hang {
			s.at(s.now+kv.hop(), func() { finish(kvReply{err: errKVUnavailable}) })
		}
		return
	}
	if kv.lost() {
		kv.losses[client] = append(kv.losses[client], s.now)
		s.log.add("kv: lost %s request %s", client, op)
		return
	}
	s.at(s.now+kv.hop(), func() {
		if st, ok := kv.stalled(s.now); ok {
			if !st.hang {
				kv.reply(client, kvOp{kind: kvGet}, kvReply{err: errKVUnavailable}, finish)
				return
			}
			s.at(st.to, func() { kv.serve(client, op, true, finish) })
			return
		}
		kv.serve(client, op, false, finish)
	})
}

// serve carries out op at the KV now and sends the reply: at once, or,
// for a listing drawn partial, once the listing has run.
func (kv *kvStore) serve(client string, op kvOp, late bool, finish func(kvReply)) {
	s := kv.s
	c := s.cfg.KV
	if op.kind != kvList || c.PartialLists <= 0 || s.rnd.Float64() >= c.PartialLists {
		kv.reply(client, op, kv.apply(client, op, late), finish)
		return
	}
	// A partial listing: the keys and revisions as it starts; it leaves
	// out those that moved by its end.
	start := kv.apply(client, op, late)
	dur := int64(time.Millisecond) + s.rnd.Int64N(max(int64(c.ListTime)-int64(time.Millisecond), 1))
	s.at(s.now+dur, func() {
		var missed []string
		for k, e := range start.list {
			if cur, ok := kv.data[k]; start.stale || ok && cur.rev == e.rev {
				continue // a stale replica's listing stays as it began
			}
			delete(start.list, k)
			missed = append(missed, k)
		}
		if len(missed) > 0 {
			slices.Sort(missed)
			s.res.KVPartialLists++
			s.log.add("kv: %s's listing of %s (%v) missed %s, written while it ran", client, op.key,
				time.Duration(dur), strings.Join(missed, ","))
		}
		kv.reply(client, op, start, finish)
	})
}

// reply sends rep to op back to client, unless the message is lost (a
// write's reply also with KVConfig.LostAcks) or the client is cut off
// when it arrives.
func (kv *kvStore) reply(client string, op kvOp, rep kvReply, finish func(kvReply)) {
	s := kv.s
	write := op.kind != kvGet && op.kind != kvList
	if kv.lost() || (write && kv.s.cfg.KV.LostAcks > 0 && kv.s.rnd.Float64() < kv.s.cfg.KV.LostAcks) {
		kv.losses[client] = append(kv.losses[client], s.now)
		s.log.add("kv: lost reply to %s for %s", client, op)
		return
	}
	s.at(s.now+kv.hop(), func() {
		if c, ok := kv.cutOff(client, s.now); ok && c.hang {
			return
		}
		finish(rep)
	})
}

func (kv *kvStore) hop() int64 { return 200_000 + kv.s.rnd.Int64N(kvHop-200_000) }

func (kv *kvStore) lost() bool {
	d := kv.s.cfg.KV.Drop
	return d > 0 && kv.s.rnd.Float64() < d
}

// apply carries out op at the KV now. late: it was held by a hanging
// stall.
func (kv *kvStore) apply(client string, op kvOp, late bool) kvReply {
	s := kv.s
	cur, exists := kv.data[op.key]
	var rep kvReply
	if op.kind == kvGet || op.kind == kvList {
		if snap, ok := kv.staleAt(client); ok {
			rep = kv.readAt(op, snap)
			s.res.KVStaleReads++
			s.log.add("kv: %s's %s answered stale, as of %s", client, op, s.log.at(snap))
			return rep
		}
	}
	switch op.kind {
	case kvGet:
		rep.entry, rep.found = cur, exists
	case kvList:
		rep.list = map[string]kvEntry{}
		for k, e := range kv.data {
			if strings.HasPrefix(k, op.key) {
				rep.list[k] = e
			}
		}
	case kvDelete:
		kv.seq++
		delete(kv.data, op.key)
		kv.keep(op.key, kvEntry{}, true)
	case kvCreate, kvUpdate:
		if (op.kind == kvCreate && exists) || (op.kind == kvUpdate && (!exists || cur.rev != op.rev)) {
			rep.err = errKVFenced
			break
		}
		fallthrough
	case kvPut:
		kv.seq++
		kv.data[op.key] = kvEntry{val: op.val, rev: kv.seq}
		kv.keep(op.key, kv.data[op.key], false)
		rep.rev = kv.seq
		if op.applied != nil {
			op.applied()
		}
	}
	if op.kind != kvGet && op.kind != kvList {
		note := ""
		if late {
			note = " (held by the stall, applied at its end)"
		}
		s.log.add("kv: %s %s rev=%d err=%v%s", client, op, rep.rev, rep.err, note)
	}
	return rep
}

// keep records a write for the stale reads (only with KVConfig.MaxStale).
func (kv *kvStore) keep(key string, e kvEntry, gone bool) {
	if kv.s.cfg.KV.MaxStale > 0 {
		kv.hist[key] = append(kv.hist[key], kvVersion{at: kv.s.now, entry: e, gone: gone})
	}
}

// staleAt reports whether client's read now is answered stale, and as of
// when: in a stale window (after a stall, after the client's cut-off, or
// a random one of its), half the reads are.
func (kv *kvStore) staleAt(client string) (int64, bool) {
	s, c := kv.s, kv.s.cfg.KV
	if c.MaxStale <= 0 {
		return 0, false
	}
	now, snap, in := s.now, int64(0), false
	after := func(fs []kvFault) {
		for _, f := range fs {
			if f.to <= now && now < f.to+int64(c.StaleFor) {
				snap, in = max(f.from, now-int64(c.MaxStale)), true
			}
		}
	}
	after(kv.stalls)
	after(kv.cuts[client])
	for _, w := range kv.stale {
		if w.from <= now && now < w.to && (w.client == "" || w.client == client) {
			if w.client == "" {
				w.client = client
				s.log.add("kv: %s reads stale (as of %s) until %s", client, s.log.at(w.snap), s.log.at(w.to))
			}
			snap, in = w.snap, true
		}
	}
	if !in || s.rnd.IntN(2) == 0 {
		return 0, false
	}
	return snap, true
}

// readAt answers a Get or List from the KV as it was at snap.
func (kv *kvStore) readAt(op kvOp, snap int64) kvReply {
	at := func(k string) (kvEntry, bool) {
		vs := kv.hist[k]
		i, _ := slices.BinarySearchFunc(vs, snap, func(v kvVersion, t int64) int { return cmp.Compare(v.at, t+1) })
		if i == 0 || vs[i-1].gone {
			return kvEntry{}, false
		}
		return vs[i-1].entry, true
	}
	rep := kvReply{stale: true}
	if op.kind == kvGet {
		rep.entry, rep.found = at(op.key)
		return rep
	}
	rep.list = map[string]kvEntry{}
	for k := range kv.hist {
		if !strings.HasPrefix(k, op.key) {
			continue
		}
		if e, ok := at(k); ok {
			rep.list[k] = e
		}
	}
	return rep
}

// planKVFaults draws the stalls of KVConfig within [from, to), and its
// random stale windows.
func (s *sim) planKVFaults(from, to int64) {
	c := s.cfg.KV
	for range c.Stalls {
		at := from + s.rnd.Int64N(max(to-from, 1))
		f := kvFault{from: at, to: at + int64(time.Second) + s.rnd.Int64N(max(int64(c.MaxStall)-int64(time.Second), 1)),
			hang: s.rnd.IntN(2) == 0}
		s.kv.stalls = append(s.kv.stalls, f)
		s.at(f.from, func() {
			s.res.KVStalls++
			s.log.add("KV STALL (%s) until %s", hangName(f.hang), s.log.at(f.to))
		})
		s.at(f.to, func() { s.log.add("KV stall ends") })
	}
	slices.SortFunc(s.kv.stalls, func(a, b kvFault) int { return cmp.Compare(a.from, b.from) })
	if c.MaxStale <= 0 {
		return
	}
	for range c.StaleWindows {
		at := from + s.rnd.Int64N(max(to-from, 1))
		snap := at - int64(time.Second) - s.rnd.Int64N(max(int64(c.MaxStale)-int64(time.Second), 1))
		s.kv.stale = append(s.kv.stale, &staleWin{from: at, to: at + int64(c.StaleFor), snap: snap})
	}
}

// planCutOff cuts client off the KV once for 1 s to max, starting within
// [from, to).
func (s *sim) planCutOff(client string, from, to int64, maxLen time.Duration) {
	at := from + s.rnd.Int64N(max(to-from, 1))
	f := kvFault{from: at, to: at + int64(time.Second) + s.rnd.Int64N(max(int64(maxLen)-int64(time.Second), 1)),
		hang: s.rnd.IntN(2) == 0}
	s.kv.cuts[client] = append(s.kv.cuts[client], f)
	s.at(f.from, func() {
		s.res.KVCutOffs++
		s.log.add("%s CUT OFF from the KV (%s) until %s", client, hangName(f.hang), s.log.at(f.to))
	})
	s.at(f.to, func() { s.log.add("%s reaches the KV again", client) })
}

func hangName(hang bool) string {
	if hang {
		return "hang"
	}
	return "fail"
}
