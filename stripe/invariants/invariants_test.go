package invariants_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raidq/raidq/stripe/invariants"
	"github.com/raidq/raidq/stripe/invariants/invariantstest"
)

// TestEnabledInTests: a test binary checks invariants (unless the
// environment turns them off).
func TestEnabledInTests(t *testing.T) {
	want := os.Getenv(invariants.EnvVar) != "0"
	if invariants.Enabled != want {
		t.Fatalf("Enabled = %v in a test binary with %s=%q", invariants.Enabled, invariants.EnvVar, os.Getenv(invariants.EnvVar))
	}
}

func TestCheckFires(t *testing.T) {
	invariantstest.Fires(t, "count 7 above 6", func() { invariants.Check(7 <= 6, "count %d above %d", 7, 6) })
	invariantstest.Fires(t, "lazy message", func() { invariants.Checkf(false, func() string { return "lazy message" }) })
	invariantstest.Fires(t, "failed", func() { invariants.Failf("failed") })
	v := invariantstest.Catch(func() { invariants.Check(false, "x=%d", 1) })
	if v == nil || v.Error() != "raidq invariant violated: x=1" {
		t.Fatalf("violation %v, want the message prefixed with raidq invariant violated", v)
	}
}

func TestCheckHolds(t *testing.T) {
	invariants.Check(true, "never")
	invariants.Checkf(true, func() string { t.Fatal("message built for a check that held"); return "" })
}

// TestDisabledNeverPanics: off (the released binary), a false check is
// a no-op and builds no message.
func TestDisabledNeverPanics(t *testing.T) {
	invariantstest.Off(func() {
		invariants.Check(false, "off")
		invariants.Checkf(false, func() string { t.Fatal("message built while disabled"); return "" })
	})
	if os.Getenv(invariants.EnvVar) != "0" && !invariants.Enabled {
		t.Fatal("Off did not restore Enabled")
	}
}

// TestCatchPassesOtherPanics: only violations are caught.
func TestCatchPassesOtherPanics(t *testing.T) {
	defer func() {
		if r := recover(); r != "other" {
			t.Fatalf("recovered %v, want the other panic", r)
		}
	}()
	invariantstest.Catch(func() { panic("other") })
}

// TestNoAllocations: a check that holds allocates nothing, enabled or
// not, in the forms the package doc gives for hot paths.
func TestNoAllocations(t *testing.T) {
	x, n := uint64(5), 6
	for _, on := range []bool{true, false} {
		was := invariants.Enabled
		invariants.Enabled = on
		allocs := testing.AllocsPerRun(100, func() {
			if invariants.Enabled && !(x <= uint64(n)) {
				invariants.Failf("x %d above n %d", x, n)
			}
			invariants.Check(x <= uint64(n), "constant message")
			invariants.Checkf(x <= uint64(n), func() string { return "x above n" })
		})
		invariants.Enabled = was
		if allocs != 0 {
			t.Errorf("enabled=%v: %v allocations per holding check, want 0", on, allocs)
		}
	}
}

func BenchmarkGuardedCheck(b *testing.B) {
	x, n := uint64(5), 6
	for i := 0; i < b.N; i++ {
		if invariants.Enabled && !(x <= uint64(n)) {
			invariants.Failf("x %d above n %d", x, n)
		}
	}
}

// TestDetect covers the decision table: the environment wins either way,
// then -race, then the test binary's name or flags.
func TestDetect(t *testing.T) {
	cases := []struct {
		env  string
		args []string
		want bool
	}{
		{env: "1", args: []string{"/usr/bin/raidq", "node"}, want: true},
		{env: "true", args: []string{"raidq"}, want: true},
		{env: "0", args: []string{"/tmp/go-build1/b001/core.test", "-test.v"}, want: false},
		{env: "false", args: []string{"core.test"}, want: false},
		{args: []string{"/tmp/go-build1/b001/core.test"}, want: true},
		{args: []string{`C:\tmp\core.test.exe`}, want: true},
		{args: []string{"/tmp/renamed", "-test.paniconexit0", "-test.timeout=10m0s"}, want: true},
		{args: []string{"/usr/bin/raidq", "node", "--id", "n1"}, want: invariants.RaceEnabled},
		{env: "maybe", args: []string{"/usr/bin/raidq"}, want: invariants.RaceEnabled},
		{args: nil, want: invariants.RaceEnabled},
	}
	for _, tc := range cases {
		if got := invariants.Detect(tc.env, tc.args); got != tc.want {
			t.Errorf("detect(%q, %q) = %v, want %v", tc.env, tc.args, got, tc.want)
		}
	}
}

// TestReleaseBinaryOff builds a small program importing the package and
// runs it as the released binary would be run: invariants off, unless
// RAIDQ_INVARIANTS=1.
func TestReleaseBinaryOff(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	src := `package main

import (
	"fmt"

	"github.com/raidq/raidq/stripe/invariants"
)

func main() { fmt.Print(invariants.Enabled) }
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// An overlay puts the program in the module without writing to it.
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	pkgDir := filepath.Join(filepath.Dir(strings.TrimSpace(string(mod))), "stripe", "invariants", "internal", "releaseprobe")
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(pkgDir, "main.go"): filepath.Join(dir, "main.go")}})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "raidqlike")
	build := exec.Command("go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "-o", bin, "./internal/releaseprobe")
	build.Dir = filepath.Dir(filepath.Dir(pkgDir))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a program that imports the package: %v\n%s", err, out)
	}
	for _, tc := range []struct{ env, want string }{{"", "false"}, {"1", "true"}, {"0", "false"}} {
		cmd := exec.Command(bin, "node")
		cmd.Env = append(withoutEnv(os.Environ(), invariants.EnvVar), invariants.EnvVar+"="+tc.env)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != tc.want {
			t.Errorf("%s=%q: Enabled = %s, want %s", invariants.EnvVar, tc.env, out, tc.want)
		}
	}
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}
