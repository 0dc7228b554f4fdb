package fanout

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// Headers of a delivered message (docs/design.md#consumers-groups-and-fencing). A subscriber on
// raidq.<cluster>.deliver.<topic>.<partition> gets one NATS message per
// record: the payload is the record's value, and
//
//	Raidq-Offset        the stripe's offset (decimal unix ns)
//	Raidq-Index         the record's index in the stripe (decimal)
//	Raidq-Stripe        the stripe id, <producer hex>-<sequence>
//	Raidq-Time          the record's own timestamp (decimal unix ns), set
//	                    by its producer (a Kafka client's CreateTime);
//	                    absent when it has none
//	Raidq-Key           the key, raw when it is safe header text (valid
//	                    UTF-8, no control characters, no leading or trailing
//	                    blank); absent for an empty key
//	Raidq-Key-Encoding  "base64" when Raidq-Key is standard base64 instead
//	Raidq-Header-Base64 one per record header that cannot travel as-is:
//	                    <base64 name>:<base64 value> (standard base64)
//	Raidq-Too-Large     set (to the value's size) instead of the payload
//	                    when the record does not fit the NATS max payload
//
// Record headers travel as-is (same name, same value) when the name is a
// header token (printable ASCII, no ':' or blank) that does not start with
// "Raidq-" or "Nats-" (case-insensitive; those are raidq's and the NATS
// server's) and the value is safe header text; every other record header
// is carried in Raidq-Header-Base64, so a record header can never
// overwrite or forge a Raidq-* header, nor steer a JetStream stream that
// captures the subject (Nats-Msg-Id, Nats-Expected-*...).
//
// (Raidq-Stripe, Raidq-Index) identifies a record: the fan-out replays a
// little after a takeover, and subscribers dedupe on that pair (or on
// (Raidq-Offset, Raidq-Index), which is the same here). Within one
// holder's run, messages of a partition arrive in position order.
const (
	HeaderOffset      = "Raidq-Offset"
	HeaderIndex       = "Raidq-Index"
	HeaderStripe      = "Raidq-Stripe"
	HeaderTime        = "Raidq-Time"
	HeaderKey         = "Raidq-Key"
	HeaderKeyEncoding = "Raidq-Key-Encoding"
	HeaderBase64      = "Raidq-Header-Base64"
	HeaderTooLarge    = "Raidq-Too-Large"
)

// ErrBadMessage wraps every ParseMsg error.
var ErrBadMessage = errors.New("not a raidq delivery")

// Encode builds the NATS message that carries one delivery on subject.
func Encode(subject string, d core.Delivery) *nats.Msg {
	m := &nats.Msg{Subject: subject, Header: make(nats.Header, 4+len(d.Record.Headers)), Data: d.Record.Value}
	for _, h := range d.Record.Headers {
		if headerName(h.Name) && !reserved(h.Name) && headerText(h.Value) {
			m.Header.Add(h.Name, string(h.Value))
			continue
		}
		m.Header.Add(HeaderBase64, base64.StdEncoding.EncodeToString([]byte(h.Name))+":"+base64.StdEncoding.EncodeToString(h.Value))
	}
	m.Header.Set(HeaderOffset, strconv.FormatUint(d.Pos.Offset, 10))
	m.Header.Set(HeaderIndex, strconv.FormatUint(uint64(d.Pos.Index), 10))
	m.Header.Set(HeaderStripe, d.Stripe.String())
	if d.Record.Time != 0 {
		m.Header.Set(HeaderTime, strconv.FormatInt(d.Record.Time, 10))
	}
	if len(d.Record.Key) > 0 {
		if headerText(d.Record.Key) {
			m.Header.Set(HeaderKey, string(d.Record.Key))
		} else {
			m.Header.Set(HeaderKey, base64.StdEncoding.EncodeToString(d.Record.Key))
			m.Header.Set(HeaderKeyEncoding, "base64")
		}
	}
	return m
}

// Delivery is a parsed delivered message.
type Delivery struct {
	Pos      core.Position
	Stripe   stripe.ID
	Record   stripe.Record
	TooLarge int // > 0: the value (of this size) was not sent
}

// ParseMsg decodes a message published by the fan-out (the inverse of
// Encode; record headers come back in NATS header order, which need not be
// the record's order across different names).
func ParseMsg(m *nats.Msg) (Delivery, error) {
	var d Delivery
	if m.Header == nil {
		return d, fmt.Errorf("%w: no headers", ErrBadMessage)
	}
	var err error
	if d.Pos.Offset, err = strconv.ParseUint(m.Header.Get(HeaderOffset), 10, 64); err != nil {
		return d, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderOffset, err)
	}
	idx, err := strconv.ParseUint(m.Header.Get(HeaderIndex), 10, 32)
	if err != nil {
		return d, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderIndex, err)
	}
	d.Pos.Index = uint32(idx)
	if d.Stripe, err = ParseStripeID(m.Header.Get(HeaderStripe)); err != nil {
		return d, err
	}
	if s := m.Header.Get(HeaderTime); s != "" {
		if d.Record.Time, err = strconv.ParseInt(s, 10, 64); err != nil || d.Record.Time <= 0 {
			return d, fmt.Errorf("%w: %s %q: want positive unix ns", ErrBadMessage, HeaderTime, s)
		}
	}
	if k := m.Header.Get(HeaderKey); k != "" {
		if m.Header.Get(HeaderKeyEncoding) == "base64" {
			if d.Record.Key, err = base64.StdEncoding.DecodeString(k); err != nil {
				return d, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderKey, err)
			}
		} else {
			d.Record.Key = []byte(k)
		}
	}
	if s := m.Header.Get(HeaderTooLarge); s != "" {
		d.TooLarge, _ = strconv.Atoi(s)
	}
	for name, vals := range m.Header {
		switch {
		case name == HeaderBase64:
			for _, v := range vals {
				n, val, ok := strings.Cut(v, ":")
				bn, err1 := base64.StdEncoding.DecodeString(n)
				bv, err2 := base64.StdEncoding.DecodeString(val)
				if !ok || err1 != nil || err2 != nil {
					return d, fmt.Errorf("%w: bad %s %q", ErrBadMessage, HeaderBase64, v)
				}
				d.Record.Headers = append(d.Record.Headers, stripe.Header{Name: string(bn), Value: bv})
			}
		case reserved(name):
		default:
			for _, v := range vals {
				d.Record.Headers = append(d.Record.Headers, stripe.Header{Name: name, Value: []byte(v)})
			}
		}
	}
	d.Record.Value = m.Data
	return d, nil
}

// ParseStripeID parses a stripe id as stripe.ID.String writes it.
func ParseStripeID(s string) (stripe.ID, error) {
	var id stripe.ID
	p, seq, ok := strings.Cut(s, "-")
	if !ok || len(p) != 2*len(id.Producer) {
		return id, fmt.Errorf("%w: stripe id %q: want <%d hex digits>-<sequence>", ErrBadMessage, s, 2*len(id.Producer))
	}
	if _, err := hex.Decode(id.Producer[:], []byte(p)); err != nil {
		return id, fmt.Errorf("%w: stripe id %q: %v", ErrBadMessage, s, err)
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return id, fmt.Errorf("%w: stripe id %q: %v", ErrBadMessage, s, err)
	}
	id.Seq = n
	return id, nil
}

// reserved: header names raidq and the NATS server own.
func reserved(name string) bool {
	return hasPrefixFold(name, "raidq-") || hasPrefixFold(name, "nats-")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// headerName: a non-empty token of printable ASCII without ':' or blanks.
func headerName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return true
}

// headerText: valid UTF-8 with no control characters and no leading or
// trailing blank (NATS header parsing trims leading blanks, and CR/LF end
// a header line).
func headerText(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	if !utf8.Valid(b) || b[0] == ' ' || b[0] == '\t' || b[len(b)-1] == ' ' || b[len(b)-1] == '\t' {
		return false
	}
	for _, r := range string(b) {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}
