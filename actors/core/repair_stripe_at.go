package core

import (
	"sort"

	"github.com/raidq/raidq/stripe"
)

// StripeAt looks for stripe id at offset off in this node's slot and the
// peers' headers. It returns the
// positions holding good shards of its encoding (the first one found is
// the reference), and the positions heard (this node and every peer that
// answered). The stripe is decodable when len(members) >= k.
func StripeAt(cfg RepairConfig, off uint64, id stripe.ID, local []LocalSlot, peers []PeerScan) (ref stripe.ShardHeader, members, heard []int) {
	p := cfg.Params
	found := false
	add := func(pos int, h stripe.ShardHeader) {
		if h.ID != id || checkPlace(p, &h, pos, off) != nil {
			return
		}
		if !found {
			ref, found = h, true
		}
		if h.SameStripe(&ref) {
			members = append(members, pos)
		}
	}
	heard = append(heard, cfg.Pos)
	for _, e := range local {
		if e.Offset == off && e.Err == nil {
			add(cfg.Pos, e.Header)
		}
	}
	for _, ps := range peers {
		if ps.Node < 0 || ps.Node >= p.N || ps.Node == cfg.Pos || !ps.Heard {
			continue
		}
		heard = append(heard, ps.Node)
		for _, e := range ps.Entries {
			if e.Offset == off {
				if h, err := stripe.ParseHeader(e.Shard); err == nil {
					add(ps.Node, h)
				}
			}
		}
	}
	sort.Ints(members)
	sort.Ints(heard)
	return ref, members, heard
}
