package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestDeployAgainstDevCluster runs `raidq dev --metrics` (six nodes) and
// a producer and consumer in this process with their metrics served over
// HTTP, then checks `raidq health` against the dev cluster's endpoint and
// that every metric family the dashboard and the alerts query is one
// raidq registers.
//
// The families raidq registers are taken from what it serves, compared
// by family name (not series): the dev cluster's /metrics (every node
// family: gauges and counters read from functions, writes_total created
// at zero per status, unlabelled histograms; plus the process, Go and
// build-info collectors) and the running client's /metrics (its
// producer's and partition readers' children are made when they start;
// the lag gauge has a series per partition read). A family registered
// but without a series yet is absent from a scrape, so the client's
// families are also read from the Describe of what metrics.NewClient
// registers.
func TestDeployAgainstDevCluster(t *testing.T) {
	bin := testBinary(t)
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	url, _ := startDev(t, bin, "--metrics", addr)

	t.Run("health", func(t *testing.T) { checkHealthProcess(t, bin, addr) })
	t.Run("families", func(t *testing.T) {
		clientFams := runClientWithMetrics(t, url)
		nodeFams := scrapeFamilies(t, "http://"+addr+"/metrics")
		checkQueriedFamilies(t, mergeFamilies(nodeFams, clientFams, describedClientFamilies(t)))
	})
}

// checkHealthProcess runs the binary's `raidq health`: exit 0 against the
// running cluster, non-zero with a clear message where nothing listens.
func checkHealthProcess(t *testing.T, bin, addr string) {
	out, err := exec.Command(bin, "health", "--metrics-addr", addr).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "healthy: nodes n0 n1 n2 n3 n4 n5 serving") {
		t.Errorf("raidq health against the dev cluster: %v\n%s", err, out)
	}
	free := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "health", "--metrics-addr", free, "--timeout", "1s")
	out, err = cmd.CombinedOutput()
	want := "raidq: unhealthy: nothing listening at http://" + free + "/healthz"
	if err == nil || cmd.ProcessState.ExitCode() != exitUnreachable || !strings.HasPrefix(string(out), want) {
		t.Errorf("raidq health with nothing listening: %v (exit %d)\n%s\nwant exit %d and %q", err, cmd.ProcessState.ExitCode(), out, exitUnreachable, want)
	}
}

// runClientWithMetrics produces to and consumes from a new topic with a
// client whose registry is served over HTTP (a process's
// metrics.NewProcessRegistry, as an application would), and returns the
// families scraped while the consumer still runs. A producer's and a
// partition reader's series are created when they start, so the scrape
// holds every client family that has children by topic.
func runClientWithMetrics(t *testing.T, url string) map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createTopic(ctx, t, url, "deploy", 2)
	reg := metrics.NewProcessRegistry()
	cl, err := raidq.Connect(url, raidq.WithMetrics(reg), raidq.WithLogger(testkit.Logger(t, 4)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	start := time.Now().Add(-time.Minute)
	produceNative(ctx, t, cl, "deploy", 20)
	c, err := cl.Consumer("deploy", raidq.WithStart(start))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 20 {
		if _, err := c.Next(ctx); err != nil {
			t.Fatalf("consume record %d: %v", i, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := metrics.Serve(ln, reg)
	defer stop()
	return scrapeFamilies(t, "http://"+ln.Addr().String()+"/metrics")
}

// scrapeFamilies GETs a /metrics page and returns its families by name
// with their types, from the text format's "# TYPE name type" lines.
func scrapeFamilies(t *testing.T, u string) map[string]string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	fams := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			fams[f[2]] = f[3]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return fams
}

// describedClientFamilies returns the families metrics.NewClient
// registers, read from the collectors' descriptions rather than from a
// scrape: a Vec whose children are made only on events is absent from a
// scrape until then, but its Describe names it. Types come from the
// collectors' Go types.
func describedClientFamilies(t *testing.T) map[string]string {
	t.Helper()
	rec := &describingRegisterer{Registerer: prometheus.NewRegistry(), fams: map[string]string{}}
	if _, err := metrics.NewClient(rec); err != nil {
		t.Fatal(err)
	}
	return rec.fams
}

// describingRegisterer records the family name and type of every
// collector registered through it.
type describingRegisterer struct {
	prometheus.Registerer
	fams map[string]string
}

func (r *describingRegisterer) Register(c prometheus.Collector) error {
	kind := "untyped"
	switch c.(type) {
	case prometheus.Histogram, *prometheus.HistogramVec:
		kind = "histogram"
	case prometheus.Summary, *prometheus.SummaryVec:
		kind = "summary"
	case prometheus.Counter, *prometheus.CounterVec:
		kind = "counter"
	case prometheus.Gauge, *prometheus.GaugeVec:
		kind = "gauge"
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.fams[descName(d)] = kind
	}
	return r.Registerer.Register(c)
}

// descName is the fqName of a Desc (its String form: Desc{fqName: "x", ...}).
func descName(d *prometheus.Desc) string {
	s := d.String()
	if i := strings.Index(s, `fqName: "`); i >= 0 {
		s = s[i+len(`fqName: "`):]
		if j := strings.IndexByte(s, '"'); j >= 0 {
			return s[:j]
		}
	}
	return s
}

func mergeFamilies(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// checkQueriedFamilies fails for every metric name the dashboard or the
// alerts query that is not a family of fams (a histogram's or summary's
// _bucket, _sum and _count series count as their family).
func checkQueriedFamilies(t *testing.T, fams map[string]string) {
	t.Helper()
	for _, q := range deployQueries(t) {
		for _, name := range metricNames(q.expr) {
			if familyOf(name, fams) == "" {
				t.Errorf("%s queries %s, which raidq does not register: %s", q.where, name, q.expr)
			}
		}
	}
}

// familyOf returns the family name a series name belongs to in fams, or "".
func familyOf(name string, fams map[string]string) string {
	if _, ok := fams[name]; ok {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if k := fams[base]; ok && (k == "histogram" || (k == "summary" && suffix != "_bucket")) {
			return base
		}
	}
	return ""
}

type deployQuery struct{ where, expr string }

// deployQueries returns every PromQL expression of alerts.yml and of
// grafana-dashboard.json (panel targets and template variable queries).
func deployQueries(t *testing.T) []deployQuery {
	t.Helper()
	qs := alertQueries(t)
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, deployQuery{"dashboard panel " + p.Title, tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			s, _ := q["query"].(string)
			qs = append(qs, deployQuery{"dashboard variable " + v.Name, s})
		}
	}
	if len(qs) < 50 {
		t.Fatalf("only %d queries found in alerts.yml and grafana-dashboard.json: is the parsing broken?", len(qs))
	}
	return qs
}

// alertQueries returns the expr of every rule of alerts.yml. The file is
// read line by line (no YAML library in the module): an expression is
// the rest of an "expr:" line, or the indented lines after "expr: >-".
func alertQueries(t *testing.T) []deployQuery {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var qs []deployQuery
	lines := strings.Split(string(b), "\n")
	alert := ""
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if a, ok := strings.CutPrefix(l, "- alert: "); ok {
			alert = a
		}
		e, ok := strings.CutPrefix(l, "expr: ")
		if !ok {
			continue
		}
		if e == ">-" || e == ">" || e == "|" {
			e = ""
			indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
			for i+1 < len(lines) && len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > indent {
				i++
				e += " " + strings.TrimSpace(lines[i])
			}
		}
		qs = append(qs, deployQuery{"alert " + alert, e})
	}
	return qs
}

// metricNames returns the raidq, process and Go runtime metric names in
// a PromQL expression: identifiers starting with raidq_, process_ or go_
// outside quoted strings. Label names, functions and keywords start
// otherwise, so no PromQL parser is needed for the expressions here.
func metricNames(expr string) []string {
	var names []string
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case isIdent(c, true) && (i == 0 || (!isIdent(expr[i-1], false) && expr[i-1] != '$')):
			j := i
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			w := expr[i:j]
			if strings.HasPrefix(w, "raidq_") || strings.HasPrefix(w, "process_") || strings.HasPrefix(w, "go_") {
				names = append(names, w)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	expr := `histogram_quantile(0.99, sum by (le, node) (rate(raidq_node_write_duration_seconds_bucket{node=~"$node",x="raidq_fake"}[$__rate_interval])))` +
		` / process_max_fds and raidq_build_info`
	got := strings.Join(metricNames(expr), " ")
	if want := "raidq_node_write_duration_seconds_bucket process_max_fds raidq_build_info"; got != want {
		t.Fatalf("metricNames = %q, want %q", got, want)
	}
	fams := map[string]string{"raidq_node_write_duration_seconds": "histogram", "raidq_x": "counter"}
	if familyOf("raidq_node_write_duration_seconds_bucket", fams) == "" || familyOf("raidq_x_count", fams) != "" {
		t.Fatal("familyOf: a histogram's _bucket is its family; a counter has no _count")
	}
}
