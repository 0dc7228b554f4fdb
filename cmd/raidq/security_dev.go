package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/spf13/pflag"
)

// devSecurityFlags are `raidq dev --auth FILE --tls`.
type devSecurityFlags struct {
	authFile string
	tls      bool
	bundle   natsserver.TLSBundle
	created  bool
}

func (f *devSecurityFlags) register(p *pflag.FlagSet) {
	p.StringVar(&f.authFile, "auth", "", "users and their permissions (JSON or NATS config syntax; docs/security.md); default: no authentication")
	p.BoolVar(&f.tls, "tls", false, "require TLS from clients: generate a local CA and server certificate in DATA/tls (kept across restarts)")
}

// apply loads the auth file and generates the TLS files (cfg.Dir is set).
func (f *devSecurityFlags) apply(cfg *server.LocalClusterConfig) error {
	if f.authFile != "" {
		a, err := natsserver.LoadAuthFile(f.authFile)
		if err != nil {
			return fmt.Errorf("--auth: %w", err)
		}
		cfg.Auth = a
	}
	if f.tls {
		host := cfg.Listen
		if h, _, err := splitHost(cfg.Listen); err == nil {
			host = h
		}
		var hosts []string
		if host != "" && host != "0.0.0.0" && host != "::" {
			hosts = append(hosts, host)
		}
		b, created, err := natsserver.EnsureDevTLS(filepath.Join(cfg.Dir, "tls"), hosts)
		if err != nil {
			return fmt.Errorf("--tls: %w", err)
		}
		f.bundle, f.created = b, created
		cfg.TLS = b.Files()
	}
	return nil
}

// describe prints how the dev cluster is secured and a command to try.
func (f *devSecurityFlags) describe(w io.Writer, cfg *server.LocalClusterConfig, url string) {
	try := []string{"raidq topic create orders", "--nats", url, "--cluster", cfg.Cluster}
	if cfg.Auth != nil {
		fmt.Fprintf(w, "authentication on (%s): %s\n", f.authFile, cfg.Auth.Summary())
		for _, u := range cfg.Auth.Users {
			if u.Has(natsserver.RoleSystem) && u.User != "" {
				fmt.Fprintf(w, "system account: user %s (nats --server %s --user %s --password … server ls)\n", u.User, url, u.User)
				break
			}
		}
		for _, u := range cfg.Auth.Users {
			if u.Has(natsserver.RoleAdmin) && u.User != "" {
				try = append(try, "--user", u.User, "--password", "…")
				break
			}
		}
	} else {
		fmt.Fprintln(w, "raidq dev runs without authentication: anyone who can reach "+cfg.Listen+" can read and write every topic")
	}
	if cfg.TLS != nil {
		state := "reused"
		if f.created {
			state = "generated"
		}
		fmt.Fprintf(w, "TLS on: clients must use TLS; CA %s (%s), pass it with --tls-ca %s\n", state, f.bundle.CA, f.bundle.CA)
		fmt.Fprintf(w, "        a client certificate, if you want one: --tls-cert %s --tls-key %s\n", f.bundle.ClientCert, f.bundle.ClientKey)
		try = append(try, "--tls-ca", f.bundle.CA)
	} else {
		fmt.Fprintln(w, "TLS off: traffic is plaintext (--tls turns it on)")
	}
	fmt.Fprintf(w, "try: %s\n", strings.Join(try, " "))
}

// splitHost splits host:port.
func splitHost(hp string) (string, string, error) {
	i := strings.LastIndex(hp, ":")
	if i < 0 {
		return "", "", fmt.Errorf("no port in %q", hp)
	}
	return strings.Trim(hp[:i], "[]"), hp[i+1:], nil
}
