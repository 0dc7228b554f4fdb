package slotstore

import "syscall"

const fdatasyncSupported = true

func fdatasync(fd uintptr) error {
	for {
		err := syscall.Fdatasync(int(fd))
		if err != syscall.EINTR {
			return err
		}
	}
}
