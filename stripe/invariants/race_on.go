//go:build race

package invariants

// raceEnabled: binaries built with -race check invariants.
const raceEnabled = true
