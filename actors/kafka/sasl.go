package kafka

import (
	"encoding/binary"
	"errors"
	"io"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/bus/kafkawire"
)

var errClosing = errors.New("kafka gateway: connection closing")

// saslHandshake picks the mechanism for the SaslAuthenticate that
// follows (handshake v1; v0's raw tokens are not served).
func (c *conn) saslHandshake(r *kmsg.SASLHandshakeRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	var mechs []string
	if c.g.cfg.Users != nil {
		mechs = c.g.cfg.Users.Mechanisms()
	}
	resp.SupportedMechanisms = mechs
	if !slices.Contains(mechs, r.Mechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp
	}
	c.mech = r.Mechanism
	c.rawSASL = r.Version == 0
	return resp
}

// maxRawSASL bounds a v0 client's raw SASL token.
const maxRawSASL = 64 << 10

// readRawSASL reads the raw PLAIN token a SaslHandshake v0 client sends
// (a 4-byte length and the token, not a request) and answers it the same
// way: an empty token on success; on failure the connection closes.
func (c *conn) readRawSASL(r io.Reader) bool {
	c.rawSASL = false
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		c.readFailed(err)
		return false
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxRawSASL {
		c.log.Warn("kafka gateway: raw SASL token too large; closing the connection", "bytes", n)
		return false
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(r, tok); err != nil {
		c.readFailed(err)
		return false
	}
	p := &pending{done: make(chan struct{})}
	select {
	case c.out <- p:
	case <-c.quit:
		return false
	}
	if err := c.checkPlain(tok); err != nil {
		p.close = true
		close(p.done)
		return false
	}
	p.frame = []byte{0, 0, 0, 0}
	close(p.done)
	return true
}

// checkPlain authenticates a PLAIN token, bounded by the gateway's
// concurrent-check limit, and marks the connection authenticated.
func (c *conn) checkPlain(tok []byte) error {
	_, user, pass, err := kafkawire.ParsePlain(tok)
	if err == nil {
		select {
		case c.g.auths <- struct{}{}:
			err = c.g.cfg.Users.Authenticate(user, pass)
			<-c.g.auths
		case <-c.quit:
			return errClosing
		}
	}
	if err != nil {
		c.g.m.AuthFailed()
		c.log.Warn("kafka gateway: SASL authentication failed", "user", user, "err", err)
		return err
	}
	c.user, c.authed = user, true
	c.log = c.log.With("user", user)
	c.log.Debug("kafka gateway: authenticated")
	return nil
}

// saslAuthenticate checks PLAIN credentials against the auth file. A
// failure is answered, logged, and then the connection is closed, as
// Kafka brokers do.
func (c *conn) saslAuthenticate(r *kmsg.SASLAuthenticateRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if c.g.cfg.Users == nil || c.mech == "" {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		resp.ErrorMessage = kmsg.StringPtr("SaslHandshake first")
		return resp
	}
	if c.mech != "PLAIN" {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp
	}
	if err := c.checkPlain(r.SASLAuthBytes); err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = kmsg.StringPtr("authentication failed")
	}
	return resp
}
