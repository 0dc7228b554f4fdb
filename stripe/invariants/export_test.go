package invariants

// Detect is detect, for the external tests.
var Detect = detect

// RaceEnabled says whether this is a -race build.
const RaceEnabled = raceEnabled
