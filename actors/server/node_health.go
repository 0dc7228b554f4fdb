package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raidq/raidq/actors/node"
)

// ErrJetStreamOff: the embedded NATS server turned its JetStream off (it
// does when its disk fills) and does not turn it back on; once the disk is
// below the watermark again the node stops with this error so that its
// supervisor restarts it with JetStream (Fatal).
var ErrJetStreamOff = errors.New("the embedded NATS server turned JetStream off (out of disk) and does not turn it back on")

// healthEvery is how often the node looks at its disk and its JetStream.
var healthEvery = 5 * time.Second // a variable: tests shorten it

// diskPort measures the file system of the node's data directory.
func (n *Node) diskPort() (node.DiskUsage, error) { return diskUsage(n.opts.DataDir) }

// jetStreamPort says why the embedded JetStream is off ("" while it runs,
// or when the node joined another NATS system).
func (n *Node) jetStreamPort() string {
	if n.server == nil || n.server.NATS().JetStreamEnabled() {
		return ""
	}
	return "turned off by the NATS server (its disk or resources ran out); the node restarts once the disk is below the watermark"
}

// healthState is what watchHealth saw last, to log changes only.
type healthState struct {
	disk      string // disk pressure
	jetStream string
}

// watchHealth logs when the disk passes the watermark and when it is back,
// and when the embedded JetStream is turned off; with JetStream off and
// the disk back below the watermark it stops the node through Fatal.
func (n *Node) watchHealth(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	var last healthState
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := healthState{disk: n.node.DiskPressure(), jetStream: n.jetStreamPort()}
		if err := n.healthChanged(last, now); err != nil {
			n.onFatal(err)
			return
		}
		last = now
	}
}

// healthChanged logs the change from was to now and returns the error to
// stop the node with, if any.
func (n *Node) healthChanged(was, now healthState) error {
	switch {
	case now.disk != "" && was.disk == "":
		n.log.Warn("disk past the watermark: free space before the disk fills (JetStream turns itself off, then the store fails)",
			"dir", n.opts.DataDir, "disk", now.disk)
	case now.disk == "" && was.disk != "":
		n.log.Info("disk below the watermark again", "dir", n.opts.DataDir)
	}
	if now.jetStream != "" && was.jetStream == "" {
		n.log.Error("embedded JetStream is off: this server holds no metadata replicas until the node restarts",
			"reason", now.jetStream)
	}
	if now.jetStream != "" && now.disk == "" {
		return fmt.Errorf("node %s: %w; the disk is below the watermark again: stopping so that the supervisor restarts the node",
			n.opts.ID, ErrJetStreamOff)
	}
	return nil
}
