package node

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/slotstore"
)

// DiskUsage is the file system that holds a node's data: bytes free (to
// an unprivileged writer) and in all.
type DiskUsage struct {
	Free, Total uint64
}

// usedFraction is the share of the file system in use (0 when unknown).
func (u DiskUsage) usedFraction() float64 {
	if u.Total == 0 {
		return 0
	}
	return 1 - float64(min(u.Free, u.Total))/float64(u.Total)
}

// diskPressure says why the disk needs an operator: in use past the
// watermark (a fraction, 0 < watermark < 1). "" when it is fine or
// unknown. Pure: the node reports it in its status and the process
// wrapper logs its changes.
func diskPressure(u DiskUsage, watermark float64) string {
	if u.Total == 0 || watermark <= 0 || u.usedFraction() < watermark {
		return ""
	}
	return fmt.Sprintf("disk %.0f%% full, past the %.0f%% watermark: %s free of %s", 100*u.usedFraction(), 100*watermark,
		bus.FormatBytes(u.Free), bus.FormatBytes(u.Total))
}

// DiskPressure is the node's disk pressure now ("" when fine, or when the
// node measures no disk): what status reports and the process wrapper
// watches.
func (n *Node) DiskPressure() string {
	u, ok := n.disk()
	if !ok {
		return ""
	}
	return diskPressure(u, n.cfg.DiskWatermark)
}

// disk measures the data file system through the Disk port (false: no
// port, or it failed).
func (n *Node) disk() (DiskUsage, bool) {
	if n.cfg.Disk == nil {
		return DiskUsage{}, false
	}
	u, err := n.cfg.Disk()
	return u, err == nil && u.Total > 0
}

// fillHealth sets st's disk, store and JetStream fields (Status).
func (n *Node) fillHealth(st *bus.NodeStatus) {
	if u, ok := n.disk(); ok {
		st.DiskFree, st.DiskTotal = int64(min(u.Free, 1<<62)), int64(min(u.Total, 1<<62))
		st.DiskWatermark = n.cfg.DiskWatermark
		st.DiskFull = diskPressure(u, n.cfg.DiskWatermark)
	}
	if be, ok := n.cfg.Store.(slotstore.BackgroundErrorer); ok {
		count, last := be.BackgroundErrors()
		st.Counters.StoreErrors += count
		st.StoreLog = last
	}
	if n.cfg.JetStream != nil {
		st.JetStream = n.cfg.JetStream()
	}
	st.Peers = n.ensemblePeers()
}

// ensemblePeers are the node ids named in the ensembles of the node's cached
// catalog (a catalog that lists its topics), sorted, bounded.
func (n *Node) ensemblePeers() []string {
	cat, ok := n.cfg.Catalog.(interface{ Names() []string })
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	for _, name := range cat.Names() {
		t, err := n.cfg.Catalog.Topic(name)
		if err != nil {
			continue
		}
		for _, ens := range t.Ensembles {
			for _, id := range ens {
				if len(seen) < bus.MaxStatusPeers {
					seen[id] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// storeErrorLogEvery spaces the log lines of store errors that do not stop
// the node (failed scans): the first is logged at once, then at most one
// per interval, with the count since the last line.
const storeErrorLogEvery = 10 * time.Second

// storeError counts a store error the node answers STORE_ERROR for and
// logs it: at once the first time, then at most every storeErrorLogEvery.
func (n *Node) storeError(op string, err error) {
	n.stats.StoreErrors.Add(1)
	n.storeErrs.Add(1)
	now := time.Now().UnixNano()
	last := n.storeErrLogged.Load()
	if last != 0 && now-last < int64(storeErrorLogEvery) || !n.storeErrLogged.CompareAndSwap(last, now) {
		return
	}
	n.cfg.Logger.Error("slot store error", "op", op, "err", err, "errors_since_last_line", n.storeErrs.Swap(0))
}
