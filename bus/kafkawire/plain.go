package kafkawire

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// maxPlainField is RFC 4616's bound on each field: a server must accept up
// to 255 octets, and this one accepts no more.
const maxPlainField = 255

// ParsePlain parses a SASL PLAIN message (RFC 4616), the auth bytes of a
// SaslAuthenticate request (or of the raw exchange after SaslHandshake v0):
// [authzid] NUL authcid NUL passwd. authzid may be empty (act as the
// authenticated user); user and pass may not. Each field is valid UTF-8
// without NUL, at most 255 bytes. Errors wrap ErrBadPlain and never echo
// the password.
func ParsePlain(auth []byte) (authzid, user, pass string, err error) {
	if len(auth) > 3*maxPlainField+2 {
		return "", "", "", fmt.Errorf("%w: %d bytes", ErrBadPlain, len(auth))
	}
	parts := bytes.Split(auth, []byte{0})
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("%w: %d NUL separators, want 2", ErrBadPlain, len(parts)-1)
	}
	for i, name := range []string{"authzid", "authcid", "passwd"} {
		p := parts[i]
		switch {
		case len(p) == 0 && i > 0:
			return "", "", "", fmt.Errorf("%w: empty %s", ErrBadPlain, name)
		case len(p) > maxPlainField:
			return "", "", "", fmt.Errorf("%w: %s of %d bytes", ErrBadPlain, name, len(p))
		case !utf8.Valid(p):
			return "", "", "", fmt.Errorf("%w: %s is not UTF-8", ErrBadPlain, name)
		}
	}
	return string(parts[0]), string(parts[1]), string(parts[2]), nil
}
