package main

import (
	"os"
	"sync"
	"testing"

	"github.com/raidq/raidq/scenarios/cluster"
)

// The raidq binary is built once per test run and shared by the tests
// that start processes.
var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func testBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "raidq-bin-")
		if binErr == nil {
			binPath, binErr = cluster.Build(binDir)
		}
	})
	if binErr != nil {
		t.Fatalf("build raidq: %v", binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}
