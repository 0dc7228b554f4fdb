package sim

import (
	"strings"
	"testing"
)

// TestSimHard runs each hard fault kind named by -sim.hard on its own over
// -sim.seeds seeds (default 300) and reports, per kind, how many of the
// seeds it was drawn for broke a property, with the first violations of a
// few of them. It is skipped without -sim.hard. These kinds broke
// actors/core before 3fc4af0 (see Hard); SeedConfig draws them for one
// seed in six, this runs them for one in two, alone, to tell which kind
// breaks what when one regresses.
//
//	go test ./scenarios/sim -run TestSimHard -sim.hard=all -sim.seeds=300 -v
func TestSimHard(t *testing.T) {
	h, err := ParseHard(*flagHard)
	if err != nil {
		t.Fatal(err)
	}
	if h == 0 {
		t.Skip("no -sim.hard kinds named")
	}
	n := defaultSeeds
	if *flagSeeds > 0 {
		n = *flagSeeds
	}
	for _, k := range hardNames {
		if h&k.h == 0 {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			drawn, failing := 0, 0
			var total tally
			var examples []string
			for seed := *flagFrom; seed < *flagFrom+uint64(n); seed++ {
				cfg := HardSeedConfig(seed, k.h)
				if cfg == baseConfig(seed) {
					continue // the kind was not drawn for this seed
				}
				drawn++
				res := Run(t, cfg)
				total.add(&res)
				if !res.Broken() {
					continue
				}
				failing++
				if len(examples) < 5 {
					examples = append(examples, sprintf("seed %d (%s):\n      %s", seed, res.Config,
						strings.Join(res.Violations[:min(len(res.Violations), 3)], "\n      ")))
				}
			}
			t.Logf("hard kind %q: %d of %d seeds it was drawn for failed; %s", k.name, failing, drawn, total)
			if failing > 0 {
				t.Errorf("hard kind %q broke %d seeds, e.g.\n    %s\nreplay one: go test ./scenarios/sim -run TestSimSeeds -sim.hard=%s -sim.seed=N -v",
					k.name, failing, strings.Join(examples, "\n    "), k.name)
			}
		})
	}
}
