package cluster

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"time"
)

// Gateway is a `raidq kafka` process: a stateless Kafka protocol gateway
// in front of a cluster, listening on a free 127.0.0.1 port.
//
//	gw, err := cluster.StartGateway(bin, url, "gw0", 60*time.Second)
//	gw := c.StartGateway(t, "gw0")     // every node's URL; killed at cleanup
//	gw.Addr, gw.BrokerID               // what Kafka clients dial, its broker id
//	gw.Proc.Kill()                     // SIGKILL
type Gateway struct {
	ID       string
	Addr     string // host:port Kafka clients are told (and dial)
	BrokerID int32
	Proc     *Proc
}

// gatewayReady is the line `raidq kafka` writes once it serves clients.
var gatewayReady = regexp.MustCompile(`kafka gateway (\S+) listening on \S+ \(clients told (\S+), broker id (-?\d+)\)`)

// StartGateway starts `raidq kafka --nats url --listen 127.0.0.1:<free
// port> --id id` (args are added) and waits up to timeout until it
// listens. On error the process is killed.
func StartGateway(bin, url, id string, timeout time.Duration, args ...string) (*Gateway, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p, err := StartProc("gateway "+id, bin, append([]string{"kafka", "--nats", url, "--listen", listen, "--id", id,
		"--log-level", "info"}, args...))
	if err != nil {
		return nil, err
	}
	if err := p.WaitStderr("kafka gateway "+id+" listening on", timeout); err != nil {
		p.Kill()
		return nil, fmt.Errorf("%w:\n%s", err, p.Tail(15))
	}
	m := gatewayReady.FindStringSubmatch(p.Stderr())
	if m == nil || m[1] != id {
		p.Kill()
		return nil, fmt.Errorf("gateway %s: no address and broker id in its start line:\n%s", id, p.Tail(15))
	}
	bid, err := strconv.ParseInt(m[3], 10, 32)
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("gateway %s: broker id %q: %w", id, m[3], err)
	}
	return &Gateway{ID: id, Addr: m[2], BrokerID: int32(bid), Proc: p}, nil
}

// StartGateway starts a gateway in front of every node of c (StartGateway
// with c.URL(), 60 s to start), failing tb on error; a cleanup kills it
// and, if tb failed, logs the tail of its stderr.
func (c *Cluster) StartGateway(tb TB, id string, args ...string) *Gateway {
	tb.Helper()
	return GatewayFor(tb, c.cfg.Binary, c.URL(), id, args...)
}

// GatewayFor is Cluster.StartGateway in front of any cluster reachable at
// url (`raidq dev`, say).
func GatewayFor(tb TB, bin, url, id string, args ...string) *Gateway {
	tb.Helper()
	gw, err := StartGateway(bin, url, id, 60*time.Second, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		gw.Proc.Kill()
		if tb.Failed() {
			tb.Logf("--- gateway %s (exit code %d), last 40 lines of stderr:\n%s", id, gw.Proc.ExitCode(), gw.Proc.Tail(40))
		}
	})
	return gw
}
