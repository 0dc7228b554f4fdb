package bus

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	cases := []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v0.3.0"}}, "v0.3.0"},
		{debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}}, "(devel)"},
		{debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "v1.0.0"},
			Deps: []*debug.Module{{Path: Module, Version: "v0.2.1"}}}, "v0.2.1"},
		{debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}}, "(devel)"},
	}
	for _, c := range cases {
		if got := versionOf(&c.bi); got != c.want {
			t.Errorf("versionOf(%+v) = %q, want %q", c.bi.Main, got, c.want)
		}
	}
	// go test builds carry no VCS stamp.
	if v := Version(); v == "" {
		t.Fatal("empty version")
	}
}

func TestSemVerOf(t *testing.T) {
	for v, want := range map[string]string{"(devel)": "0.0.0-devel", "": "0.0.0-devel", "v0.3.0": "0.3.0",
		"v0.0.0-20261201143000-abcdef123456+dirty": "0.0.0-20261201143000-abcdef123456+dirty"} {
		if got := semVerOf(v); got != want {
			t.Errorf("semVerOf(%q) = %q, want %q", v, got, want)
		}
	}
}
