//go:build !linux

package bench

import "os"

// fdatasync is fsync where the platform has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }
