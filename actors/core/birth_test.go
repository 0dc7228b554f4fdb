package core

import "testing"

// TestBirth: a new incarnation's birth comes from cluster time, after every
// existing topic's creation, except on a brand-new cluster.
func TestBirth(t *testing.T) {
	const hour = uint64(3600 * RangeNanos)
	created := base
	margin := BirthMargin(250*ms, 250*ms)
	if margin != uint64(750*ms) {
		t.Fatalf("margin %d, want F + 2 skew = 750ms", margin)
	}
	for _, tc := range []struct {
		name string
		in   BirthInput
		want uint64
	}{
		{"brand-new cluster: own clock", BirthInput{Own: base, Clocks: []uint64{base + hour}, Margin: margin}, base},
		{"clock behind the peers", BirthInput{Own: base, Clocks: []uint64{base + hour, base + 2}, Created: []uint64{created}, Margin: margin},
			base + hour + margin},
		{"clock before the topic's creation, no peer heard", BirthInput{Own: created - hour, Created: []uint64{created, created - 5}, Margin: margin},
			created + margin},
		{"own clock the latest", BirthInput{Own: base + hour, Clocks: []uint64{base}, Created: []uint64{created}, Margin: margin},
			base + hour + margin},
	} {
		got := tc.in.Birth()
		if got != tc.want {
			t.Errorf("%s: birth %d, want %d", tc.name, got, tc.want)
		}
		for _, c := range tc.in.Created {
			if got <= c {
				t.Errorf("%s: birth %d not after topic creation %d", tc.name, got, c)
			}
		}
	}
}
