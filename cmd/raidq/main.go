// Command raidq is the one binary of raidq: demo today; node, dev, topic,
// produce, consume, drill, bench and status as they land.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// errFailed marks a command that ran and reported failure (already printed).
var errFailed = errors.New("failed")

func main() {
	root := &cobra.Command{
		Use:           "raidq",
		Short:         "raidq: a leaderless, erasure-coded message queue",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(demoCmd(), topicCmd(), produceCmd(), consumeCmd(), statusCmd())
	root.AddCommand(nodeCmd(), devCmd())
	root.AddCommand(drillCmd())
	root.AddCommand(securityCmd()) // security.go
	root.AddCommand(benchCmd(), natsdCmd())
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
