//go:build unix

package server

import (
	"syscall"

	"github.com/raidq/raidq/actors/node"
)

// diskUsage measures the file system that holds dir: bytes available to
// an unprivileged writer, and its size.
func diskUsage(dir string) (node.DiskUsage, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return node.DiskUsage{}, err
	}
	bs := uint64(st.Bsize)
	return node.DiskUsage{Free: st.Bavail * bs, Total: st.Blocks * bs}, nil
}
