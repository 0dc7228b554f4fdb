package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/natsserver"
)

// clientAuthFlags are the credential and TLS flags of every client command
// (docs/security.md): --user/--password, --nkey or --creds, and --tls-ca
// with an optional client certificate.
type clientAuthFlags struct {
	a raidq.ClientAuth
}

func (f *clientAuthFlags) register(p *pflag.FlagSet) {
	p.StringVar(&f.a.User, "user", envOr("RAIDQ_USER", ""), "user name of the cluster's auth file (env RAIDQ_USER)")
	p.StringVar(&f.a.Password, "password", envOr("RAIDQ_PASSWORD", ""), "password of --user (env RAIDQ_PASSWORD)")
	p.StringVar(&f.a.NKeySeed, "nkey", envOr("RAIDQ_NKEY", ""), "file with the user NKey seed, SU... (env RAIDQ_NKEY)")
	p.StringVar(&f.a.TLSCA, "tls-ca", envOr("RAIDQ_TLS_CA", ""), "CA bundle of the cluster's TLS certificates (env RAIDQ_TLS_CA)")
	p.StringVar(&f.a.TLSCert, "tls-cert", envOr("RAIDQ_TLS_CERT", ""), "client certificate, for clusters that verify clients (env RAIDQ_TLS_CERT)")
	p.StringVar(&f.a.TLSKey, "tls-key", envOr("RAIDQ_TLS_KEY", ""), "key of --tls-cert (env RAIDQ_TLS_KEY)")
	p.StringVar(&f.a.InboxPrefix, "inbox-prefix", "", "reply inbox prefix (default _INBOX_<user or nkey>, what the auth file permits)")
}

// auth returns the credentials (Creds comes from the client's --creds).
func (f *clientAuthFlags) auth(creds string) raidq.ClientAuth {
	a := f.a
	a.Creds = creds
	return a
}

// natsOptions are the nats.Connect options (commands that use NATS directly).
func (f *clientAuthFlags) natsOptions(creds string) ([]nats.Option, error) {
	return f.auth(creds).NATSOptions()
}

// nodeSecurityFlags are the security flags of `raidq node`.
type nodeSecurityFlags struct {
	authFile      string
	tls           natsserver.TLSFiles
	natsCreds     string
	natsNKey      string
	natsTLSCA     string
	verifyClients bool
}

func (f *nodeSecurityFlags) register(p *pflag.FlagSet) {
	p.StringVar(&f.authFile, "auth", "", "users and their permissions (JSON or NATS config syntax; docs/security.md): the node then runs with authentication")
	p.StringVar(&f.tls.Cert, "tls-cert", "", "this node's TLS certificate (PEM): clients must use TLS, routes mutual TLS")
	p.StringVar(&f.tls.Key, "tls-key", "", "key of --tls-cert (PEM)")
	p.StringVar(&f.tls.CA, "tls-ca", "", "CA bundle (PEM) that signed every node's certificate: verifies route peers (and client certificates)")
	p.BoolVar(&f.verifyClients, "tls-verify-clients", false, "require a client certificate signed by --tls-ca from every client")
	p.StringVar(&f.natsCreds, "nats-creds", "", "with --nats: the node's NATS credentials file")
	p.StringVar(&f.natsNKey, "nats-nkey", "", "with --nats: file with the node's user NKey seed")
	p.StringVar(&f.natsTLSCA, "nats-tls-ca", "", "with --nats: CA bundle of the NATS system's certificates")
}

// apply loads the auth file and sets the security options of o.
func (f *nodeSecurityFlags) apply(o *server.NodeOptions) error {
	if f.authFile != "" {
		a, err := natsserver.LoadAuthFile(f.authFile)
		if err != nil {
			return usageErr(fmt.Errorf("--auth: %w", err))
		}
		o.Auth = a
	}
	if f.tls.Cert != "" || f.tls.Key != "" || f.tls.CA != "" || f.verifyClients {
		t := f.tls
		t.VerifyClients = f.verifyClients
		o.TLS = &t
	}
	if f.natsCreds != "" || f.natsNKey != "" || f.natsTLSCA != "" {
		if o.NATSURL == "" {
			return usageErr(fmt.Errorf("--nats-creds, --nats-nkey and --nats-tls-ca go with --nats"))
		}
		opts, err := raidq.ClientAuth{Creds: f.natsCreds, NKeySeed: f.natsNKey, TLSCA: f.natsTLSCA}.NATSOptions()
		if err != nil {
			return err
		}
		o.NATSOptions = append(o.NATSOptions, opts...)
		o.NATSAuthenticated = f.natsCreds != "" || f.natsNKey != ""
	}
	return nil
}

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// refusalNote names the requests a node refused, for the status table:
// "12 refused (3 malformed, 8 mismatched, 1 forged repair)".
func refusalNote(c bus.NodeCounters) string {
	if c.BadRequests == 0 {
		return ""
	}
	var parts []string
	for _, p := range []struct {
		n    int64
		what string
	}{{c.Malformed, "malformed"}, {c.Mismatches, "mismatched"}, {c.ForgedRepairs, "forged repairs"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	note := fmt.Sprintf("%d refused", c.BadRequests)
	if len(parts) > 0 {
		note += " (" + strings.Join(parts, ", ") + ")"
	}
	return note
}

// refusalReporter prints each distinct permission violation once (the
// node token of slot and scan subjects folded to *), instead of one line
// per request the client retries, in raidq.DescribeRefusal's words: the
// user, what the subject is for and what the auth file lacks.
type refusalReporter struct {
	mu   sync.Mutex
	seen map[string]bool
	w    io.Writer
	// cluster names the cluster whose subjects are explained ("": any).
	cluster string
	// viaClient: the permission violations come through report, from a
	// raidq.Client (raidq.WithRefusalHandler: only those that ended no
	// operation, which returns its own error), not through option.
	viaClient bool
}

var nodeToken = regexp.MustCompile(`\.(slot|scan)\.[A-Za-z0-9_-]+\.`)

func newRefusalReporter(w io.Writer) *refusalReporter {
	return &refusalReporter{seen: map[string]bool{}, w: w}
}

// clientOptions are the options of a raidq client that reports on r:
// its refusals that end no operation, and the connection's other errors.
func (r *refusalReporter) clientOptions(cluster string) []raidq.Option {
	r.cluster, r.viaClient = cluster, true
	return []raidq.Option{raidq.WithNATSOptions(r.option()), raidq.WithRefusalHandler(r.report)}
}

func (r *refusalReporter) option() nats.Option {
	return nats.ErrorHandler(func(nc *nats.Conn, _ *nats.Subscription, err error) {
		if pe, ok := raidq.DescribeRefusal(r.cluster, nc, err); ok {
			if !r.viaClient {
				r.report(pe)
			}
			return
		}
		msg := err.Error()
		if errors.Is(err, nats.ErrPermissionViolation) { // a refusal DescribeRefusal does not parse
			msg = strings.TrimPrefix(msg, "nats: permissions violation: ")
			if i := strings.Index(msg, " on connection"); i > 0 {
				msg = msg[:i]
			}
			msg = "refused by the cluster: " + msg + " (not permitted for this user; docs/security.md)"
		}
		r.print(msg)
	})
}

// report prints a refusal, its node token folded.
func (r *refusalReporter) report(pe *raidq.PermissionError) {
	folded := *pe
	folded.Subject = nodeToken.ReplaceAllString(pe.Subject, ".$1.*.")
	r.print(folded.Error())
}

func (r *refusalReporter) print(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seen[msg] && len(r.seen) < 100 {
		r.seen[msg] = true
		fmt.Fprintln(r.w, "raidq:", msg)
	}
}
