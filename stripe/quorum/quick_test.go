package quorum

import (
	"errors"
	"testing"
	"time"
)

// naiveCommitted enumerates: a stripe is committed when at least W of the n
// slots answered OK, counted one by one.
func naiveCommitted(n, w int, acks []bool) bool {
	c := 0
	for i := 0; i < n; i++ {
		if acks[i] {
			c++
		}
	}
	return c >= w
}

// naiveTwoWinners checks, by enumerating every assignment of n slots to two
// stripes, whether both could reach W at once.
func naiveTwoWinners(n, w int) bool {
	for mask := 0; mask < 1<<n; mask++ {
		a, b := 0, 0
		for i := 0; i < n; i++ {
			if mask&(1<<i) != 0 {
				a++
			} else {
				b++
			}
		}
		if a >= w && b >= w {
			return true
		}
	}
	return false
}

// naiveCouldCommit enumerates every way the unheard nodes might hold a shard
// of the group and says whether any reaches W.
func naiveCouldCommit(w, seen, unheard int) bool {
	for extra := 0; extra <= unheard; extra++ {
		if seen+extra >= w {
			return true
		}
	}
	return false
}

func TestQuorumAgainstNaive(t *testing.T) {
	for n := MinShards; n <= 10; n++ {
		for k := 1; k < n; k++ {
			for w := 1; w <= n; w++ {
				p := Params{N: n, K: k, W: w, ReadDelay: time.Second, AcceptWindow: 100 * time.Millisecond,
					FutureBound: 100 * time.Millisecond, MaxSkew: 100 * time.Millisecond}
				err := p.Validate()
				if err == nil && naiveTwoWinners(n, w) {
					t.Fatalf("n=%d k=%d W=%d validated but two stripes can both commit", n, k, w)
				}
				if err == nil && w < k {
					t.Fatalf("n=%d k=%d W=%d validated but a committed stripe may be undecodable", n, k, w)
				}
				if err != nil && !errors.Is(err, ErrInvalidParams) {
					t.Fatalf("error not wrapping ErrInvalidParams: %v", err)
				}
				if err == nil != (!naiveTwoWinners(n, w) && w >= k) {
					t.Fatalf("n=%d k=%d W=%d: Validate=%v disagrees with naive rules", n, k, w, err)
				}
				for mask := 0; mask < 1<<n; mask++ {
					acks := make([]bool, n)
					ok := 0
					for i := range acks {
						acks[i] = mask&(1<<i) != 0
						if acks[i] {
							ok++
						}
					}
					if p.Committed(ok) != naiveCommitted(n, w, acks) {
						t.Fatalf("Committed(%d) with W=%d disagrees", ok, w)
					}
				}
				for seen := 0; seen <= n; seen++ {
					for unheard := 0; seen+unheard <= n; unheard++ {
						v := p.Judge(seen, unheard)
						could := naiveCouldCommit(w, seen, unheard)
						switch {
						case seen >= k && v != Deliver:
							t.Fatalf("seen=%d>=k=%d but %v", seen, k, v)
						case seen < k && could && v != InDoubt:
							t.Fatalf("n=%d k=%d W=%d seen=%d unheard=%d could commit but %v", n, k, w, seen, unheard, v)
						case seen < k && !could && v != Void:
							t.Fatalf("n=%d k=%d W=%d seen=%d unheard=%d cannot commit but %v", n, k, w, seen, unheard, v)
						}
						if err == nil && p.CertainRead(n-unheard) && v == InDoubt {
							t.Fatalf("n=%d k=%d W=%d unheard=%d: a certain read produced in-doubt", n, k, w, unheard)
						}
					}
				}
			}
		}
	}
}

func TestValidateMessages(t *testing.T) {
	cases := []struct {
		mut  func(*Params)
		want string
	}{
		{func(p *Params) { p.W = 3 }, "W must be > n/2"},
		{func(p *Params) { p.K = 5; p.W = 4 }, "W must be >= k"},
		{func(p *Params) { p.K = 6 }, "at least one parity shard"},
		{func(p *Params) { p.N = 40 }, "must be between"},
		{func(p *Params) { p.ReadDelay = 100 * time.Millisecond }, "read delay"},
	}
	for _, c := range cases {
		p := Default()
		c.mut(&p)
		err := p.Validate()
		if err == nil || !errors.Is(err, ErrInvalidParams) || !contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want error containing %q", p, err, c.want)
		}
	}
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if Default().CertainRead(5) {
		t.Fatal("with W=k a partial stripe is certain only when all nodes answer")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
