package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The deployment files of cmd/raidq/deploy checked by the tools that
// consume them: docker (the image), docker compose, promtool and
// systemd-analyze. Each test skips, saying so, where its tool is missing;
// the image build also skips with -short (it compiles a static binary
// and builds an image: tens of seconds). The metric families the
// dashboard and alerts query are checked in deploy_metrics_test.go.

const deployDir = "deploy"

// deployTool returns the path of the named command or skips the test.
func deployTool(t *testing.T, name, why string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: %s not checked", name, why)
	}
	return p
}

// deployRun runs a command in dir and fails the test with its output if it
// fails; it returns stdout.
func deployRun(t *testing.T, dir string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

func TestDeployPrometheusRules(t *testing.T) {
	promtool := deployTool(t, "promtool", "alerts.yml and prometheus.yml")
	deployRun(t, deployDir, time.Minute, promtool, "check", "rules", "alerts.yml")
	deployRun(t, deployDir, time.Minute, promtool, "check", "config", "prometheus.yml")
	// alerts_test.yml: the main alerts fire after their `for` and not before.
	deployRun(t, deployDir, time.Minute, promtool, "test", "rules", "alerts_test.yml")
}

// deployCompose returns `docker compose` where the plugin exists, else
// docker-compose (v1), else skips.
func deployCompose(t *testing.T) []string {
	t.Helper()
	if docker, err := exec.LookPath("docker"); err == nil {
		if exec.Command(docker, "compose", "version").Run() == nil {
			return []string{docker, "compose"}
		}
	}
	if dc, err := exec.LookPath("docker-compose"); err == nil {
		return []string{dc}
	}
	t.Skip("neither docker compose nor docker-compose installed: compose.yaml not checked")
	return nil
}

func TestDeployComposeConfig(t *testing.T) {
	c := deployCompose(t)
	args := append(c[1:], "-f", "compose.yaml", "-p", "raidqdeploytest")
	deployRun(t, deployDir, time.Minute, c[0], append(args, "config", "-q")...)
	services := strings.Fields(deployRun(t, deployDir, time.Minute, c[0], append(args, "config", "--services")...))
	for _, want := range []string{"n0", "n1", "n2", "n3", "n4", "n5"} {
		if !strings.Contains(" "+strings.Join(services, " ")+" ", " "+want+" ") {
			t.Errorf("compose services %v: no %s", services, want)
		}
	}
	cfg := deployRun(t, deployDir, time.Minute, c[0], append(args, "config")...)
	for _, want := range []string{"--auth", "--tls-cert", "--tls-ca", "--metrics", "healthcheck", "restart: unless-stopped"} {
		if n := strings.Count(cfg, want); n < 6 {
			t.Errorf("compose config: %q appears %d times, want it for each of the six nodes", want, n)
		}
	}
}

func TestDeploySystemdUnit(t *testing.T) {
	analyze := deployTool(t, "systemd-analyze", "raidq-node.service")
	unit, err := os.ReadFile(filepath.Join(deployDir, "systemd", "raidq-node.service"))
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that ExecStart's binary exists: point it at one.
	bin := testBinary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "raidq-node.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/raidq"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestDeployImage builds the image FROM scratch around a static binary,
// checks its user and health check, runs a node in it and asks
// `raidq health` inside the container; the container, its volume and
// the image are removed at the end.
func TestDeployImage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the image build (static binary, docker build) is slow")
	}
	docker := deployTool(t, "docker", "the Dockerfile")
	if out, err := exec.Command(docker, "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no docker daemon answers (%v: %s): the Dockerfile not checked", err, bytes.TrimSpace(out))
	}
	ctxDir := deployImageContext(t)
	tag := "raidq-deploy-test:" + deployRandomHex(t)
	deployRun(t, ".", 5*time.Minute, docker, "build", "-q", "-t", tag, ctxDir)
	t.Cleanup(func() { _ = exec.Command(docker, "rmi", "-f", tag).Run() })

	info := deployRun(t, ".", time.Minute, docker, "image", "inspect", "-f", "{{.Config.User}} {{json .Config.Healthcheck.Test}}", tag)
	if want := `10001:10001 ["CMD","/raidq","health","--quiet","--timeout","4s"]`; strings.TrimSpace(info) != want {
		t.Errorf("image user and health check: %q, want %q", strings.TrimSpace(info), want)
	}
	if out := deployRun(t, ".", time.Minute, docker, "run", "--rm", tag, "version"); !strings.HasPrefix(out, "raidq ") {
		t.Errorf("docker run %s version: %q", tag, out)
	}
	name := "raidq-deploy-test-" + deployRandomHex(t)
	deployRun(t, ".", time.Minute, docker, "run", "-d", "--name", name, "--read-only", "--tmpfs", "/tmp", tag,
		"node", "--insecure", "--id", "n0", "--data", "/data", "--listen", "0.0.0.0:4222", "--metrics", "0.0.0.0:9422", "--no-fsync")
	t.Cleanup(func() { _ = exec.Command(docker, "rm", "-f", "-v", name).Run() })
	// The node writes /data as 10001 (the image's /data is owned by it) and
	// is healthy once its metadata is up: a few seconds.
	out, err := exec.Command(docker, "exec", name, "/raidq", "health", "--wait", "60s", "--timeout", "2s").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "healthy: node n0 serving") {
		logs, _ := exec.Command(docker, "logs", "--tail", "30", name).CombinedOutput()
		t.Fatalf("raidq health in the container: %v\n%s\ncontainer log:\n%s", err, out, logs)
	}
}

// deployImageContext returns a docker build context: the deploy directory's
// Dockerfile, .dockerignore and empty/, and a static raidq binary.
func deployImageContext(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"Dockerfile", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(deployDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	goBin := deployTool(t, "go", "the image (the static binary)")
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", filepath.Join(dir, "raidq"), "github.com/raidq/raidq/cmd/raidq")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	return dir
}

func deployRandomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
