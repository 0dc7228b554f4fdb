package bus

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// What a client needs to authenticate to a secured cluster; the server
// side (users, permissions, TLS listeners) is package natsserver.

// InboxPrefix is the reply inbox prefix of the user named identity (user
// name or NKey): _INBOX_<identity>. Its permissions let it subscribe to
// <prefix>.> and no other inbox.
func InboxPrefix(identity string) string { return "_INBOX_" + identity }

// ClientTLSConfig is a client's TLS: trust the CA bundle (empty: the
// system's roots) and, with cert and key, present a client certificate.
func ClientTLSConfig(ca, cert, key string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pool, err := LoadPool(ca)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("a client certificate needs both --tls-cert and --tls-key")
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate %s / key %s: %w", cert, key, err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}

// LoadPool reads a PEM CA bundle.
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("TLS CA %s: no PEM certificate in it", file)
	}
	return pool, nil
}
