// Package invariants holds raidq's internal assertions, in the manner of
// pebble's internal/invariants: checks of facts the code itself
// guarantees (a routing the driver did, a count only the core changes),
// as opposed to the validation of what a client or a peer sent, which
// stays an ordinary error answer.
//
// The contract:
//
//   - Enabled is true in every test binary (go test, and with it the
//     deterministic simulation in scenarios/sim), in any binary built
//     with -race, and wherever the environment sets RAIDQ_INVARIANTS=1
//     (a drill that spawns the raidq binary can turn them on).
//     RAIDQ_INVARIANTS=0 turns them off, even in a test or -race binary.
//     Otherwise, in the released binary, it is false. It is decided once,
//     when the program starts, and not changed after (tests of this
//     package aside).
//   - A violated invariant panics with a *Violation, whose message starts
//     "raidq invariant violated: ". A panic means a bug in raidq, never a
//     bad request: code must not assert anything a client, a peer or the
//     disk can make false.
//   - With Enabled false nothing panics and the code goes on as it would
//     without the check (a guarded path keeps its release answer, e.g.
//     an error status), so an assertion never takes a production node
//     down.
//   - Checks cost next to nothing when disabled or holding (below).
//
// Check's variadic arguments are boxed (and may allocate) on every call,
// even when it returns at once, so Check suits cold paths and arguments
// that are constants; Checkf defers the message to a func. A hot path
// guards the check itself, so that nothing is evaluated unless it fails:
//
//	if invariants.Enabled && !cond {
//		invariants.Failf("what broke: %d", x)
//	}
//
// The package detects a test binary without importing package testing,
// which the raidq binary must not link (.ci/run): by its name (pkg.test,
// as go test builds it) or by the -test.* flags go test passes.
//
// Tests that expect an assertion to fire use package
// stripe/invariants/invariantstest.
package invariants

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// EnvVar is the environment variable that forces invariants on ("1") or
// off ("0"); any value strconv.ParseBool takes is accepted, others are
// ignored.
const EnvVar = "RAIDQ_INVARIANTS"

// Enabled says whether assertions are checked. See the package doc.
var Enabled = detect(os.Getenv(EnvVar), os.Args)

// detect decides Enabled from the environment and the command line.
func detect(env string, args []string) bool {
	if env != "" {
		if on, err := strconv.ParseBool(env); err == nil {
			return on
		}
	}
	return raceEnabled || testBinary(args)
}

// testBinary reports whether args are a test binary's: go test names it
// <pkg>.test (<pkg>.test.exe on Windows) and passes it -test.* flags
// (-test.paniconexit0 and -test.timeout at least). package testing's own
// flags are registered only when its main runs, after every package's
// init, so flag.Lookup("test.v") cannot tell at this point.
func testBinary(args []string) bool {
	if len(args) == 0 {
		return false
	}
	name := strings.TrimSuffix(filepath.Base(args[0]), ".exe")
	if strings.HasSuffix(name, ".test") {
		return true
	}
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-test.") || strings.HasPrefix(a, "--test.") {
			return true
		}
	}
	return false
}

// Violation is the value a failed assertion panics with.
type Violation struct{ Msg string }

func (v *Violation) Error() string { return "raidq invariant violated: " + v.Msg }

// Failf panics with a Violation whatever Enabled says: the caller has
// checked Enabled and found the invariant broken.
func Failf(format string, args ...any) {
	panic(&Violation{Msg: fmt.Sprintf(format, args...)})
}

// Check panics with a Violation when invariants are enabled and cond is
// false. Its arguments are evaluated (and boxed) on every call: on a hot
// path, guard with Enabled and call Failf instead.
func Check(cond bool, format string, args ...any) {
	if Enabled && !cond {
		Failf(format, args...)
	}
}

// Checkf is Check with the message built by msg, called only when the
// check fails.
func Checkf(cond bool, msg func() string) {
	if Enabled && !cond {
		panic(&Violation{Msg: msg()})
	}
}
