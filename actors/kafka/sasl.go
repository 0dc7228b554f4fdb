package kafka

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/bus/kafkawire"
)

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
	return resp
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
	_, user, pass, err := kafkawire.ParsePlain(r.SASLAuthBytes)
	if err == nil {
		select {
		case c.g.auths <- struct{}{}:
			err = c.g.cfg.Users.Authenticate(user, pass)
			<-c.g.auths
		case <-c.quit:
			return nil
		}
	}
	if err != nil {
		c.log.Warn("kafka gateway: SASL authentication failed", "user", user, "err", err)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = kmsg.StringPtr("authentication failed")
		return resp
	}
	c.user, c.authed = user, true
	c.log = c.log.With("user", user)
	c.log.Debug("kafka gateway: authenticated")
	return resp
}
