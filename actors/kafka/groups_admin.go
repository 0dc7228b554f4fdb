package kafka

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// The admin requests: DescribeGroups, ListGroups, DeleteGroups.

// exists: the group has a record, members or commits (g.mu held).
func (g *kgroup) exists() bool {
	return g.rev != 0 || g.dirty || !g.core.Idle() || len(g.offsets) > 0
}

// DescribeGroups describes each group (v0..v6). A group this gateway does
// not coordinate gets NOT_COORDINATOR; one that does not exist is Dead
// (v6+: GROUP_ID_NOT_FOUND). As Kafka, only a Stable group shows its
// protocol and its members' metadata and assignments.
func (c *Coordinator) DescribeGroups(ctx context.Context, r *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, name := range r.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = name
		if !servedVersion(kmsg.DescribeGroups, r.Version) {
			dg.ErrorCode = int16(unsupportedVersion)
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		var snap core.KafkaSnapshot
		found := false
		code := c.locked(ctx, name, func(g *kgroup, _ int64) core.KafkaCode {
			snap, found = g.core.Snapshot(), g.exists()
			return core.KafkaNone
		})
		switch {
		case code != core.KafkaNone:
			dg.ErrorCode = int16(code)
		case !found && r.Version >= 6:
			dg.ErrorCode = kerr.GroupIDNotFound.Code
			dg.ErrorMessage = kmsg.StringPtr("group " + name + " does not exist")
		case !found:
			dg.State = core.KafkaDead.String()
		default:
			describe(&dg, snap)
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

func describe(dg *kmsg.DescribeGroupsResponseGroup, s core.KafkaSnapshot) {
	stable := s.State == core.KafkaStable
	dg.State, dg.ProtocolType = s.State.String(), s.ProtocolType
	if stable {
		dg.Protocol = s.Protocol
	}
	for _, m := range s.Members {
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.ClientID, dm.ClientHost = m.ID, m.ClientID, m.ClientHost
		if m.Instance != "" {
			dm.InstanceID = kmsg.StringPtr(m.Instance)
		}
		if stable {
			dm.ProtocolMetadata, dm.MemberAssignment = m.Metadata, m.Assignment
		}
		dg.Members = append(dg.Members, dm)
	}
}

// listed is one group as ListGroups shows it.
type listed struct{ protocolType, state string }

// ListGroups lists the groups this gateway coordinates (v0..v5), so the
// lists of all gateways together name each group once. It reads every
// group record (bounded by KVTimeout): a failure is
// COORDINATOR_NOT_AVAILABLE.
func (c *Coordinator) ListGroups(ctx context.Context, r *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	if !servedVersion(kmsg.ListGroups, r.Version) {
		resp.ErrorCode = int16(unsupportedVersion)
		return resp
	}
	kctx, cancel := context.WithTimeout(ctx, c.lim.KVTimeout)
	recs, err := c.cfg.KV.KafkaGroups(kctx)
	cancel()
	if err != nil {
		c.log.Info("kafka groups: listing groups failed", "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	all := make(map[string]listed, len(recs))
	for _, rec := range recs {
		all[rec.Name] = listed{protocolType: rec.ProtocolType, state: rec.State}
	}
	c.liveListing(all)
	for _, name := range slices.Sorted(maps.Keys(all)) {
		l := all[name]
		if !c.cfg.IsCoordinator(name) || !listWanted(r, l.state) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = name, l.protocolType, l.state, "classic"
		resp.Groups = append(resp.Groups, lg)
	}
	return resp
}

// liveListing overrides the records' states with those of the groups held here.
func (c *Coordinator) liveListing(all map[string]listed) {
	for _, g := range c.loaded() {
		g.mu.Lock()
		if g.usable() == core.KafkaNone && g.exists() {
			s := g.core.Snapshot()
			all[g.name] = listed{protocolType: s.ProtocolType, state: s.State.String()}
		}
		g.mu.Unlock()
	}
}

// listWanted applies ListGroups' filters: states (v4+) and types (v5+;
// these groups are "classic"), both case-insensitive as Kafka.
func listWanted(r *kmsg.ListGroupsRequest, state string) bool {
	in := func(list []string, s string) bool {
		return len(list) == 0 || slices.ContainsFunc(list, func(v string) bool { return strings.EqualFold(v, s) })
	}
	return (r.Version < 4 || in(r.StatesFilter, state)) && (r.Version < 5 || in(r.TypesFilter, "classic"))
}

// DeleteGroups deletes empty groups with their offsets (v0..v3).
func (c *Coordinator) DeleteGroups(ctx context.Context, r *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, name := range r.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = name
		if servedVersion(kmsg.DeleteGroups, r.Version) {
			dg.ErrorCode = c.deleteGroup(ctx, name)
		} else {
			dg.ErrorCode = int16(unsupportedVersion)
		}
		if dg.ErrorCode != 0 && r.Version >= 3 {
			dg.ErrorMessage = kmsg.StringPtr(kerr.ErrorForCode(dg.ErrorCode).Error())
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

// deleteGroup marks an empty group Dead and waits for the writer to
// delete its record (compare-and-set); the entry is dropped either way.
func (c *Coordinator) deleteGroup(ctx context.Context, name string) int16 {
	done := make(chan error, 1)
	code := c.locked(ctx, name, func(g *kgroup, now int64) core.KafkaCode {
		if !g.exists() {
			return core.KafkaGroupIDNotFound
		}
		if code := g.core.Delete(); code != core.KafkaNone {
			return code
		}
		g.answerAll(core.KafkaCoordinatorNotAvailable)
		g.deleting = done
		c.maybeWrite(g, now, false)
		return core.KafkaNone
	})
	if code != core.KafkaNone {
		return int16(code)
	}
	t := time.NewTimer(c.lim.KVTimeout + replyMargin)
	defer t.Stop()
	select {
	case err := <-done:
		if err == nil {
			c.log.Info("kafka groups: group deleted", "group", name)
			return 0
		}
		if !errors.Is(err, meta.ErrFenced) {
			c.log.Warn("kafka groups: deleting a group failed", "group", name, "err", err)
		}
	case <-ctx.Done():
	case <-t.C:
	}
	return kerr.CoordinatorNotAvailable.Code
}
