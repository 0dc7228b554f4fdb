package server

import (
	"fmt"
	"os"

	"github.com/raidq/raidq/slotstore"
)

// Test and drill helpers for repair (docs/design.md#repair-and-scrub): direct access to a node's
// store, and wiping a node's data directory so that it comes back as a new
// incarnation that repair refills.

// NodeStore returns node i's slot store (nil while the node is stopped).
// Callers read it (Scan, Get); writing to it behind the node's back breaks
// write-once.
func (lc *LocalCluster) NodeStore(i int) slotstore.Store {
	ln, err := lc.node(i)
	if err != nil || ln.node == nil {
		return nil
	}
	return ln.store
}

// WipeNode kills node i and deletes its data directory: RestartNode then
// starts a new incarnation in its place, which answers "unknown" for the
// past until repair has refilled it.
func (lc *LocalCluster) WipeNode(i int) error {
	if err := lc.KillNode(i); err != nil {
		return err
	}
	ln, err := lc.node(i)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(ln.dir); err != nil {
		return fmt.Errorf("wipe node %s: %w", ln.id, err)
	}
	return nil
}
