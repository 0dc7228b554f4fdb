package metrics

import (
	"errors"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/bus"
)

// BuildInfoName is the build information gauge: always 1, with the
// labels version (bus.Version), goversion and revision (the VCS revision
// `go build` stamps, "" without one), so that a dashboard can count the
// versions a cluster runs during an upgrade.
const BuildInfoName = Namespace + "_build_info"

// NewBuildInfo returns the raidq_build_info gauge of this binary.
func NewBuildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: BuildInfoName,
		Help: "raidq build information: always 1; labels version, goversion and revision (VCS commit, empty when not stamped).",
		ConstLabels: prometheus.Labels{"version": bus.Version(), "goversion": runtime.Version(),
			"revision": revision()},
	})
	g.Set(1)
	return g
}

// RegisterBuildInfo registers raidq_build_info in reg once: nil reg
// does nothing, and a registry that has it already (several nodes or
// clients of one process sharing it) keeps the one it has.
func RegisterBuildInfo(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(NewBuildInfo())
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		return nil
	}
	return err
}

// revision is the vcs.revision build setting, with "-dirty" when the
// work tree had changes.
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
