package raidq

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/raidq/raidq/bus"
)

// Client authentication and TLS (docs/security.md). A cluster started with
// an auth file knows each user by name and password or by NKey; each user
// receives replies only on its own inbox prefix (bus.InboxPrefix), which
// these options set. Errors (an unreadable file) surface from Connect.

// WithUserPassword authenticates as user with password, and receives
// replies on the user's inbox prefix, _INBOX_<user>.
func WithUserPassword(user, password string) Option {
	return func(o *options) {
		if user == "" {
			return
		}
		o.natsOpt = append(o.natsOpt, nats.UserInfo(user, password), nats.CustomInboxPrefix(bus.InboxPrefix(user)))
	}
}

// WithNKeySeed authenticates with the user NKey whose seed ("SU...") is
// in file (`raidq security nkey` writes one), and receives replies on the
// inbox prefix of its public key, _INBOX_<public key>.
func WithNKeySeed(file string) Option {
	return func(o *options) {
		if file == "" {
			return
		}
		opt, err := nkeyOption(file)
		if err != nil {
			o.natsOpt = append(o.natsOpt, failOption(err))
			return
		}
		o.natsOpt = append(o.natsOpt, opt...)
	}
}

func nkeyOption(file string) ([]nats.Option, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("nkey seed: %w", err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, fmt.Errorf("nkey seed %s: %w (want a user seed, SU...)", file, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("nkey seed %s: %w", file, err)
	}
	return []nats.Option{nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(bus.InboxPrefix(pub))}, nil
}

// WithTLS requires TLS: the server's certificate must be signed by the CA
// bundle in ca (empty: the system's roots); with cert and key the client
// presents that certificate (for servers that verify clients).
func WithTLS(ca, cert, key string) Option {
	return func(o *options) {
		if ca == "" && cert == "" && key == "" {
			return
		}
		c, err := bus.ClientTLSConfig(ca, cert, key)
		if err != nil {
			o.natsOpt = append(o.natsOpt, failOption(err))
			return
		}
		o.natsOpt = append(o.natsOpt, nats.Secure(c))
	}
}

// WithInboxPrefix sets the reply inbox prefix (a user of an auth file
// receives replies on _INBOX_<user> only; WithUserPassword and
// WithNKeySeed set it already).
func WithInboxPrefix(prefix string) Option {
	return func(o *options) {
		if prefix != "" {
			o.natsOpt = append(o.natsOpt, nats.CustomInboxPrefix(prefix))
		}
	}
}

// failOption makes nats.Connect fail with err.
func failOption(err error) nats.Option {
	return func(*nats.Options) error { return err }
}

// ClientAuth gathers a client's credentials and TLS (the CLI flags --user,
// --password, --nkey, --creds, --tls-ca, --tls-cert, --tls-key,
// --inbox-prefix). The zero value is an anonymous plaintext client.
type ClientAuth struct {
	User, Password string
	NKeySeed       string // file holding a user NKey seed (SU...)
	Creds          string // NATS credentials file (JWT + seed: operator mode)
	TLSCA          string // CA bundle the server's certificate must chain to
	TLSCert        string // client certificate and key, for servers that verify clients
	TLSKey         string
	InboxPrefix    string // reply inbox prefix (default: _INBOX_<user or nkey>)
}

// NATSOptions are the nats.Connect options of a.
func (a ClientAuth) NATSOptions() ([]nats.Option, error) {
	var out []nats.Option
	if a.User != "" && (a.NKeySeed != "" || a.Creds != "") || a.NKeySeed != "" && a.Creds != "" {
		return nil, fmt.Errorf("give one of a user (--user/--password), an nkey seed (--nkey) or a credentials file (--creds)")
	}
	if a.Password != "" && a.User == "" {
		return nil, fmt.Errorf("a password needs a user (--user)")
	}
	if a.User != "" {
		out = append(out, nats.UserInfo(a.User, a.Password), nats.CustomInboxPrefix(bus.InboxPrefix(a.User)))
	}
	if a.NKeySeed != "" {
		o, err := nkeyOption(a.NKeySeed)
		if err != nil {
			return nil, err
		}
		out = append(out, o...)
	}
	if a.Creds != "" {
		out = append(out, nats.UserCredentials(a.Creds))
	}
	if a.TLSCA != "" || a.TLSCert != "" || a.TLSKey != "" {
		c, err := bus.ClientTLSConfig(a.TLSCA, a.TLSCert, a.TLSKey)
		if err != nil {
			return nil, err
		}
		out = append(out, nats.Secure(c))
	}
	if a.InboxPrefix != "" {
		out = append(out, nats.CustomInboxPrefix(a.InboxPrefix))
	}
	return out, nil
}

// WithAuth applies a's credentials and TLS (errors surface from Connect).
func WithAuth(a ClientAuth) Option {
	return func(o *options) {
		opts, err := a.NATSOptions()
		if err != nil {
			o.natsOpt = append(o.natsOpt, failOption(err))
			return
		}
		o.natsOpt = append(o.natsOpt, opts...)
	}
}

// Conn is the client's NATS connection (status requests, raw subscribers).
func (c *Client) Conn() *nats.Conn { return c.nc }

// connectHint explains a failed connect when the server's INFO says why:
// it requires TLS the client did not configure, or credentials.
// localOptionErr: an option fails by itself (a seed or CA file that
// cannot be read), so a connect failure is the caller's, not the server's.
func localOptionErr(opts []nats.Option) bool {
	var no nats.Options
	for _, f := range opts {
		if f(&no) != nil {
			return true
		}
	}
	return false
}

func connectHint(url string, err error, opts []nats.Option) string {
	var no nats.Options
	for _, f := range opts {
		_ = f(&no)
	}
	info, perr := bus.ProbeServer(url, time.Second)
	if perr != nil {
		return ""
	}
	msg := strings.ToLower(err.Error())
	switch {
	case info.TLSRequired && !no.Secure:
		return "the server requires TLS: give the CA of its certificate (--tls-ca FILE, raidq.WithTLS)"
	case info.TLSRequired && strings.Contains(msg, "certificate"):
		return "the server's TLS certificate is not trusted: check --tls-ca (the CA that signed it)"
	case info.AuthRequired && strings.Contains(msg, "authorization"):
		return "the server requires credentials: --user/--password, --nkey or --creds (raidq.WithUserPassword, WithNKeySeed, WithCreds)"
	}
	return ""
}
