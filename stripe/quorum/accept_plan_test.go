package quorum

import "testing"

const sec = int64(RangeAlign)

func TestPlanAcceptStartsOnABoundaryAfterTheLead(t *testing.T) {
	now := 100*sec + 300_000_000
	p := PlanAccept(250_000_000, 20_000_000, now)
	if p.From%RangeAlign != 0 || int64(p.From) < now+AlterLead || int64(p.From) > now+AlterLead+sec {
		t.Fatalf("From %d: want the first range boundary at least AlterLead after %d", p.From, now)
	}
	if got := p.For(p.From - RangeAlign); got != p.Prev {
		t.Fatalf("range before From uses %d, want Prev %d", got, p.Prev)
	}
	if got := p.For(p.From); got != p.Next {
		t.Fatalf("range at From uses %d, want Next %d", got, p.Next)
	}
	if same := PlanAccept(5, 5, now); same.From != 0 || same.For(0) != 5 {
		t.Fatalf("no change must plan nothing, got %+v", same)
	}
}

func TestAcceptPlanSettled(t *testing.T) {
	p := AcceptPlan{Prev: 250_000_000, Next: 20_000_000, From: uint64(10 * sec)}
	if p.Settled(10*sec+250_000_000, 250_000_000) {
		t.Fatal("settled before From + Prev + skew")
	}
	if !p.Settled(10*sec+500_000_001, 250_000_000) {
		t.Fatal("not settled after From + Prev + skew")
	}
	if p.Max() != 250_000_000 || (AcceptPlan{Next: 7}).Max() != 7 {
		t.Fatalf("Max wrong")
	}
}

// TestAcceptViewLate: a node that first sees a plan with owners possibly
// open past From uses the smaller window there, which refuses at least what
// either window closed; on time, it follows the plan.
func TestAcceptViewLate(t *testing.T) {
	for _, c := range []struct{ prev, next int64 }{{20_000_000, 250_000_000}, {250_000_000, 20_000_000}} {
		p := AcceptPlan{Prev: c.prev, Next: c.next, From: uint64(30 * sec)}
		onTime := NewAcceptView(p, 10*sec, 250_000_000)
		if onTime.Late() || onTime.For(uint64(30*sec)) != c.next || onTime.For(uint64(29*sec)) != c.prev {
			t.Fatalf("on-time view %+v deviates from the plan", onTime)
		}
		late := NewAcceptView(p, 31*sec, 250_000_000)
		small := min(c.prev, c.next)
		if !late.Late() || late.For(uint64(30*sec)) != small || late.For(uint64(32*sec)) != small {
			t.Fatalf("late view: ranges up to the late boundary must use the smaller window %d: %+v", small, late)
		}
		if late.For(uint64(33*sec)) != c.next || late.For(uint64(29*sec)) != c.prev {
			t.Fatalf("late view must follow the plan beyond its late boundary: %+v", late)
		}
	}
}
