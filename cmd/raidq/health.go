package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// healthCmd is replaced by the deployment work (raidq health).
func healthCmd() *cobra.Command {
	return &cobra.Command{Use: "health", Short: "Check a node's health (not yet built)", Hidden: true,
		RunE: func(*cobra.Command, []string) error { return errors.New("not yet built") }}
}
