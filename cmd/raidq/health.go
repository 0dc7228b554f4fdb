package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// defaultMetricsAddr is where `raidq health` looks without flags: the
// metrics address the deployment files give every node (--metrics
// 0.0.0.0:9422 in cmd/raidq/deploy), seen from inside the node's host or
// container.
const defaultMetricsAddr = "127.0.0.1:9422"

// maxHealthBody bounds what `raidq health` reads of an answer: /healthz
// is a few bytes, a node's /metrics tens of KiB (a dev cluster's six
// nodes about 200 KiB).
const maxHealthBody = 16 << 20

// healthFlags are the flags of `raidq health`.
type healthFlags struct {
	url, addr string
	timeout   time.Duration
	wait      time.Duration // keep checking this long until healthy
	anyProc   bool          // --any: any process serving /healthz is healthy
	quiet     bool
}

// healthCmd is `raidq health`: the check a container HEALTHCHECK, a
// systemd ExecStartPost or a load balancer runs against a node's
// --metrics endpoint. Exit 0: healthy; otherwise one line saying why and
// exit 3 (nothing listening or answering) or 1 (answering, not healthy).
func healthCmd() *cobra.Command {
	var f healthFlags
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check a node's health over its --metrics endpoint (/healthz and /metrics); exit 0 when healthy",
		Long: `health asks a raidq process's metrics endpoint (raidq node --metrics
host:port) whether it is healthy, within --timeout:

  1. GET /healthz must answer 200 "ok": the process is up and serving;
  2. GET /metrics must hold a started storage node's metrics (the
     raidq_node_* families a node registers once its store is open, its
     NATS server is up and the metadata is loaded). --any skips this,
     for processes that are not nodes (raidq kafka --metrics);
  3. no node needs an operator: its data disk below --disk-watermark and
     its embedded JetStream on (raidq status shows such a node degraded).

It prints one line (the node ids seen and the time taken) and exits 0, or
prints why not on stderr and exits 3 when nothing listens or nothing
answers within the timeout, 1 for an HTTP error, a process that serves
metrics but has no started node yet (still waiting for JetStream or the
metadata) or a degraded node, and 2 for a bad flag. --wait keeps
checking once a second until healthy, and reports the last failure when
it runs out. It needs no shell or curl, so it runs in the FROM scratch
image (HEALTHCHECK).`,
		Example: `  raidq health                                      # 127.0.0.1:9422 (or $RAIDQ_METRICS_ADDR)
  raidq health --metrics-addr 10.0.0.5:9422 --timeout 2s
  raidq health --url http://n1.internal:9422/healthz
  raidq health --metrics-addr 127.0.0.1:9423 --any   # a Kafka gateway`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runHealth(cmd, f)
		},
	}
	p := cmd.Flags()
	p.StringVar(&f.addr, "metrics-addr", envOr("RAIDQ_METRICS_ADDR", defaultMetricsAddr), "the node's --metrics address host:port (env RAIDQ_METRICS_ADDR)")
	p.StringVar(&f.url, "url", "", "the full /healthz URL instead of --metrics-addr (http or https; /metrics is asked on the same host)")
	p.DurationVar(&f.timeout, "timeout", 3*time.Second, "give up after this long (both requests together)")
	p.DurationVar(&f.wait, "wait", 0, "keep checking, once a second, until healthy or this long has passed (a node starting up; systemd ExecStartPost)")
	p.BoolVar(&f.anyProc, "any", false, "healthy when /healthz answers, without requiring a started node's metrics (gateways, clients)")
	p.BoolVar(&f.quiet, "quiet", false, "print nothing when healthy")
	return cmd
}

// runHealth runs the checks (again each second while --wait lasts) and
// reports; the error is what the user sees after "raidq: ".
func runHealth(cmd *cobra.Command, f healthFlags) error {
	if f.timeout <= 0 || f.wait < 0 {
		return usageErr(fmt.Errorf("--timeout %v, --wait %v: want a positive timeout and a wait of 0 or more", f.timeout, f.wait))
	}
	healthz, metricsURL, err := healthURLs(f.url, f.addr)
	if err != nil {
		return usageErr(err)
	}
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	deadline := time.Now().Add(f.wait)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		start := time.Now()
		what, err := checkHealth(cmd.Context(), c, healthz, metricsURL, f)
		if err == nil {
			if !f.quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "healthy: %s (%s, %s)\n", what, healthz, time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if f.wait == 0 || time.Now().Add(time.Second).After(deadline) {
			if f.wait > 0 {
				return fmt.Errorf("%w (still, after waiting %v)", err, f.wait)
			}
			return err
		}
		select {
		case <-tick.C:
		case <-cmd.Context().Done():
			return err
		}
	}
}

// checkHealth runs one check within f.timeout and says what is healthy
// ("node n1 serving"), or why not.
func checkHealth(parent context.Context, c *http.Client, healthz, metricsURL string, f healthFlags) (string, error) {
	ctx, cancel := context.WithTimeout(parent, f.timeout)
	defer cancel()
	body, err := healthGet(ctx, c, healthz, f.timeout)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(body) != "ok" {
		return "", fmt.Errorf("unhealthy: %s answered %q, want \"ok\"", healthz, clip(strings.TrimSpace(body), 80))
	}
	if f.anyProc {
		return "serving", nil
	}
	body, err = healthGet(ctx, c, metricsURL, f.timeout)
	if err != nil {
		return "", err
	}
	nodes := startedNodes(body)
	if len(nodes) > 0 {
		if why := degraded(body); len(why) > 0 {
			return "", fmt.Errorf("unhealthy: %s: serving, but needs an operator (raidq status shows it degraded)", strings.Join(why, "; "))
		}
	}
	switch len(nodes) {
	case 0:
		return "", fmt.Errorf("unhealthy: %s answers but holds no started node's metrics (raidq_node_*): the node is still starting (waiting for JetStream or the metadata), or this is not a node (--any)", metricsURL)
	case 1:
		return "node " + nodes[0] + " serving", nil
	}
	return "nodes " + strings.Join(nodes, " ") + " serving", nil
}

// healthURLs returns the /healthz and /metrics URLs of --url (when set)
// or of --metrics-addr.
func healthURLs(raw, addr string) (healthz, metricsURL string, err error) {
	if raw == "" {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return "", "", fmt.Errorf("--metrics-addr %q: want host:port (%v)", addr, err)
		}
		raw = "http://" + addr + "/healthz"
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("--url %q: want http://host:port/healthz", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/healthz"
	}
	m := *u
	m.Path, m.RawQuery = "/metrics", ""
	return u.String(), m.String(), nil
}

// healthGet GETs u and returns its body; any failure comes back as one
// sentence naming u and the likely cause.
func healthGet(ctx context.Context, c *http.Client, u string, timeout time.Duration) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", healthDialError(u, err, timeout)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxHealthBody))
	if err != nil {
		return "", healthDialError(u, err, timeout)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("unhealthy: %s answered %s: %s", u, resp.Status, clip(strings.TrimSpace(string(b)), 80))
	}
	return string(b), nil
}

// healthDialError says what a failed request means for an operator;
// nothing listening and no answer are "cannot reach" (exit 3).
func healthDialError(u string, err error, timeout time.Duration) error {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return &markedError{fmt.Errorf("unhealthy: nothing listening at %s (is the node running, with --metrics on that address?)", u), errUnreachable}
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return &markedError{fmt.Errorf("unhealthy: no answer from %s within %v", u, timeout), errUnreachable}
	}
	return fmt.Errorf("unhealthy: %s: %w", u, err) // a dial error is exit 3, a TLS mismatch 4 (exitCode)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// startedNodes returns the node ids of the raidq_node_owners series in a
// Prometheus text exposition, sorted. A node registers that gauge when it
// starts (actors/node startMetrics) and removes it when it stops, so its
// series are the nodes running in the process. This reads only the lines
// of that one family; the format is Prometheus's text format 0.0.4
// (name{labels} value), which promhttp serves to a client that asks for
// nothing else.
func startedNodes(exposition string) []string {
	var ids []string
	for id := range gaugeByNode(exposition, "raidq_node_owners") {
		ids = append(ids, cmp.Or(id, "(unlabelled)"))
	}
	slices.Sort(ids)
	return ids
}

// labelIn returns the value of label name in `{a="x",name="y"} 1`; ""
// when absent. Escapes are not undone: node ids have none worth undoing
// for a one-line report.
func labelIn(s, name string) string {
	if !strings.HasPrefix(s, "{") {
		return ""
	}
	for _, sep := range []string{"{", ","} {
		if i := strings.Index(s, sep+name+`="`); i >= 0 {
			v := s[i+len(sep)+len(name)+2:]
			if j := strings.IndexByte(v, '"'); j >= 0 {
				return v[:j]
			}
		}
	}
	return ""
}

// degraded says, per node of an exposition, what needs an operator: the
// data disk past its watermark, the embedded JetStream off (the gauges
// a node exports for them, actors/node/node_service.go). Sorted by node.
func degraded(exposition string) []string {
	used := gaugeByNode(exposition, "raidq_node_disk_used_ratio")
	mark := gaugeByNode(exposition, "raidq_node_disk_watermark_ratio")
	js := gaugeByNode(exposition, "raidq_node_jetstream_enabled")
	var why []string
	for _, id := range slices.Sorted(maps.Keys(used)) {
		if w := mark[id]; w > 0 && used[id] >= w {
			why = append(why, fmt.Sprintf("node %s: disk %.0f%% full, past the %.0f%% watermark", id, 100*used[id], 100*w))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(js)) {
		if js[id] == 0 {
			why = append(why, fmt.Sprintf("node %s: its embedded JetStream is off (out of disk; the node restarts once the disk is below the watermark)", id))
		}
	}
	return why
}

// gaugeByNode reads the values of one family's series by their node
// label from a Prometheus text exposition (unlabelled: "").
func gaugeByNode(exposition, family string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), family)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[i+1:]), 64)
		if err != nil {
			continue
		}
		out[labelIn(rest, "node")] = v
	}
	return out
}
