package bus

import (
	"fmt"
	"time"
)

// The node status endpoint: nodes answer it (actors/node), clients and
// `raidq status` ask it (actors/status.go).

// NodeServiceName is the NATS micro service every node runs: `nats micro
// ls` lists the nodes, $SRV.PING.raidq-node discovers them, and its
// endpoint "status" answers on raidq.<cluster>.status.<node>.
const NodeServiceName = "raidq-node"

// Health values of NodeStatus.Health.
const (
	HealthOK       = "ok"
	HealthSlow     = "slow reply"   // answered, later than StatusOptions.SlowAfter
	HealthNoAnswer = "no answer"    // discovered or expected, but its status did not come back
	HealthFailed   = "store failed" // answered, but its store failed and it must stop
	HealthClockOff = "clock off"    // answered, but its clock is off its peers': it refuses writes
	// HealthDegraded: answered and serves slots, but needs an operator: its
	// disk is past the watermark (DiskFull) or its embedded JetStream was
	// turned off (JetStream).
	HealthDegraded = "degraded"
)

// MaxStatusPeers bounds NodeStatus.Peers.
const MaxStatusPeers = 1024

// DefaultDiskWatermark is the fraction of a node's file system in use past
// which it reports disk pressure (raidq node --disk-watermark).
const DefaultDiskWatermark = 0.90

// NodeCounters are a node's counters since it started (NodeStats, as values).
type NodeCounters struct {
	Writes      int64 `json:"writes"`
	Conflicts   int64 `json:"conflicts"`
	Sealed      int64 `json:"sealed"`
	ClockAhead  int64 `json:"clock_ahead"`
	BadRequests int64 `json:"bad_requests"`
	Busy        int64 `json:"busy"`
	Scans       int64 `json:"scans"`
	StoreErrors int64 `json:"store_errors"`
	// Maintenance: repair (shards rebuilt and written, fixes that failed,
	// decodable stripes with fewer than n shards seen by the last complete
	// pass in the ranges it scanned (a gauge; settled ranges are not
	// scanned again), passes and the last pass's duration, holes
	// recorded), in-doubt stripes re-appended, scrub (passes, shards
	// checked, corrupt found) and retention (slots dropped).
	ShardsRepaired   int64 `json:"shards_repaired"`
	RepairFailures   int64 `json:"repair_failures"`
	StripesBelowN    int64 `json:"stripes_below_n"`
	RepairPending    int64 `json:"repair_pending"`
	InDoubtQueued    int64 `json:"in_doubt_queued"`
	RepairPasses     int64 `json:"repair_passes"`
	RepairPassNanos  int64 `json:"repair_pass_ns"`
	Holes            int64 `json:"holes"`
	ReAppended       int64 `json:"reappended"`
	ScrubPasses      int64 `json:"scrub_passes"`
	ScrubbedShards   int64 `json:"scrubbed_shards"`
	ScrubCorrupt     int64 `json:"scrub_corrupt"`
	RetentionDropped int64 `json:"retention_dropped"`
	// Refused hostile or broken input, also counted in BadRequests
	// (actors/node_guard.go): undecodable payloads or shards, requests
	// whose subject, payload and metadata disagree (topic, partition,
	// request type, ensemble position), repair writes from the wire.
	Malformed     int64 `json:"malformed"`
	Mismatches    int64 `json:"mismatches"`
	ForgedRepairs int64 `json:"forged_repairs"`
}

// NodeStatus is what a node's status endpoint answers (JSON). The fields
// after Failure are filled by the caller of Status, not by the node.
type NodeStatus struct {
	Node        string       `json:"node"`
	Cluster     string       `json:"cluster"`
	Version     string       `json:"version,omitempty"`
	Incarnation string       `json:"incarnation,omitempty"` // the data directory's life (id@birth)
	Started     time.Time    `json:"started"`
	Clock       int64        `json:"clock"` // the node clock (unix ns) when it answered
	DiskBytes   int64        `json:"disk_bytes"`
	Pending     int64        `json:"pending"` // requests received and not yet answered
	MaxPending  int          `json:"max_pending"`
	Owners      int64        `json:"owners"` // slot-owner actors alive
	Counters    NodeCounters `json:"counters"`
	// SlowMode is the delay the node adds to every slot reply (demo and
	// drills: a deliberately slow node); 0 normally.
	SlowMode time.Duration `json:"slow_mode_ns,omitempty"`
	NoSync   bool          `json:"no_fsync"`
	Failure  string        `json:"failure,omitempty"` // the store failure that stops the node
	// ClockOff says why the node refuses writes: its clock is off its
	// peers' (clock_watch.go); empty normally.
	ClockOff string `json:"clock_off,omitempty"`
	// DiskFree and DiskTotal are the bytes free and in all of the file
	// system that holds the node's data (0: not measured); DiskWatermark
	// the fraction in use past which DiskFull says so ("disk 95% full,
	// past the 90% watermark: 1.2 GiB free").
	DiskFree      int64   `json:"disk_free_bytes,omitempty"`
	DiskTotal     int64   `json:"disk_total_bytes,omitempty"`
	DiskWatermark float64 `json:"disk_watermark,omitempty"`
	DiskFull      string  `json:"disk_full,omitempty"`
	// StoreLog is the last error the store logged in the background (a
	// LevelDB flush or compaction that failed), with StoreErrors counting
	// it; empty when there was none.
	StoreLog string `json:"store_log,omitempty"`
	// JetStream is why the node's embedded JetStream is off (the NATS
	// server turns it off when its disk fills, and does not turn it back
	// on); empty while it runs or when the node embeds no server.
	JetStream string `json:"jetstream,omitempty"`
	// Peers are the node ids the ensembles of this node's cached catalog
	// name (sorted, at most MaxStatusPeers): status learns from them which
	// nodes should answer even when the metadata cannot be read.
	Peers []string `json:"peers,omitempty"`

	// Set by Status on the asking side.
	Health    string        `json:"health,omitempty"`
	RTT       time.Duration `json:"rtt_ns,omitempty"`  // round trip of the status request
	Skew      time.Duration `json:"skew_ns,omitempty"` // node clock minus local clock, corrected by half the round trip
	Instances int           `json:"instances,omitempty"`
	Error     string        `json:"error,omitempty"`
}

// FormatBytes is n in binary units with one decimal ("1.5 GiB"), for
// status tables and notes.
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
