// Package invariantstest helps tests expect an invariant to fire. It
// imports package testing, so only test files may import it (the raidq
// binary must not link testing).
package invariantstest

import (
	"errors"
	"strings"
	"testing"

	"github.com/raidq/raidq/stripe/invariants"
)

// Fires runs fn and fails t unless fn panics with an invariant violation
// whose message contains want. It skips t when invariants are off
// (RAIDQ_INVARIANTS=0).
func Fires(t testing.TB, want string, fn func()) {
	t.Helper()
	if !invariants.Enabled {
		t.Skip("invariants are off (" + invariants.EnvVar + "=0)")
	}
	v := Catch(fn)
	if v == nil {
		t.Fatalf("no invariant violation, want one naming %q", want)
	}
	if !strings.Contains(v.Msg, want) {
		t.Fatalf("invariant violation %q, want one naming %q", v.Error(), want)
	}
}

// Catch runs fn and returns the violation it panicked with (nil: none).
// A panic of any other kind goes on.
func Catch(fn func()) (v *invariants.Violation) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if err, ok := r.(error); ok && errors.As(err, &v) {
			return
		}
		panic(r)
	}()
	fn()
	return nil
}

// Off runs fn with invariants disabled, as in the released binary (to
// check the release answer of a guarded path). Enabled is a plain
// variable: tests that call Off must not run in parallel with others.
func Off(fn func()) {
	was := invariants.Enabled
	invariants.Enabled = false
	defer func() { invariants.Enabled = was }()
	fn()
}
