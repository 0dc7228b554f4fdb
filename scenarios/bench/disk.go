package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/raidq/raidq/slotstore"
)

// DiskProbe is what the machine's disk alone allows for the write pattern
// of each system, measured before the workloads: Writers files, each
// pre-written and synced, and in every round each writer writes Bytes
// and fdatasyncs its file, all at once; the next round starts when all
// have finished (the lock-step of synchronous publishers, whose next
// batch waits for the ack). Neither system's CPU work is in it, so it is
// a ceiling: with fsync on, a run cannot complete rounds faster than
// this, whatever its code costs.
type DiskProbe struct {
	Writers int `json:"writers"`
	// Needed is the completion a round waits for (raidq: the W-th of n
	// shards; JetStream: the quorum of R replicas).
	Needed int `json:"needed"`
	Bytes  int `json:"bytes"`
	Rounds int `json:"rounds"`
	// RoundsPerS: rounds per second when every round waits for all
	// writers (the laggards of one round hold the disk in the next).
	RoundsPerS float64 `json:"rounds_per_s"`
	// NeededP50Ms is the median time from a round's start to its Needed-th
	// fdatasync returning; AllP50Ms to its last.
	NeededP50Ms float64 `json:"needed_p50_ms"`
	AllP50Ms    float64 `json:"all_p50_ms"`
}

func (p DiskProbe) String() string {
	return fmt.Sprintf("%d writer(s) × %d B + fdatasync in lock-step: %.0f rounds/s; %d of %d done after %.2f ms, all after %.2f ms (medians)",
		p.Writers, p.Bytes, p.RoundsPerS, p.Needed, p.Writers, p.NeededP50Ms, p.AllP50Ms)
}

// probeFileBytes is each probe file's pre-written size: writes overwrite
// written blocks, as raidq's pre-zeroed journals do, and wrap around.
const probeFileBytes = 8 << 20

// probeDisk measures a DiskProbe in dir (removed files afterwards).
func probeDisk(dir string, writers, needed, bytes, rounds int) (DiskProbe, error) {
	if writers < 1 || needed < 1 || needed > writers || bytes < 1 || bytes > probeFileBytes/2 || rounds < 1 {
		return DiskProbe{}, fmt.Errorf("disk probe: bad shape %d/%d writers, %d bytes, %d rounds", needed, writers, bytes, rounds)
	}
	files, err := probeFiles(dir, writers)
	defer func() {
		for _, f := range files {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err != nil {
		return DiskProbe{}, err
	}
	buf := make([]byte, bytes)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	neededAt := make([]time.Duration, 0, rounds)
	allAt := make([]time.Duration, 0, rounds)
	start := time.Now()
	for r := range rounds {
		done, err := probeRound(files, buf, int64(r*bytes%(probeFileBytes-bytes)))
		if err != nil {
			return DiskProbe{}, err
		}
		neededAt = append(neededAt, done[needed-1])
		allAt = append(allAt, done[writers-1])
	}
	el := time.Since(start)
	return DiskProbe{Writers: writers, Needed: needed, Bytes: bytes, Rounds: rounds,
		RoundsPerS: float64(rounds) / el.Seconds(), NeededP50Ms: medianMs(neededAt), AllP50Ms: medianMs(allAt)}, nil
}

// probeFiles creates writers files of probeFileBytes, written and synced.
func probeFiles(dir string, writers int) ([]*os.File, error) {
	zeros := make([]byte, 1<<20)
	var files []*os.File
	for i := range writers {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("disk-probe-%d", i)), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
		if err != nil {
			return files, fmt.Errorf("disk probe: %w", err)
		}
		files = append(files, f)
		for range probeFileBytes / len(zeros) {
			if _, err := f.Write(zeros); err != nil {
				return files, fmt.Errorf("disk probe: %w", err)
			}
		}
		if err := f.Sync(); err != nil {
			return files, fmt.Errorf("disk probe: %w", err)
		}
	}
	return files, nil
}

// probeRound writes buf at off to every file and fdatasyncs it, one
// goroutine per file, and returns the completion times, sorted.
func probeRound(files []*os.File, buf []byte, off int64) ([]time.Duration, error) {
	t0 := time.Now()
	done := make([]time.Duration, len(files))
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.WriteAt(buf, off); err != nil {
				errs[i] = err
				return
			}
			errs[i] = slotstore.Fdatasync(f)
			done[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("disk probe: %w", err)
	}
	slices.Sort(done)
	return done, nil
}

func medianMs(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds()) / 1000
}
