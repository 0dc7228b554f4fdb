package main

import (
	"context"
	"errors"
	"time"

	"github.com/raidq/raidq"
)

// setGroup makes the consumer a member of group: the group's committed
// positions are used (--from applies only where the group has none) and
// each printed message is committed.
func setGroup(opts *raidq.ConsumerOptions, group string) error {
	opts.Group = group
	return nil
}

// commitMessage commits m after it was printed. A partition that moved to
// another member (ErrFenced) is not an error for the CLI: the new owner
// prints what this one did not commit (at-least-once).
func commitMessage(ctx context.Context, cons *raidq.Consumer, m raidq.Message) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := cons.Commit(ctx, m); err != nil && !errors.Is(err, raidq.ErrFenced) {
		return err
	}
	return nil
}
