package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/testkit"
)

// docFiles are the documents whose command blocks TestDocs runs, from the
// repository root (testkit.DocBlock says how a block is annotated).
var docFiles = []string{"README.md", "docs/operations.md", "docs/cluster.md", "docs/security.md",
	"docs/kafka.md", "docs/consumers.md", "cmd/raidq/deploy/README.md"}

// Bounds of one block, one transcript command and a background process's
// wait for its ready line.
const (
	docBlockTimeout = 3 * time.Minute
	docReadyTimeout = 90 * time.Second
)

// TestDocs runs the shell blocks and transcripts of the user documents
// against real processes, as a new user would type them: each document
// in a fresh directory holding the raidq binary as ./raidq (and on PATH),
// its ports moved to free ones, `go build ... ./cmd/raidq` taken as the
// binary already built and `go test` never run. Transcripts ("$ " lines)
// must print what the document shows ("..." matches anything).
func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the documents' commands against raidq processes")
	}
	bin := testBinary(t)
	for _, f := range docFiles {
		t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "..", f))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := testkit.ParseDocBlocks(f, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			newDocRun(t, bin, blocks).run(blocks)
		})
	}
}

// docRun is one document's run: its directory, port map and background
// processes.
type docRun struct {
	t       *testing.T
	dir     string
	envFile string // the shell's exported variables, carried from block to block
	ports   map[string]string
	env     []string
	procs   []*docProc
}

// docHostPort finds the host:port pairs a document names.
var docHostPort = regexp.MustCompile(`\b(127\.0\.0\.1|localhost|0\.0\.0\.0):(\d{4,5})\b`)

func newDocRun(t *testing.T, bin string, blocks []testkit.DocBlock) *docRun {
	t.Helper()
	r := &docRun{t: t, dir: t.TempDir(), ports: map[string]string{}}
	r.envFile = filepath.Join(r.dir, ".docenv")
	binDir := filepath.Join(r.dir, ".bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{filepath.Join(binDir, "raidq"), filepath.Join(r.dir, "raidq")} {
		if err := os.Symlink(bin, link); err != nil {
			t.Fatal(err)
		}
	}
	// The deployment walkthroughs work in cmd/raidq/deploy (they write
	// secrets/ there): a copy.
	if err := os.CopyFS(filepath.Join(r.dir, "cmd", "raidq", "deploy"), os.DirFS("deploy")); err != nil {
		t.Fatal(err)
	}
	// Every port the document names, and the defaults clients use when it
	// names none (NATS 4222, metrics 9422, Kafka 9092), get free ones.
	seen := map[string]bool{"4222": true, "9422": true, "9092": true}
	for _, b := range blocks {
		for _, l := range b.Lines {
			for _, m := range docHostPort.FindAllStringSubmatch(l, -1) {
				seen[m[2]] = true
			}
		}
	}
	free, err := cluster.FreePorts(len(seen))
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for p := range seen {
		r.ports[p] = strconv.Itoa(free[i])
		i++
	}
	r.env = []string{"PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH"),
		"NATS_URL=nats://127.0.0.1:" + r.ports["4222"], "RAIDQ_NATS=", "RAIDQ_METRICS_ADDR=127.0.0.1:" + r.ports["9422"],
		"RAIDQ_CREDS=", "NATS_CREDS=", "RAIDQ_USER=", "RAIDQ_PASSWORD=", "RAIDQ_NKEY=", "RAIDQ_TLS_CA="}
	return r
}

// pwdFile holds the directory the last block left the shell in.
func (r *docRun) pwdFile() string { return filepath.Join(r.dir, ".docpwd") }

// rewrite moves the ports of text to the run's free ones.
func (r *docRun) rewrite(text string) string {
	return docHostPort.ReplaceAllStringFunc(text, func(hp string) string {
		m := docHostPort.FindStringSubmatch(hp)
		if p, ok := r.ports[m[2]]; ok {
			return m[1] + ":" + p
		}
		return hp
	})
}

var (
	// docServer: a command that serves until stopped (raidq dev, node,
	// kafka): the document runs it "in another terminal".
	docServer  = regexp.MustCompile(`^(\./)?raidq (dev|node|kafka)\b`)
	docGoBuild = regexp.MustCompile(`^(?:CGO_ENABLED=0 )?go build .*-o (\S+) \./cmd/raidq\b.*$`)
	docGoRun   = regexp.MustCompile(`\bgo run \./cmd/raidq\b`)
)

// docSegment is a run of shell lines, or of background commands started
// together (six nodes wait for each other before they are ready).
type docSegment struct {
	shell      string
	background []string
}

// script turns a block's lines into segments to run in order: ports
// moved, the binary's build a copy of the test binary, go run the
// binary, go test left out; a line ending in "&", or a raidq server,
// runs in the background.
func (r *docRun) script(lines []string, fixedPorts bool) []docSegment {
	var segs []docSegment
	var sh []string
	flush := func() {
		if strings.TrimSpace(strings.Join(sh, "")) != "" {
			segs = append(segs, docSegment{shell: strings.Join(sh, "\n")})
		}
		sh = nil
	}
	bg := func(cmd string) {
		flush()
		if n := len(segs); n > 0 && segs[n-1].shell == "" {
			segs[n-1].background = append(segs[n-1].background, cmd)
			return
		}
		segs = append(segs, docSegment{background: []string{cmd}})
	}
	for _, l := range lines {
		if !fixedPorts {
			l = r.rewrite(l)
		}
		trimmed := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trimmed, "go test"):
			continue
		case docGoBuild.MatchString(trimmed) && strings.HasPrefix(trimmed, "CGO_ENABLED=0"):
			// A static binary for an image FROM scratch: built as written,
			// from this tree (the test binary may be linked dynamically).
			l = docGoBuild.ReplaceAllString(trimmed, `CGO_ENABLED=0 go -C "$$RAIDQ_DOC_SRC" build -trimpath -o "$$PWD/$1" ./cmd/raidq`)
		case docGoBuild.MatchString(trimmed):
			l = docGoBuild.ReplaceAllString(trimmed, `[ -e $1 ] || cp -L "$$RAIDQ_DOC_BIN" $1`)
		case strings.HasSuffix(trimmed, "&") && !strings.HasSuffix(trimmed, "&&"):
			bg(strings.TrimSuffix(trimmed, "&"))
			continue
		case docServer.MatchString(trimmed):
			bg(trimmed) // a terminal of its own in the document
			continue
		}
		sh = append(sh, docGoRun.ReplaceAllString(l, "raidq"))
	}
	flush()
	return segs
}

func (r *docRun) run(blocks []testkit.DocBlock) {
	for _, b := range blocks {
		where := fmt.Sprintf("%s:%d", b.File, b.Line)
		if why := r.skip(b); why != "" {
			r.t.Logf("%s: skipped: %s", where, why)
			continue
		}
		if b.Transcript() {
			r.transcript(where, b)
			continue
		}
		want := 0
		if e := b.Ann["exit"]; e != "" {
			want, _ = strconv.Atoi(e)
		}
		if c := b.Ann["cleanup"]; c != "" {
			r.t.Cleanup(func() {
				if out, code := r.shell(fmt.Sprintf("cd %q\n%s", r.dir, c), false); code != 0 { // from the document's directory
					r.t.Logf("%s: cleanup %q: exit %d\n%s", where, c, code, out)
				}
			})
		}
		_, fixed := b.Ann["fixedports"]
		for _, seg := range r.script(b.Lines, fixed) {
			if seg.shell == "" {
				r.startAll(where, seg.background, b.Ann["ready"])
				continue
			}
			out, code := r.shell(seg.shell, true)
			if code != want {
				r.t.Fatalf("%s: exit %d, want %d; the block:\n%s\noutput:\n%s", where, code, want, seg.shell, out)
			}
		}
	}
}

// skip says why a block is not run here ("" to run it).
func (r *docRun) skip(b testkit.DocBlock) string {
	if why, ok := b.Ann["skip"]; ok {
		return cmpOr(why, "marked skip")
	}
	if v := b.Ann["env"]; v != "" && os.Getenv(v) == "" {
		return "runs only with " + v + " set"
	}
	for _, tool := range strings.Split(b.Ann["needs"], ",") {
		if tool = strings.TrimSpace(tool); tool == "" {
			continue
		}
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed"
		}
	}
	return ""
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// transcript runs each "$ " command and compares what it printed.
func (r *docRun) transcript(where string, b testkit.DocBlock) {
	_, fixed := b.Ann["fixedports"]
	rewrite := r.rewrite
	if fixed {
		rewrite = func(s string) string { return s }
	}
	for _, s := range b.Steps() {
		out, _ := r.shell(docGoRun.ReplaceAllString(rewrite(s.Cmd), "raidq"), false)
		want := make([]string, len(s.Want))
		for i, w := range s.Want {
			want[i] = rewrite(w)
		}
		if diff := testkit.MatchDocOutput(want, out); diff != "" {
			r.t.Errorf("%s: $ %s\n%s", where, s.Cmd, diff)
		}
	}
}

// shell runs text with bash in the run's directory, with the variables
// earlier blocks exported, and returns its output (stdout and stderr
// together) and exit code. strict adds set -e and pipefail.
func (r *docRun) shell(text string, strict bool) (string, int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), docBlockTimeout)
	defer cancel()
	set := ""
	if strict {
		set = "set -eo pipefail\n"
	}
	// Like one terminal: the variables exported and the directory left by
	// the blocks before (.docpwd) carry on.
	script := fmt.Sprintf("[ -f %q ] && . %q\ncd \"$(cat %q 2>/dev/null || echo %q)\"\nset -a\n%s%s\nrc=$?\nexport -p > %q\npwd > %q\nexit $rc\n",
		r.envFile, r.envFile, r.pwdFile(), r.dir, set, text, r.envFile, r.pwdFile())
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	src, _ := filepath.Abs(filepath.Join("..", ".."))
	cmd.Env = append(append(os.Environ(), r.env...), "RAIDQ_DOC_BIN="+filepath.Join(r.dir, "raidq"), "RAIDQ_DOC_SRC="+src)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		r.t.Fatalf("timed out after %v:\n%s\noutput:\n%s", docBlockTimeout, text, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatalf("bash: %v", err)
	}
	return out.String(), code
}

// startAll starts cmds until the document ends and waits until each is
// ready: ready in its output when given, else what a raidq server prints
// when it serves. A raidq dev cluster stops every earlier background
// process (the documents say to stop the one before), and a node stops
// earlier dev clusters.
func (r *docRun) startAll(where string, cmds []string, ready string) {
	r.t.Helper()
	var started []*docProc
	for _, cmd := range cmds {
		started = append(started, r.start(where, cmd))
	}
	deadline := time.Now().Add(docReadyTimeout)
	for _, b := range started {
		want := cmpOr(ready, map[string]string{"dev": "press Ctrl-C to stop", "node": "node ready", "kafka": "listening"}[b.kind])
		if want == "" {
			continue
		}
		for !strings.Contains(b.p.Stdout()+b.p.Stderr(), want) {
			if b.p.Exited() || time.Now().After(deadline) {
				r.t.Fatalf("%s: %q did not print %q (exited: %v):\n%s", where, b.cmd, want, b.p.Exited(), b.p.Tail(30))
			}
			select {
			case <-b.p.Done():
			case <-time.After(50 * time.Millisecond): // its output has no event to wait on
			}
		}
	}
}

// start starts cmd in the background, stopping what it replaces.
func (r *docRun) start(where, cmd string) *docProc {
	r.t.Helper()
	kind := ""
	if m := docServer.FindStringSubmatch(cmd); m != nil {
		kind = m[2]
	}
	if kind == "dev" && !strings.Contains(cmd, "--listen") { // its default port, moved like the others
		cmd = strings.Replace(cmd, "raidq dev", "raidq dev --listen 127.0.0.1:"+r.ports["4222"], 1)
	}
	for _, b := range r.procs {
		if kind == "dev" || kind == "node" && b.kind == "dev" {
			r.stop(b)
		}
	}
	script := fmt.Sprintf("[ -f %q ] && . %q\ncd \"$(cat %q 2>/dev/null || echo %q)\"\nexec %s", r.envFile, r.envFile, r.pwdFile(), r.dir, cmd)
	p, err := cluster.StartProc("doc: "+cmd, "bash", []string{"-c", script}, r.env...)
	if err != nil {
		r.t.Fatalf("%s: %v", where, err)
	}
	b := &docProc{p: p, cmd: cmd, kind: kind}
	r.procs = append(r.procs, b)
	r.t.Cleanup(func() {
		if r.t.Failed() && !b.stopped {
			r.t.Logf("--- %s (background), last lines:\n%s", cmd, p.Tail(20))
		}
		r.stop(b)
	})
	return b
}

// docProc is a background process of a document.
type docProc struct {
	p       *cluster.Proc
	cmd     string
	kind    string // dev, node, kafka or ""
	stopped bool
}

// stop ends b (SIGTERM, then SIGKILL after 30 s), once.
func (r *docRun) stop(b *docProc) {
	if b.stopped {
		return
	}
	b.stopped = true
	if _, err := b.p.Stop(30 * time.Second); err != nil {
		b.p.Kill()
	}
}
