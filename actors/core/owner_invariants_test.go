package core

import (
	"testing"

	"github.com/raidq/raidq/stripe/invariants/invariantstest"
)

// TestOwnerInvariantRouted: a closing scan that starts outside the
// owner's range is a routing bug (the driver sends it to the owner of
// RangeStart(from)): it panics under invariants, and in the released
// binary is answered BAD_REQUEST as before. A scan past the range's end
// or an empty one is the client's, and stays an answer.
func TestOwnerInvariantRouted(t *testing.T) {
	now := int64(base + RangeNanos/2)
	o := NewOwner(ownerCfg(), 0, nil)
	for _, from := range []uint64{base - 1, base + RangeNanos} {
		invariantstest.Fires(t, "routed to the wrong owner", func() { o.Close(now, from, from+10) })
		invariantstest.Off(func() {
			if d := o.Close(now, from, from+10); d.Status != StatusBadRequest {
				t.Fatalf("released binary: closing scan from %d answered %v, want BAD_REQUEST", from, d.Status)
			}
		})
	}
	for _, sc := range [][2]uint64{{base + 10, base + 10}, {base + 10, base + RangeNanos + 1}} {
		if d := o.Close(now, sc[0], sc[1]); d.Status != StatusBadRequest {
			t.Fatalf("closing scan [%d,%d) answered %v, want BAD_REQUEST", sc[0], sc[1], d.Status)
		}
	}
}
