package bus

import (
	"runtime/debug"
	"strings"
	"sync"
)

// Module is raidq's module path.
const Module = "github.com/raidq/raidq"

// Version is the raidq version this program was built from, as every
// node announces it and `raidq version` prints it: the module version in
// the build info (a tag such as v0.3.0, or a pseudo-version stamped from
// git by `go build`), found as the main module in raidq's own binary or as
// a dependency in a program that imports raidq. `go run` and `go test`
// builds carry no VCS stamp and say "(devel)".
func Version() string { return version() }

var version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return versionOf(bi)
})

func versionOf(bi *debug.BuildInfo) string {
	if bi.Main.Path == Module && bi.Main.Version != "" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == Module {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			if d.Version != "" {
				return d.Version
			}
		}
	}
	return "(devel)"
}

// SemVer is Version as a NATS micro service version must be (SemVer, no
// leading "v"): "0.3.0", or "0.0.0-devel" for an unstamped build.
func SemVer() string { return semVerOf(Version()) }

func semVerOf(v string) string {
	if v == "" || v == "(devel)" {
		return "0.0.0-devel"
	}
	v = strings.TrimPrefix(v, "v")
	// A dirty build's "+dirty" is SemVer build metadata already.
	return v
}
