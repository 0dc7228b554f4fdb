package bench

import (
	"os"
	"syscall"
)

// fdatasync is the sync raidq's store uses (slotstore/fdatasync_linux.go).
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
