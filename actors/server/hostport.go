package server

import (
	"fmt"
	"net"
	"strconv"
)

// splitHostPort parses "host:port" with a clear error.
func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("listen address %q: want host:port: %w", addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("listen address %q: bad port", addr)
	}
	return host, port, nil
}
