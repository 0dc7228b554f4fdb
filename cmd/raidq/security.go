package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"

	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/security"
)

// securityCmd is `raidq security`: the security drill and the tools to
// write an auth file (docs/security.md).
func securityCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "security",
		Short: "Security tools: the security drill, NKeys, password hashes, certificates, NATS permissions",
		Long: `security gathers what securing a cluster takes (docs/security.md):

  drill        start a cluster with authentication and TLS, try what the
               permissions forbid, check every attempt is refused and counted
  nkey         make a user NKey: the public key for the auth file, the seed
               for the client (--nkey)
  passwd       hash a password with bcrypt for the auth file
  certs        make a CA and certificates for the nodes and clients
  nats-config  print an auth file's users and permissions in NATS config
               syntax (for a NATS system you run yourself: raidq node --nats)`,
	}
	cmd.AddCommand(securityDrillCmd("drill"), nkeyCmd(), passwdCmd(), certsCmd(), natsConfigCmd())
	return cmd
}

type securityDrillOptions struct {
	cfg     security.Config
	asJSON  bool
	verbose bool
}

// securityDrillCmd is the security drill command (raidq security drill;
// raidq drill security runs the same).
func securityDrillCmd(use string) *cobra.Command {
	var o securityDrillOptions
	cmd := &cobra.Command{
		Use:   use,
		Short: "Start a cluster with auth and TLS; try what the permissions forbid; check every attempt is refused",
		Long: `The security drill starts --nodes raidq nodes in this process, each with its
NATS server on 127.0.0.1 (TLS on the client ports, mutual TLS on the
routes, an auth file with an admin, producers and a consumer), creates
topics alpha and bravo, and then:

  - the producer of alpha writes bravo, reads bravo (scan and subscribe),
    writes raw slots of bravo, sends a write naming bravo on alpha's
    subject, forges a repair write, sends garbage, creates a topic,
    rewrites a node's member record, publishes a heartbeat, deletes the
    metadata bucket, asks the nodes' status, sniffs other users' replies;
  - the consumer of alpha writes through the scan subject and joins
    another consumer group;
  - clients connect without credentials, with a wrong password, without
    TLS and in plaintext; a rogue server joins the routes without a
    certificate and in plaintext; a 2 MiB message is published;
  - a flood of hostile requests hits alpha's nodes,

while a legitimate producer writes alpha every 20ms. Every attempt must be
refused (NATS permission violation, authentication or TLS failure, or the
node's BAD_REQUEST) and counted, the legitimate writes must all succeed and
a producer/consumer round trip must work at the end. It prints a verdict
table (--json: one object) and exits non-zero when a check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSecurityDrill(cmd, o) },
	}
	f := cmd.Flags()
	f.IntVar(&o.cfg.Nodes, "nodes", 3, "nodes (3..16; topics use 2+1 shards below 6 nodes, 4+2 from 6)")
	f.IntVar(&o.cfg.Flood, "flood", 2000, "hostile requests in the flood")
	f.StringVar(&o.cfg.Dir, "dir", "", "keep the nodes' data, TLS files and auth file here (default: a temporary directory, removed)")
	f.BoolVar(&o.asJSON, "json", false, "print one JSON object")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log what the nodes do (their servers log every refusal)")
	return cmd
}

// runSecurityDrill runs the drill and prints the verdict.
func runSecurityDrill(cmd *cobra.Command, o securityDrillOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	level := slog.LevelError + 4 // the servers log every refusal at Error: quiet unless -v
	if o.verbose {
		level = slog.LevelInfo
	}
	o.cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if !o.asJSON {
		fmt.Fprintf(cmd.ErrOrStderr(), "security drill: starting %d nodes with authentication, TLS and mutual TLS on routes\n", o.cfg.Nodes)
		o.cfg.Progress = func(c security.Check) {
			mark := "ok  "
			if !c.Pass {
				mark = "FAIL"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "  %s %s\n", mark, c.Name)
		}
	}
	r, err := security.Run(ctx, o.cfg)
	if err != nil {
		return err
	}
	if o.asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		printSecurity(cmd.OutOrStdout(), r)
	}
	if !r.OK {
		return errFailed
	}
	return nil
}

func printSecurity(w io.Writer, r *security.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tWHO\tTRIED\tWANT\tGOT\tVERDICT")
	for _, c := range r.Checks {
		v := "pass"
		if !c.Pass {
			v = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Who, clip(c.Tried, 60), c.Want, clip(c.Got, 90), v)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nrefused by the NATS servers: %d publishes, %d subscriptions, %d logins, %d TLS handshakes\n",
		r.Servers.Publish, r.Servers.Subscribe, r.Servers.Auth, r.Servers.TLS)
	fmt.Fprintf(w, "refused by the nodes: %d bad requests (%d malformed, %d mismatched subject/payload/metadata, %d forged repairs)\n",
		r.NodeRefusals.BadRequests, r.NodeRefusals.Malformed, r.NodeRefusals.Mismatches, r.NodeRefusals.ForgedRepairs)
	fmt.Fprintf(w, "legitimate producer during the attacks: %d sent, %d acked, %d failed\n", r.BackgroundSent, r.BackgroundAcked, r.BackgroundFailed)
	verdict := "PASS"
	if !r.OK {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "%s: %d of %d checks passed (%d nodes, %s) in %.1fs\n", verdict, r.Passed, len(r.Checks), r.Nodes, r.TLS, r.Seconds)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func nkeyCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "nkey",
		Short: "Make a user NKey: the public key goes in the auth file, the seed stays with the client",
		Long: `nkey makes a user NKey pair. Put the public key (U...) in the auth file,
{nkey: U..., producer: [orders]}, and give the seed file to the client:
raidq produce orders --nkey FILE (raidq.WithNKeySeed from Go). The seed is
a secret: --out writes it to a file readable by its owner only; without
--out it is printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kp, err := nkeys.CreateUser()
			if err != nil {
				return err
			}
			pub, _ := kp.PublicKey()
			seed, _ := kp.Seed()
			if out == "" {
				fmt.Fprintf(cmd.OutOrStdout(), "public key (auth file): %s\nseed (secret, for --nkey): %s\n", pub, seed)
				return nil
			}
			if fileExists(out) {
				return usageErr(fmt.Errorf("--out %s exists: not overwriting a seed", out))
			}
			if err := os.WriteFile(out, append(seed, '\n'), 0o600); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", pub)
			fmt.Fprintf(cmd.ErrOrStderr(), "seed written to %s (mode 0600); the line above is the public key for the auth file\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the seed to this file (mode 0600) and print only the public key")
	return cmd
}

func passwdCmd() *cobra.Command {
	var cost int
	cmd := &cobra.Command{
		Use:   "passwd",
		Short: "Hash a password (read from stdin) with bcrypt for the auth file",
		Long: `passwd reads a password from the first line of stdin and prints its bcrypt
hash. Put it in the auth file in quotes, {user: shop, password: "$2a$11$..."}:
the servers then keep no plain password (clients still send the password).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			pw := strings.TrimRight(line, "\r\n")
			if pw == "" {
				return errors.New("no password on stdin")
			}
			h, err := bcrypt.GenerateFromPassword([]byte(pw), cost)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(h))
			return nil
		},
	}
	cmd.Flags().IntVar(&cost, "cost", 11, "bcrypt cost (each login costs 2^cost rounds on the server)")
	return cmd
}

func certsCmd() *cobra.Command {
	var dir, name string
	var hosts []string
	var client bool
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a CA (once) and a certificate it signs, for a node or a client",
		Long: `certs keeps a CA in DIR (ca.pem, ca-key.pem: made on first use) and writes
DIR/NAME.pem and DIR/NAME-key.pem signed by it: for a node (--hosts: the
names and addresses clients and other nodes use to reach it; the
certificate serves both the client port and the routes) or, with --client,
a client certificate. Give every node --tls-cert NAME.pem --tls-key
NAME-key.pem --tls-ca ca.pem, and clients --tls-ca ca.pem. Keep ca-key.pem
offline. (raidq dev --tls makes its own.)`,
		Example: `  raidq security certs --dir ./tls --name n1 --hosts h1.example.com,10.0.0.1
  raidq security certs --dir ./tls --name shop --client`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usageErr(errors.New("--name is required (the files are NAME.pem and NAME-key.pem)"))
			}
			hosts = splitList(hosts)
			if !client && len(hosts) == 0 {
				return usageErr(errors.New("--hosts is required for a node certificate (or --client)"))
			}
			ca, key, created, err := natsserver.LoadOrCreateCA(dir)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(cmd.ErrOrStderr(), "made a CA: %s (keep %s secret)\n", filepath.Join(dir, natsserver.CAFile), filepath.Join(dir, natsserver.CAKeyFile))
			}
			cert, k, err := natsserver.IssueCert(dir, name, ca, key, hosts, !client)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "certificate %s\nkey %s\nCA %s\nvalid until %s\n", cert, k, filepath.Join(dir, natsserver.CAFile),
				time.Now().Add(natsserver.CertValidity).Format(time.DateOnly))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "tls", "directory of the CA and certificates")
	f.StringVar(&name, "name", "", "certificate name (a node id, or a client name)")
	f.StringSliceVar(&hosts, "hosts", nil, "host names and IP addresses of the node, comma-separated")
	f.BoolVar(&client, "client", false, "a client certificate (for nodes started with --tls-verify-clients)")
	return cmd
}

func natsConfigCmd() *cobra.Command {
	var authFile, cluster string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "nats-config",
		Short: "Print an auth file's users with their NATS permissions (NATS config syntax)",
		Long: `nats-config prints the users of an auth file with the NATS permissions raidq
gives their roles in --cluster, as an authorization block in NATS config
syntax (--json: the permissions as JSON). Use it to see exactly what each
role may publish and subscribe to, or to configure a NATS system you run
yourself (raidq node --nats): add a user with role node for the nodes, and
one with role gateway for standalone Kafka gateways (raidq kafka --user).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if authFile == "" {
				return usageErr(errors.New("--auth FILE is required"))
			}
			a, err := natsserver.LoadAuthFile(authFile)
			if err != nil {
				return err
			}
			return printNATSConfig(cmd.OutOrStdout(), a, cluster, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&authFile, "auth", "", "the auth file")
	f.StringVar(&cluster, "cluster", server.DefaultCluster, "raidq cluster name")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printNATSConfig(w io.Writer, a *natsserver.AuthConfig, cluster string, asJSON bool) error {
	type entry struct {
		User        string `json:"user,omitempty"`
		NKey        string `json:"nkey,omitempty"`
		Password    string `json:"password,omitempty"`
		Permissions any    `json:"permissions"`
	}
	var out []entry
	for _, u := range a.Users {
		p, err := u.Permissions(cluster)
		if err != nil {
			return err
		}
		e := entry{User: u.User, NKey: u.NKey, Permissions: p}
		if u.Password != "" {
			e.Password = u.Password
		}
		out = append(out, e)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"users": out})
	}
	q := func(list []string) string {
		s := make([]string, len(list))
		for i, x := range list {
			s[i] = fmt.Sprintf("%q", x)
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	fmt.Fprintf(w, "# raidq cluster %q: users and permissions (raidq security nats-config)\nauthorization {\n  users: [\n", cluster)
	for _, u := range a.Users {
		p, _ := u.Permissions(cluster)
		if p == nil {
			continue // a system user: printSystemAccount
		}
		id := fmt.Sprintf("user: %q, password: %q", u.User, u.Password)
		if u.NKey != "" {
			id = fmt.Sprintf("nkey: %q", u.NKey)
		}
		fmt.Fprintf(w, "    {%s, permissions: {\n      publish: {allow: %s}\n      subscribe: {allow: %s}\n", id, q(p.Publish.Allow), q(p.Subscribe.Allow))
		if p.Response != nil {
			fmt.Fprintf(w, "      allow_responses: {max: %d}\n", max(p.Response.MaxMsgs, 1))
		}
		fmt.Fprintln(w, "    }}")
	}
	fmt.Fprintln(w, "  ]\n}")
	if a.Routes != nil {
		fmt.Fprintf(w, "cluster {\n  authorization {user: %q, password: %q}\n}\n", a.Routes.User, a.Routes.Password)
	}
	printSystemAccount(w, a)
	return nil
}

// printSystemAccount prints the system users (roles: [system]) as a
// system account with every permission in it (nats-server's own
// operations: nats server ls, report jetstream, raft peer-remove).
func printSystemAccount(w io.Writer, a *natsserver.AuthConfig) {
	if !a.HasSystemUser() {
		return
	}
	fmt.Fprintln(w, "accounts {\n  SYS: {\n    users: [")
	for _, u := range a.Users {
		if !u.Has(natsserver.RoleSystem) {
			continue
		}
		if u.NKey != "" {
			fmt.Fprintf(w, "      {nkey: %q}\n", u.NKey)
		} else {
			fmt.Fprintf(w, "      {user: %q, password: %q}\n", u.User, u.Password)
		}
	}
	fmt.Fprintln(w, "    ]\n  }\n}\nsystem_account: SYS")
}
