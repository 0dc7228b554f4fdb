package natsserver

import (
	"net"
	"strconv"
)

// MonitorURL returns the base URL of the server's monitoring endpoints
// (http://host:port, with the actual port when HTTPPort was -1; an
// unspecified host reported as loopback), or "" when it serves none.
// The endpoints are nats-server's: /varz, /jsz, /connz, /routez,
// /subsz, /accountz, /healthz, /raftz ...
func (s *Server) MonitorURL() string {
	if s.opts.HTTPPort == 0 {
		return ""
	}
	a := s.ns.MonitorAddr()
	if a == nil {
		return ""
	}
	return "http://" + hostPort(s.opts.HTTPHost, a)
}

// SplitMonitorListen parses a monitoring address host:port (port -1: a
// random free port) for ServerOptions.HTTPHost and HTTPPort; "" is no
// monitoring (port 0). Port 0 is refused: it would mean none.
func SplitMonitorListen(addr string) (string, int, error) {
	if addr == "" {
		return "", 0, nil
	}
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < -1 || port == 0 || port > 65535 {
		return "", 0, &net.AddrError{Err: "port must be 1..65535 (or -1: any free port)", Addr: addr}
	}
	return host, port, nil
}
