package server

import (
	"errors"
	"fmt"

	"github.com/raidq/raidq/bus/natsserver"
)

// Security of a node (docs/security.md): an embedded server either runs
// with an auth file (NodeOptions.Auth: users, roles, permissions) or, only
// when asked with Insecure, without authentication. TLS is independent:
// with it the client port requires TLS and routes use mutual TLS.

// checkSecurity is the security part of NodeOptions.check.
func (o *NodeOptions) checkSecurity() error {
	if o.NATSURL != "" {
		if o.Auth != nil || o.TLS != nil {
			return errors.New("node: --auth and --tls-cert/--tls-key configure the embedded NATS server; with --nats the " +
				"NATS system's own configuration applies (`raidq security nats-config --auth FILE` prints the users and " +
				"permissions for it)")
		}
		if !o.Insecure && !o.NATSAuthenticated {
			return fmt.Errorf("%w (with --nats: give the node's credentials, --nats-creds or --nats-nkey, or --insecure)", ErrNoAuth)
		}
		return nil
	}
	if o.TLS != nil {
		if err := o.TLS.Check(o.ClusterListen != ""); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if o.Auth == nil {
		if !o.Insecure {
			return ErrNoAuth
		}
		return nil
	}
	if len(o.Auth.Users) == 0 {
		return errors.New("node: the auth file has no users")
	}
	if o.ClusterListen != "" && o.Auth.Routes == nil && (o.TLS == nil || o.TLS.CA == "") {
		return errors.New("node: with --auth the routes between nodes must authenticate too: add " +
			"routes: {user: NAME, password: SECRET} to the auth file, or give --tls-cert, --tls-key and --tls-ca " +
			"for mutual TLS between the nodes")
	}
	return nil
}

// security builds the embedded server's Security (nil: none).
func (n *Node) security() (*natsserver.Security, error) {
	o := n.opts
	if o.Auth == nil && o.TLS == nil {
		return nil, nil
	}
	sec, err := natsserver.NewSecurity(o.Cluster, o.Auth, o.TLS)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", o.ID, err)
	}
	if o.Auth != nil {
		n.log.Info("authentication on", "users", o.Auth.Summary())
		if o.Insecure {
			n.log.Info("--insecure has no effect: --auth is given")
		}
	}
	if o.TLS != nil {
		n.log.Info("TLS on", "client_port", "TLS required", "client_certificates", tlsClientMode(o.TLS),
			"routes", map[bool]string{true: "mutual TLS", false: "not clustered"}[o.ClusterListen != ""])
	}
	return sec, nil
}

func tlsClientMode(f *natsserver.TLSFiles) string {
	switch {
	case f.VerifyClients:
		return "required"
	case f.CA != "":
		return "verified when presented"
	}
	return "not checked"
}

// InternalViolations counts the permission violations of the node's own
// connections to its embedded server (0 unless raidq's node permissions
// miss a subject; each is logged at Error).
func (n *Node) InternalViolations() int64 {
	if n.server == nil {
		return 0
	}
	return n.server.Security().InternalViolations()
}

// Refusals counts what the node's embedded NATS server refused since it
// started: permission violations, authentication and TLS failures (each is
// also logged at Error by the server with the connection and user).
func (n *Node) Refusals() natsserver.Refusals {
	if n.server == nil {
		return natsserver.Refusals{}
	}
	return n.server.Refusals()
}
