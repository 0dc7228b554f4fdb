// Command raidq is the one binary of raidq: the storage node (node), a
// local cluster (dev), the demo, topic administration, produce and
// consume, status, drills, the security drill and the bench.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/raidq/raidq/bus"
)

// errFailed marks a command that ran and reported failure (already printed).
var errFailed = errors.New("failed")

func main() {
	root := &cobra.Command{
		Use:           "raidq",
		Short:         "raidq: a leaderless, erasure-coded message queue",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       bus.Version(), // --version
	}
	root.SetVersionTemplate("raidq {{.Version}}\n")
	root.AddCommand(versionCmd())
	root.AddCommand(demoCmd(), topicCmd(), produceCmd(), consumeCmd(), statusCmd())
	root.AddCommand(nodeCmd(), devCmd(), kafkaCmd())
	root.AddCommand(drillCmd())
	root.AddCommand(securityCmd()) // security.go
	root.AddCommand(benchCmd(), natsdCmd())
	root.AddCommand(groupCmd(), healthCmd()) // group_admin.go, health.go
	stopProfile := startProfile()
	err := root.Execute()
	stopProfile()
	if err != nil {
		if !errors.Is(err, errFailed) {
			fmt.Fprintln(os.Stderr, "raidq:", err)
		}
		os.Exit(1)
	}
}

// versionCmd prints the version every node reports (bus.Version: the
// build info's module version; "(devel)" for go run and go test builds).
func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print raidq's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "raidq %s (%s)\n", bus.Version(), runtime.Version())
			return err
		},
	}
}
