package natsserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/raidq/raidq/bus"
)

// Certificates for trying TLS (raidq dev --tls, raidq security certs): a
// local CA (ECDSA P-256) and certificates it signs. Not a PKI: use your
// organisation's CA in production.

// CertValidity is how long generated certificates are valid.
const CertValidity = 365 * 24 * time.Hour

// Generated file names in a TLS directory.
const (
	CAFile     = "ca.pem"
	CAKeyFile  = "ca-key.pem"
	ServerCert = "server.pem"
	ServerKey  = "server-key.pem"
	ClientCert = "client.pem"
	ClientKey  = "client-key.pem"
)

// TLSBundle names the files of a TLS directory.
type TLSBundle struct {
	Dir                   string
	CA, CAKey             string
	Cert, Key             string // server (serverAuth + clientAuth: also for routes)
	ClientCert, ClientKey string // a client certificate (clientAuth)
}

// Files is the server side of b (TLSFiles).
func (b TLSBundle) Files() *TLSFiles { return &TLSFiles{Cert: b.Cert, Key: b.Key, CA: b.CA} }

func bundle(dir string) TLSBundle {
	j := func(f string) string { return filepath.Join(dir, f) }
	return TLSBundle{Dir: dir, CA: j(CAFile), CAKey: j(CAKeyFile), Cert: j(ServerCert), Key: j(ServerKey),
		ClientCert: j(ClientCert), ClientKey: j(ClientKey)}
}

// EnsureDevTLS makes dir hold a CA, a server certificate for hosts plus
// localhost, 127.0.0.1 and ::1, and a client certificate, all signed by
// the CA; files already there (from an earlier run) are kept, so clients
// keep trusting the same CA. created reports whether anything was written.
func EnsureDevTLS(dir string, hosts []string) (b TLSBundle, created bool, err error) {
	b = bundle(dir)
	if allExist(b.CA, b.CAKey, b.Cert, b.Key, b.ClientCert, b.ClientKey) {
		if _, err := (&TLSFiles{Cert: b.Cert, Key: b.Key, CA: b.CA}).ServerConfig(); err == nil {
			return b, false, nil
		}
	}
	ca, key, _, err := LoadOrCreateCA(dir)
	if err != nil {
		return b, false, err
	}
	all := append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
	if _, _, err := IssueCert(dir, "server", ca, key, all, true); err != nil {
		return b, false, err
	}
	if _, _, err := IssueCert(dir, "client", ca, key, nil, false); err != nil {
		return b, false, err
	}
	return b, true, nil
}

func allExist(files ...string) bool {
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	return true
}

// LoadOrCreateCA reads dir/ca.pem and dir/ca-key.pem, or creates them.
func LoadOrCreateCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, bool, error) {
	b := bundle(dir)
	if allExist(b.CA, b.CAKey) {
		cert, err := readCert(b.CA)
		if err != nil {
			return nil, nil, false, err
		}
		key, err := readKey(b.CAKey)
		if err != nil {
			return nil, nil, false, err
		}
		return cert, key, false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, false, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, false, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "raidq local CA", Organization: []string{"raidq"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(CertValidity), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature, MaxPathLenZero: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, false, err
	}
	if err := writePEM(b.CA, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, false, err
	}
	if err := writeKey(b.CAKey, key); err != nil {
		return nil, nil, false, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, true, err
}

// IssueCert writes dir/<name>.pem and dir/<name>-key.pem: a certificate
// signed by ca for hosts (DNS names or IP addresses). server certificates
// carry serverAuth and clientAuth (a node presents the same certificate
// when it dials a route), client ones clientAuth only.
func IssueCert(dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, server bool) (certFile, keyFile string, err error) {
	if err := bus.ValidName("certificate name", name); err != nil {
		return "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "raidq " + name, Organization: []string{"raidq"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(CertValidity), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		if len(hosts) == 0 {
			return "", "", errors.New("a server certificate needs at least one host name or address")
		}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writeKey(keyFile, key)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writeKey(file string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(file, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(file, kind string, der []byte, mode os.FileMode) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

func readPEM(file, kind string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != kind {
		return nil, fmt.Errorf("%s: no %s PEM block", file, kind)
	}
	return blk.Bytes, nil
}

func readCert(file string) (*x509.Certificate, error) {
	der, err := readPEM(file, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func readKey(file string) (*ecdsa.PrivateKey, error) {
	der, err := readPEM(file, "EC PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	return x509.ParseECPrivateKey(der)
}
