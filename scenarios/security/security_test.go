package security

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/raidq/raidq/scenarios/testkit"
)

// TestSecurityDrill runs the drill on three nodes: every attempt is
// refused and counted, the legitimate traffic is untouched.
func TestSecurityDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r, err := Run(ctx, Config{Dir: t.TempDir(), Flood: 600, Logger: testkit.Logger(t, slog.LevelError)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Checks {
		t.Logf("%-5v %-40s %-14s %s", c.Pass, c.Name, c.Who, c.Got)
	}
	if !r.OK {
		t.Fatalf("%d checks failed", r.Failed)
	}
}
