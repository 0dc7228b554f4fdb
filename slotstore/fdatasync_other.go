//go:build !linux

package slotstore

import "os"

// Fdatasync is fsync where the platform has no fdatasync.
func Fdatasync(f *os.File) error { return f.Sync() }
