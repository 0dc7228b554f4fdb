package natsserver

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// refusalCounts count what the embedded server refused, from its error
// log lines ("Publish Violation - Subject ...", "Subscription Violation
// ...", "authentication error ..."): every refusal is also logged there,
// with the connection and user.
type refusalCounts struct {
	pub, sub, auth, tls atomic.Int64
}

func (a *slogAdapter) countRefusal(format string, v []any) {
	msg := format
	if strings.Contains(format, "%") {
		msg = fmt.Sprintf(format, v...)
	}
	switch {
	case strings.Contains(msg, "Publish Violation"):
		a.refusals.pub.Add(1)
	case strings.Contains(msg, "Subscription Violation"):
		a.refusals.sub.Add(1)
	case strings.Contains(strings.ToLower(msg), "authentication error"), strings.Contains(msg, "Authorization Error"):
		a.refusals.auth.Add(1)
	case strings.Contains(msg, "TLS") && strings.Contains(msg, "handshake error"), strings.Contains(msg, "TLS Required"),
		strings.Contains(msg, "TLS required"):
		a.refusals.tls.Add(1)
	}
}

// Refusals counts what the server refused since it started.
type Refusals struct {
	Publish   int64 `json:"publish_violations"`      // publishes outside the user's permissions
	Subscribe int64 `json:"subscription_violations"` // subscriptions outside them
	Auth      int64 `json:"auth_failures"`           // connections with missing or wrong credentials
	TLS       int64 `json:"tls_failures"`            // failed TLS handshakes (plaintext, untrusted certificates)
}

// Refusals returns the server's refusal counts.
func (s *Server) Refusals() Refusals {
	r := &s.log.refusals
	return Refusals{Publish: r.pub.Load(), Subscribe: r.sub.Load(), Auth: r.auth.Load(), TLS: r.tls.Load()}
}
