//go:build !unix

package server

import (
	"errors"

	"github.com/raidq/raidq/actors/node"
)

// diskUsage is not measured on this system: status shows no disk space.
func diskUsage(string) (node.DiskUsage, error) {
	return node.DiskUsage{}, errors.New("disk space not measured on this system")
}
