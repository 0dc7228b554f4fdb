package main

import (
	"fmt"
	"time"

	"github.com/raidq/raidq"
)

// setGroup makes the consumer a member of group: the group's committed
// positions are used (--from applies only where the group has none), and
// what was printed is committed every commitEvery, when a partition moves
// to another member, and on exit. The CLI never waits for a commit: a
// metadata stall delays commits, not printing.
func setGroup(opts *[]raidq.ConsumerOption, group string, commitEvery, session time.Duration) error {
	if group == "" {
		return nil
	}
	if commitEvery <= 0 {
		return usageErr(fmt.Errorf("--commit-interval %v: must be positive", commitEvery))
	}
	*opts = append(*opts, raidq.WithGroup(group), raidq.WithAutoCommit(commitEvery), raidq.WithSessionTimeout(session))
	return nil
}
