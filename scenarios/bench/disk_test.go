package bench

import (
	"os"
	"strings"
	"testing"
)

func TestProbeDisk(t *testing.T) {
	dir := t.TempDir()
	p, err := probeDisk(dir, 3, 2, 5000, 20)
	if err != nil {
		t.Fatal(err)
	}
	if p.Writers != 3 || p.Needed != 2 || p.Rounds != 20 || p.RoundsPerS <= 0 {
		t.Fatalf("probe %+v", p)
	}
	if p.NeededP50Ms <= 0 || p.AllP50Ms < p.NeededP50Ms {
		t.Fatalf("completion times %+v: the needed one must come first", p)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("probe left %d files behind", len(left))
	}
	for _, bad := range [][4]int{{0, 1, 10, 1}, {3, 4, 10, 1}, {3, 2, 0, 1}, {3, 2, 10, 0}, {3, 2, probeFileBytes/2 + 1, 1}, {1, 1, probeFileBytes, 1}} {
		if _, err := probeDisk(dir, bad[0], bad[1], bad[2], bad[3]); err == nil {
			t.Errorf("probeDisk%v: no error", bad)
		}
	}
}

func TestPrintTableDiskPace(t *testing.T) {
	r := &Report{
		Raidq: &Result{System: "raidq", ThroughputMsgsS: 9000, RecordsPerStripe: 16, Stripes: 10},
		Disk:  []DiskProbe{{Writers: 1, Needed: 1, RoundsPerS: 5000}, {Writers: 6, Needed: 4, RoundsPerS: 700}},
	}
	if got := r.DiskPaceMsgsS(); got != 11200 {
		t.Fatalf("pace %v, want 700 × 16", got)
	}
	var b strings.Builder
	r.PrintTable(&b)
	for _, want := range []string{"= 11200 msgs/s", "ran at 80% of the disk's pace"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	r.Disk = r.Disk[:1]
	if got := r.DiskPaceMsgsS(); got != 0 {
		t.Errorf("pace without a 6-writer probe: %v", got)
	}
}
