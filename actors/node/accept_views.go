package node

import (
	"sync"
	"time"

	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe/quorum"
)

// acceptViews holds the node's view of each topic's accept plan
// (quorum.AcceptView, docs/design.md#changing-a-topics-timing): the view
// is made when the node first sees a plan, at its clock then, so a node
// that learns a change late keeps refusing what it closed under either
// window. Owners take their range's window from here when they load.
type acceptViews struct {
	mu    sync.Mutex
	views map[string]quorum.AcceptView // by topic
}

// acceptFor is the accept window the owner of t's range at lo uses.
func (n *Node) acceptFor(t *meta.Topic, lo uint64) int64 {
	plan := t.AcceptPlan()
	if plan.From == 0 {
		return plan.Next
	}
	a := &n.accept
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.views[t.Name]
	if !ok || v.Plan() != plan {
		v = quorum.NewAcceptView(plan, n.cfg.Now(), int64(t.Params.FutureBound))
		if a.views == nil {
			a.views = make(map[string]quorum.AcceptView)
		}
		a.views[t.Name] = v
		n.logAcceptView(t.Name, v)
	}
	return v.For(lo)
}

func (n *Node) logAcceptView(topic string, v quorum.AcceptView) {
	p := v.Plan()
	from := time.Unix(0, int64(p.From)).UTC()
	if !v.Late() {
		n.cfg.Logger.Info("accept window change planned", "topic", topic, "from", from,
			"old", time.Duration(p.Prev), "new", time.Duration(p.Next))
		return
	}
	// Expected after a restart past the switch; otherwise the node was
	// cut off from metadata for about the alter lead.
	n.cfg.Logger.Warn("accept window change seen near or after its switch offset: ranges just past it use the smaller window "+
		"on this node (it refuses a few more writes there, which producers retry)", "topic", topic, "from", from,
		"old", time.Duration(p.Prev), "new", time.Duration(p.Next))
}
