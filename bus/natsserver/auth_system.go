package natsserver

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
)

// The system account. nats-server keeps its cluster-wide operations in
// its system account ($SYS): server discovery ($SYS.REQ.SERVER.PING,
// what `nats server ls` asks), JetStream reports ($SYS.REQ.SERVER.PING.JSZ,
// `nats server report jetstream`) and meta-group changes
// ($JS.API.SERVER.REMOVE, `nats server raft peer-remove`). raidq's users
// all live in the global account, where none of that is reachable; an
// auth file user with the system role is placed in the system account
// instead, with every permission there and no access to raidq's subjects.
//
// Without an auth file the server has no users, every client lands in
// the global account and nobody can reach the system account: the nats
// CLI's server commands need an auth file with a system user.

// SystemAccount is the name of the system account of an embedded server
// (nats-server's default, the same on every server of a cluster, which
// the system requests between servers need).
const SystemAccount = server.DEFAULT_SYSTEM_ACCOUNT

// systemAccount is a placeholder for the system account in users'
// options: nats-server binds users to its own account of the same name.
func systemAccount() *server.Account { return server.NewAccount(SystemAccount) }

// validateSystem checks a user with the system role: nothing else, since
// a NATS user belongs to one account and the system account has none of
// raidq's subjects.
func (u AuthUser) validateSystem() error {
	if len(u.Roles) > 1 || len(u.Producer) > 0 || len(u.Consumer) > 0 || len(u.Groups) > 0 {
		return errors.New(u.Identity() + ": role system goes alone (the system account has no raidq subjects): give the user no other role")
	}
	return nil
}

// systemUsers counts the users with the system role.
func (a *AuthConfig) systemUsers() int {
	n := 0
	for _, u := range a.Users {
		if u.Has(RoleSystem) {
			n++
		}
	}
	return n
}

// HasSystemUser reports whether the auth file names a system user.
func (a *AuthConfig) HasSystemUser() bool { return a != nil && a.systemUsers() > 0 }

// applySystem declares the system account on n when a user is in it.
//
// With only the global and system accounts and no authorization block
// in a config file, nats-server assumes the system account was declared
// just to give it users and lets clients without credentials into the
// global account (an implicit no_auth_user). raidq's global account
// requires credentials, so applySystem declares an authorization block
// (with nats-server's default auth timeout, 2s) to turn that off.
func (s *Security) applySystem(n *server.Options) error {
	if !s.System {
		return nil
	}
	if err := n.ProcessConfigString("authorization { timeout: 2 }"); err != nil {
		return fmt.Errorf("system account: %w", err)
	}
	n.Accounts = append(n.Accounts, systemAccount())
	n.SystemAccount = SystemAccount
	return nil
}
