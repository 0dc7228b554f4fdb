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
// and List (by key prefix; atomic here, where bus/meta lists keys and then
// gets each).
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
}

// kvFault is one stall (everyone) or cut-off (one client): [from, to).
type kvFault struct {
	from, to int64
	hang     bool
}

// kvStore is the KV and its fault plan.
type kvStore struct {
	s      *sim
	seq    uint64
	data   map[string]kvEntry
	stalls []kvFault
	cuts   map[string][]kvFault // by client name
	losses map[string][]int64   // by client name: when a request or reply of its was lost
	calls  int
	failed int
}

func newKV(s *sim) *kvStore {
	return &kvStore{s: s, data: map[string]kvEntry{}, cuts: map[string][]kvFault{}, losses: map[string][]int64{}}
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
			s.at(st.to, func() { kv.reply(client, op, kv.apply(client, op, true), finish) })
			return
		}
		kv.reply(client, op, kv.apply(client, op, false), finish)
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
	case kvCreate, kvUpdate:
		if (op.kind == kvCreate && exists) || (op.kind == kvUpdate && (!exists || cur.rev != op.rev)) {
			rep.err = errKVFenced
			break
		}
		fallthrough
	case kvPut:
		kv.seq++
		kv.data[op.key] = kvEntry{val: op.val, rev: kv.seq}
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

// planKVFaults draws the stalls of KVConfig within [from, to).
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
