package server

import "testing"

func TestRouteServers(t *testing.T) {
	r := func(ports ...string) []string {
		var out []string
		for _, p := range ports {
			out = append(out, "nats-route://"+p)
		}
		return out
	}
	for _, tc := range []struct {
		listen string
		routes []string
		want   int
	}{
		{"", nil, 1},
		{"127.0.0.1:6222", nil, 1},
		{"127.0.0.1:6222", r("127.0.0.1:6222", "127.0.0.1:6223", "127.0.0.1:6224"), 3}, // full list
		{"127.0.0.1:6222", r("127.0.0.1:6223", "127.0.0.1:6224"), 3},                   // others only
		{"0.0.0.0:6222", r("localhost:6222", "127.0.0.1:6223"), 2},                     // wildcard listen
		{"127.0.0.1:6222", r("127.0.0.1:6223", "localhost:6223", "127.0.0.1:6223"), 2}, // duplicates
		{"0.0.0.0:6222", r("h1:6222", "h2:6222", "h3:6222"), 3},                        // one port on every host
		{"0.0.0.0:6222", r("h2:6222", "h3:6222"), 2},                                   // ... others only: undercounts
	} {
		if got := routeServers(tc.listen, tc.routes); got != tc.want {
			t.Errorf("routeServers(%q, %v) = %d, want %d", tc.listen, tc.routes, got, tc.want)
		}
	}
}
