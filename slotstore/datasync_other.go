//go:build !linux

package slotstore

const fdatasyncSupported = false

func fdatasync(uintptr) error { return nil } // never called: fdatasyncSupported is false
