package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// groupCmd is replaced by the group administration work (raidq group).
func groupCmd() *cobra.Command {
	return &cobra.Command{Use: "group", Short: "Administer consumer groups (not yet built)", Hidden: true,
		RunE: func(*cobra.Command, []string) error { return errors.New("not yet built") }}
}
