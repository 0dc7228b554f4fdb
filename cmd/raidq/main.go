// Command raidq is the one binary of raidq: the storage node (node), a
// local cluster (dev), the demo, topic administration, produce and
// consume, status, drills, the security drill and the bench.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
)

// errFailed marks a command that ran and reported failure (already printed).
var errFailed = errors.New("failed")

// rootLong is the root command's help; the exit codes are a contract
// scripts rely on (exitCode and its sentinels, below).
const rootLong = `raidq is a message queue with no partition leader: producers
erasure-code each micro-batch and write a shard straight to each node.

Client commands take --nats URL (env RAIDQ_NATS, else NATS_URL) and
--creds FILE (env RAIDQ_CREDS, else NATS_CREDS).

Exit codes:
  0  success
  1  failure (anything not below, or reported on stderr already)
  2  input wrong, found before anything is sent: unknown command, bad flag or
     argument, invalid topic name or parameters (--acks, --latency,
     --partitions), a missing or unreadable file (--file, --nkey, --tls-ca,
     --creds), bad config or auth file
  3  cannot reach: no NATS server, no node answers, no quorum of nodes, timed
     out, nothing listening (raidq health)
  4  refused by the cluster, or unknown to it: unknown topic, partition or
     group, topic exists, a change the topic's state does not allow,
     authentication or permission refused, TLS mismatch`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	stopProfile := startProfile()
	cmd, err := root.ExecuteC()
	stopProfile()
	if err != nil && !errors.Is(err, errFailed) {
		fmt.Fprintln(stderr, "raidq:", err)
	}
	code := exitCode(err)
	if code == exitUsage && cmd != nil && !strings.Contains(err.Error(), "--help' for usage") {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// newRoot builds the command tree, with every group strict about its
// subcommands and every usage error marked (strictTree).
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "raidq",
		Short:         "raidq: a leaderless, erasure-coded message queue",
		Long:          rootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       bus.Version(), // --version
		// Local input (cluster name, input files, credentials) is checked
		// before any command runs: exit 2, nothing sent.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return checkLocalFlags(cmd) },
	}
	root.SetVersionTemplate("raidq {{.Version}}\n")
	root.AddCommand(versionCmd())
	root.AddCommand(demoCmd(), topicCmd(), produceCmd(), consumeCmd(), statusCmd())
	root.AddCommand(nodeCmd(), devCmd(), kafkaCmd())
	root.AddCommand(drillCmd())
	root.AddCommand(securityCmd()) // security.go
	root.AddCommand(benchCmd(), natsdCmd())
	root.AddCommand(groupCmd(), healthCmd()) // group_admin.go, health.go
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	strictTree(root)
	return root
}

// strictTree walks the command tree: a group (subcommands, no Run of its
// own) refuses an unknown subcommand with a usage error instead of
// cobra's help-and-exit-0, and prints its help when given none; every
// argument check's error is marked as a usage error.
func strictTree(c *cobra.Command) {
	for _, sub := range c.Commands() {
		strictTree(sub)
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = unknownSubcommand
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		return
	}
	if check := checkTopicArg(c, c.Args); check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageErr(err)
			}
			return nil
		}
	}
}

// checkTopicArg wraps check so a command whose first argument is a topic
// name (Use "produce TOPIC", "topic describe NAME") refuses an invalid
// name as a usage error before it connects; the rule is bus.ValidName's.
func checkTopicArg(c *cobra.Command, check cobra.PositionalArgs) cobra.PositionalArgs {
	use := strings.Fields(c.Use)
	topicArg := len(use) > 1 && (use[1] == "TOPIC" || use[1] == "NAME" && c.HasParent() && c.Parent().Name() == "topic")
	if !topicArg {
		return check
	}
	return func(cmd *cobra.Command, args []string) error {
		if check != nil {
			if err := check(cmd, args); err != nil {
				return err
			}
		}
		if len(args) > 0 {
			return bus.ValidName("topic", args[0])
		}
		return nil
	}
}

// inputFiles are the flags, on any command, that name a file raidq reads
// (credentials, CAs, certificates, auth files, messages, binaries):
// checkLocalFlags opens each before the command runs, so a missing one is
// a usage error (exit 2) naming the flag, not a connect failure with a
// misleading hint ("the server requires TLS").
var inputFiles = []string{"file", "creds", "nkey", "tls-ca", "tls-cert", "tls-key", "nats-creds", "nats-nkey", "nats-tls-ca",
	"kafka-tls-cert", "kafka-tls-key", "kafka-auth", "auth", "config", "binary", "node-binary"}

// checkLocalFlags checks, before any command runs, what every command
// would otherwise find only later: the --cluster name, and the input-file
// flags that have a value, given or from the environment (RAIDQ_NKEY,
// RAIDQ_TLS_CA, ...).
func checkLocalFlags(cmd *cobra.Command) error {
	if f := cmd.Flags().Lookup("cluster"); f != nil && f.Value.Type() == "string" {
		if err := bus.ValidName("cluster", f.Value.String()); err != nil {
			return usageErr(fmt.Errorf("--cluster: %w", err))
		}
	}
	for _, name := range inputFiles {
		f := cmd.Flags().Lookup(name)
		if f == nil || f.Value.Type() != "string" || f.Value.String() == "" {
			continue
		}
		path, from := f.Value.String(), ""
		if !f.Changed {
			from = " (from the environment)"
		}
		fh, err := os.Open(path)
		if err == nil {
			var st os.FileInfo
			st, err = fh.Stat()
			fh.Close()
			if err == nil && st.IsDir() {
				err = fmt.Errorf("%s is a directory", path)
			}
		}
		if err != nil {
			return usageErr(fmt.Errorf("--%s%s: %w", name, from, err))
		}
	}
	return checkClientAuth(cmd)
}

// checkClientAuth loads a client command's credentials and TLS files as
// connecting would (raidq.ClientAuth), so conflicting credentials (--user
// with --nkey), a password without a user, a malformed seed or PEM are
// usage errors before anything is sent, not connect failures carrying a
// hint about the server ("the server requires TLS").
func checkClientAuth(cmd *cobra.Command) error {
	fs := cmd.Flags()
	if fs.Lookup("user") == nil || fs.Lookup("nkey") == nil {
		return nil // not a client command (node and dev take server TLS files)
	}
	get := func(name string) string {
		if f := fs.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	a := raidq.ClientAuth{User: get("user"), Password: get("password"), NKeySeed: get("nkey"), Creds: get("creds"),
		TLSCA: get("tls-ca"), TLSCert: get("tls-cert"), TLSKey: get("tls-key")}
	if _, err := a.NATSOptions(); err != nil {
		return usageErr(err)
	}
	return nil
}

// unknownSubcommand is a group's argument check: any argument is an
// unknown subcommand (a known one would have been found).
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	msg += fmt.Sprintf("\nRun '%s --help' for usage.", cmd.CommandPath())
	return usageErr(errors.New(msg))
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

// Exit codes (rootLong documents them).
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitUnreachable = 3
	exitRefused     = 4
)

// Sentinels a command wraps (usageErr, ...) to choose its exit code when
// the cause is not one of the library's own errors (exitCode).
var (
	errUsage       = errors.New("usage error")
	errUnreachable = errors.New("cluster unreachable")
	errRefused     = errors.New("refused by the cluster")
)

// markedError is err, also matching mark with errors.Is, with err's
// message unchanged.
type markedError struct{ err, mark error }

func (e *markedError) Error() string   { return e.err.Error() }
func (e *markedError) Unwrap() []error { return []error{e.err, e.mark} }

// usageErr marks err as a usage error (exit 2); nil stays nil.
func usageErr(err error) error {
	if err == nil {
		return nil
	}
	return &markedError{err: err, mark: errUsage}
}

// Causes by exit code, matched with errors.Is through every wrapping.
var (
	usageCauses   = []error{errUsage, natsserver.ErrBadAuthConfig, server.ErrBadOptions, bus.ErrBadName}
	refusedCauses = []error{errRefused, raidq.ErrInvalidParams, raidq.ErrUnknownTopic, raidq.ErrUnknownPartition, raidq.ErrInvalidMessage,
		raidq.ErrClockSkew, raidq.ErrKafkaGroup, meta.ErrTopicExists, meta.ErrNotFound, meta.ErrReplace,
		meta.ErrFenced, meta.ErrAlter, meta.ErrAlterPending, meta.ErrAlterOrder, bus.ErrBadSubject, nats.ErrAuthorization, nats.ErrAuthExpired,
		nats.ErrAuthRevoked, nats.ErrAccountAuthExpired, nats.ErrPermissionViolation, nats.ErrSecureConnRequired,
		nats.ErrSecureConnWanted}
	unreachableCauses = []error{errUnreachable, nats.ErrNoServers, nats.ErrNoResponders, nats.ErrTimeout,
		context.DeadlineExceeded, actors.ErrNoNodes, actors.ErrNoResponders, actors.ErrLinkTimeout,
		raidq.ErrNotEnoughNodes, raidq.ErrTimeout, meta.ErrNoMetadata, syscall.ECONNREFUSED}
)

// exitCode classifies err: usage, refused (the cluster answered no),
// unreachable (nothing or not enough answered), or another failure.
// Refusals are checked before unreachability: a refused request may
// also have timed out waiting for a better answer.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case isAny(err, usageCauses) || isCobraUsage(err):
		return exitUsage
	case isAny(err, refusedCauses) || isTLSRefusal(err):
		return exitRefused
	case isAny(err, unreachableCauses) || isNetError(err):
		return exitUnreachable
	}
	return exitFailure
}

func isAny(err error, causes []error) bool {
	for _, c := range causes {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// isCobraUsage: cobra's required-flag and flag-group checks return plain
// errors (not through the flag error function).
func isCobraUsage(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "required flag(s)") || strings.HasPrefix(msg, "if any flags in the group") ||
		strings.HasPrefix(msg, "at least one of the flags in the group")
}

// isTLSRefusal: the two ends do not trust each other's certificates.
func isTLSRefusal(err error) bool {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ve *tls.CertificateVerificationError
	return errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ve)
}

// isNetError: a dial or connection failure.
func isNetError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}
