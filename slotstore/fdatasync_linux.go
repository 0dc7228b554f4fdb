package slotstore

import (
	"os"
	"syscall"
)

// Fdatasync flushes f's data (and the metadata needed to read it back,
// such as a grown size) without the timestamps fsync also commits. It is
// the sync of the store's journals, exported so that `raidq bench`'s disk
// probe measures the very same call.
func Fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
