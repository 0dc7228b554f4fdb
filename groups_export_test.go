package raidq

import "github.com/raidq/raidq/actors/core"

// Test hooks of groups.go.

// CrashForTest stops a group member as if its process died (no commit, no
// leave): its partitions move once its heartbeat expires.
func (c *Consumer) CrashForTest() { c.crash() }

// AssignForTest is the rendezvous assignment of partitions to members.
var AssignForTest = core.AssignPartitions
