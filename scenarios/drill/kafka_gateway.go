package drill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/scenarios/cluster"
)

// The kafka drill's gateways: kafkaGateways `raidq kafka` processes of
// the drill's binary, each given every node's client URL with its list
// starting at a faulted node (memberStarts, as the live group's members),
// so the kills reach servers the gateways use. They are stateless
// clients of the cluster; the drill never faults them. A gateway that
// exits by itself is recorded (it fails the drill) and not restarted.

const (
	kafkaGateways = 2
	// gatewayStopWait bounds a gateway's exit after SIGTERM (then SIGKILL).
	gatewayStopWait = 15 * time.Second
	// gatewayReadyWait bounds a gateway's start: listening and serving the
	// drill topic's metadata.
	gatewayReadyWait = 60 * time.Second
)

// gatewayProc is one `raidq kafka` process.
type gatewayProc struct {
	id, addr, list string
	from           string // the node its NATS list starts at
	cmd            *exec.Cmd
	stderr         *lineTail
	done           chan struct{} // closed once the process is reaped
	state          string        // how it ended, set before done closes
	code           int

	mu       sync.Mutex
	stopping bool // the drill stops it: its exit is not a failure
}

// startGateways starts the gateways against every node of the backend
// and waits until each serves the drill topic's metadata. onExit is
// called (once, in its own goroutine) for a gateway that exits while the
// drill did not stop it.
func (r *run) startGateways(ctx context.Context, onExit func(g *gatewayProc)) ([]*gatewayProc, error) {
	bin := r.be.ClientBinary()
	if bin == "" {
		return nil, errors.New("kafka: no raidq binary to run `raidq kafka`")
	}
	ports, err := cluster.FreePorts(kafkaGateways)
	if err != nil {
		return nil, err
	}
	var urls []string
	for i := range r.be.IDs() {
		urls = append(urls, r.be.ClientURL([]int{i}))
	}
	var gws []*gatewayProc
	for k, s := range memberStarts(r.plan.faulted, len(urls), kafkaGateways) {
		g := &gatewayProc{id: fmt.Sprintf("kgw%d", k), addr: fmt.Sprintf("127.0.0.1:%d", ports[k]),
			list: strings.Join(rotate(urls, s), ","), from: r.be.IDs()[s], stderr: &lineTail{max: memberTailLines},
			done: make(chan struct{})}
		if err := g.start(bin, r.be.Cluster(), onExit); err != nil {
			stopGateways(gws)
			return nil, err
		}
		gws = append(gws, g)
		r.event("info", "kafka gateway %s started on %s (`raidq kafka`, NATS list from %s)", g.id, g.addr, g.from)
	}
	for _, g := range gws {
		if err := g.waitReady(ctx, r.cfg.Partitions); err != nil {
			stopGateways(gws)
			return nil, err
		}
	}
	return gws, nil
}

// start runs the gateway process; onExit is told about an exit the drill
// did not ask for.
func (g *gatewayProc) start(bin, clusterName string, onExit func(*gatewayProc)) error {
	cmd := exec.Command(bin, "kafka", "--nats", g.list, "--cluster", clusterName, "--listen", g.addr, "--id", g.id,
		"--log-level", "warn")
	cmd.Env = withoutRaidqEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = g.stderr, g.stderr
	setMemberProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start kafka gateway %s: %w", g.id, err)
	}
	g.cmd = cmd
	go func() {
		err := cmd.Wait()
		g.code, g.state = -1, fmt.Sprint(err)
		if cmd.ProcessState != nil {
			g.code, g.state = cmd.ProcessState.ExitCode(), cmd.ProcessState.String()
		}
		close(g.done)
		g.mu.Lock()
		stopping := g.stopping
		g.mu.Unlock()
		if !stopping && onExit != nil {
			onExit(g)
		}
	}()
	return nil
}

// withoutRaidqEnv drops the RAIDQ_* variables (credentials, TLS, cluster):
// none of the caller's may leak into the drill's insecure cluster.
func withoutRaidqEnv(env []string) []string {
	out := []string{}
	for _, e := range env {
		if !strings.HasPrefix(e, "RAIDQ_") {
			out = append(out, e)
		}
	}
	return out
}

// waitReady waits until the gateway answers a Metadata request for the
// drill topic with all its partitions, or exits, or gatewayReadyWait
// passes.
func (g *gatewayProc) waitReady(ctx context.Context, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.addr), kgo.ClientID("raidq-drill-ready"))
	if err != nil {
		return err
	}
	defer cl.Close()
	wctx, cancel := context.WithTimeout(ctx, gatewayReadyWait)
	defer cancel()
	var last error
	for {
		if last = metadataReady(wctx, cl, partitions); last == nil {
			return nil
		}
		select {
		case <-g.done:
			return fmt.Errorf("kafka gateway %s exited (%s) before it served: %s", g.id, g.state, lastLine(g.stderr.tail(20)))
		case <-wctx.Done():
			return fmt.Errorf("kafka gateway %s not ready after %s: %v; stderr: %s", g.id, gatewayReadyWait, last,
				lastLine(g.stderr.tail(20)))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// metadataReady asks cl's broker for the drill topic: nil once it has
// the topic with partitions partitions.
func metadataReady(ctx context.Context, cl *kgo.Client, partitions int) error {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(Topic)
	req.Topics = append(req.Topics, t)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl)
	switch {
	case err != nil:
		return err
	case len(resp.Topics) != 1:
		return fmt.Errorf("metadata: %d topics", len(resp.Topics))
	case resp.Topics[0].ErrorCode != 0:
		return fmt.Errorf("metadata: error code %d", resp.Topics[0].ErrorCode)
	case len(resp.Topics[0].Partitions) != partitions:
		return fmt.Errorf("metadata: %d of %d partitions", len(resp.Topics[0].Partitions), partitions)
	}
	return nil
}

// stop sends SIGTERM and waits up to gatewayStopWait for the exit; it
// returns "" for an exit 0, else what went wrong (a gateway still running
// is killed). A gateway that already exited by itself returns "".
func (g *gatewayProc) stop() string {
	g.mu.Lock()
	g.stopping = true
	g.mu.Unlock()
	select {
	case <-g.done:
		return "" // recorded as an exit by onExit
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
		if g.code != 0 {
			return fmt.Sprintf("%s ended with %s after SIGTERM: %s", g.id, g.state, lastLine(g.stderr.tail(20)))
		}
		return ""
	case <-time.After(gatewayStopWait):
		_ = g.cmd.Process.Kill()
		<-g.done
		return fmt.Sprintf("%s still ran %s after SIGTERM (killed): %s", g.id, gatewayStopWait, lastLine(g.stderr.tail(20)))
	}
}

// kill ends the gateway at once (an early return).
func (g *gatewayProc) kill() {
	g.mu.Lock()
	g.stopping = true
	g.mu.Unlock()
	if g.cmd != nil && g.cmd.Process != nil {
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

func stopGateways(gws []*gatewayProc) {
	for _, g := range gws {
		g.kill()
	}
}
