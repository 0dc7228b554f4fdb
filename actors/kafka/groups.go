package kafka

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/actors/core"
)

// The membership requests of the classic protocol: JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup (the coordinator is in coordinator.go). Each takes
// the request at its version and answers at the same version.

// replyMargin is how much longer than the protocol's own bound a request
// waits for the core's reply (the client's request times out first).
const replyMargin = 5 * time.Second

// servedVersion reports whether the coordinator answers key at version.
func servedVersion(key kmsg.Key, version int16) bool {
	r, ok := CoordinatorVersions[key]
	return ok && version >= r[0] && version <= r[1]
}

var unsupportedVersion = core.KafkaCode(kerr.UnsupportedVersion.Code)

// JoinGroup answers a JoinGroup request, waiting (as the protocol has it)
// until the join phase ends and the new generation is written: at most
// the member's rebalance timeout and replyMargin, or until ctx ends.
func (c *Coordinator) JoinGroup(ctx context.Context, r *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.MemberID = r.MemberID
	if !servedVersion(kmsg.JoinGroup, r.Version) {
		resp.ErrorCode = int16(unsupportedVersion)
		return resp
	}
	g, code := c.group(ctx, r.Group)
	if code != core.KafkaNone {
		resp.ErrorCode = int16(code)
		return resp
	}
	ci := clientOf(ctx)
	instance := deref(r.InstanceID)
	j := core.KafkaJoin{Req: c.reqs.Add(1), Member: strings.Clone(r.MemberID), NewMember: newMemberID(c.cfg.IDRand, ci.id, instance),
		Instance: instance, ClientID: strings.Clone(ci.id), ClientHost: strings.Clone(ci.host),
		ProtocolType: strings.Clone(r.ProtocolType),
		Session:      millis(r.SessionTimeoutMillis), Rebalance: millis(r.RebalanceTimeoutMillis),
		RequireKnownMember: r.Version >= 4}
	for _, p := range r.Protocols {
		j.Protocols = append(j.Protocols, core.KafkaProtocol{Name: strings.Clone(p.Name), Metadata: bytes.Clone(p.Metadata)})
	}
	bound := time.Duration(min(max(j.Rebalance, j.Session), int64(c.lim.MaxRebalance))) + replyMargin
	rep := c.call(ctx, g, j.Req, bound, func(now int64) core.KafkaOutput { return g.core.Join(now, j) })
	if rep.join == nil {
		resp.ErrorCode = int16(rep.code)
		return resp
	}
	joinResponse(resp, rep.join)
	return resp
}

func joinResponse(resp *kmsg.JoinGroupResponse, jr *core.KafkaJoinReply) {
	resp.ErrorCode, resp.Generation = int16(jr.Code), jr.Generation
	if jr.Member != "" {
		resp.MemberID = jr.Member
	}
	if jr.Code != core.KafkaNone {
		return
	}
	resp.ProtocolType, resp.Protocol = kmsg.StringPtr(jr.ProtocolType), kmsg.StringPtr(jr.Protocol)
	resp.LeaderID = jr.Leader
	for _, m := range jr.Members {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID, rm.ProtocolMetadata = m.ID, m.Metadata
		if m.Instance != "" {
			rm.InstanceID = kmsg.StringPtr(m.Instance)
		}
		resp.Members = append(resp.Members, rm)
	}
}

// SyncGroup answers a SyncGroup request: a follower waits for the
// leader's (at most its rebalance timeout and replyMargin, or until ctx
// ends).
func (c *Coordinator) SyncGroup(ctx context.Context, r *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	if !servedVersion(kmsg.SyncGroup, r.Version) {
		resp.ErrorCode = int16(unsupportedVersion)
		return resp
	}
	g, code := c.group(ctx, r.Group)
	if code != core.KafkaNone {
		resp.ErrorCode = int16(code)
		return resp
	}
	s := core.KafkaSync{Req: c.reqs.Add(1), Member: r.MemberID, Instance: deref(r.InstanceID), Generation: r.Generation,
		ProtocolType: deref(r.ProtocolType), Protocol: deref(r.Protocol)}
	if len(r.GroupAssignment) > 0 {
		s.Assignments = make(map[string][]byte, len(r.GroupAssignment))
		for _, a := range r.GroupAssignment {
			s.Assignments[strings.Clone(a.MemberID)] = bytes.Clone(a.MemberAssignment)
		}
	}
	bound := c.lim.MaxRebalance + replyMargin
	rep := c.call(ctx, g, s.Req, bound, func(now int64) core.KafkaOutput { return g.core.Sync(now, s) })
	if rep.sync == nil {
		resp.ErrorCode = int16(rep.code)
		return resp
	}
	resp.ErrorCode = int16(rep.sync.Code)
	if rep.sync.Code == core.KafkaNone {
		resp.ProtocolType, resp.Protocol = kmsg.StringPtr(rep.sync.ProtocolType), kmsg.StringPtr(rep.sync.Protocol)
		resp.MemberAssignment = rep.sync.Assignment
	}
	return resp
}

// call registers request req as waiting, feeds the core, and waits for
// the reply.
func (c *Coordinator) call(ctx context.Context, g *kgroup, req uint64, bound time.Duration,
	input func(now int64) core.KafkaOutput) reply {
	ch := make(chan reply, 1)
	g.mu.Lock()
	if code := g.usable(); code != core.KafkaNone {
		g.mu.Unlock()
		return reply{code: code}
	}
	now := c.now()
	g.lastUsed = now
	g.waiters[req] = ch
	c.apply(g, input(now))
	g.mu.Unlock()
	return c.wait(ctx, g, req, ch, bound)
}

// Heartbeat answers a Heartbeat request from memory.
func (c *Coordinator) Heartbeat(ctx context.Context, r *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	if !servedVersion(kmsg.Heartbeat, r.Version) {
		resp.ErrorCode = int16(unsupportedVersion)
		return resp
	}
	code := c.locked(ctx, r.Group, func(g *kgroup, now int64) core.KafkaCode {
		return g.core.Heartbeat(now, r.MemberID, deref(r.InstanceID), r.Generation)
	})
	resp.ErrorCode = int16(code)
	return resp
}

// locked runs fn on the group's entry, locked, or answers its code.
func (c *Coordinator) locked(ctx context.Context, name string, fn func(g *kgroup, now int64) core.KafkaCode) core.KafkaCode {
	g, code := c.group(ctx, name)
	if code != core.KafkaNone {
		return code
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if code := g.usable(); code != core.KafkaNone {
		return code
	}
	now := c.now()
	g.lastUsed = now
	return fn(g, now)
}

// LeaveGroup answers a LeaveGroup request: one member (v0-v2) or several
// (v3+, each with its own code).
func (c *Coordinator) LeaveGroup(ctx context.Context, r *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	if !servedVersion(kmsg.LeaveGroup, r.Version) {
		resp.ErrorCode = int16(unsupportedVersion)
		return resp
	}
	leaving := []core.KafkaLeave{{Member: r.MemberID}}
	if r.Version >= 3 {
		leaving = leaving[:0]
		for _, m := range r.Members {
			leaving = append(leaving, core.KafkaLeave{Member: m.MemberID, Instance: deref(m.InstanceID)})
		}
	}
	var codes []core.KafkaCode
	code := c.locked(ctx, r.Group, func(g *kgroup, now int64) core.KafkaCode {
		var out core.KafkaOutput
		codes, out = g.core.Leave(now, leaving)
		c.apply(g, out)
		return core.KafkaNone
	})
	switch {
	case code != core.KafkaNone:
		resp.ErrorCode = int16(code)
	case r.Version < 3:
		resp.ErrorCode = int16(codes[0])
	default:
		for i, m := range r.Members {
			rm := kmsg.NewLeaveGroupResponseMember()
			rm.MemberID, rm.InstanceID, rm.ErrorCode = m.MemberID, m.InstanceID, int16(codes[i])
			resp.Members = append(resp.Members, rm)
		}
	}
	return resp
}

// newMemberID is Kafka's form: the client id (a static member's instance
// id), a dash and random hex (from src; nil: crypto/rand); the prefix is
// cut to 64 bytes of UTF-8.
func newMemberID(src io.Reader, clientID, instance string) string {
	prefix := clientID
	if instance != "" {
		prefix = instance
	}
	if len(prefix) > 64 {
		n := 64
		for n > 0 && !utf8.RuneStart(prefix[n]) {
			n--
		}
		prefix = prefix[:n]
	}
	prefix = strings.ToValidUTF8(prefix, "")
	if prefix == "" {
		prefix = "member"
	}
	var b [16]byte
	if src == nil {
		src = rand.Reader
	}
	_, _ = io.ReadFull(src, b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func millis(ms int32) int64 { return max(int64(ms), 0) * int64(time.Millisecond) }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return strings.Clone(*s)
}
