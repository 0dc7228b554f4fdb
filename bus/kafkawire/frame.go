package kafkawire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultMaxRequestBytes is the frame limit ReadRequest applies when given
// none: Kafka's socket.request.max.bytes default (100 MiB).
const DefaultMaxRequestBytes int32 = 100 << 20

const (
	// minFrame is the smallest request frame: api key, api version and
	// correlation id (ControlledShutdown v0 has no client id).
	minFrame = 8
	// readChunk is the first read of a frame body; the buffer then doubles
	// as bytes arrive, so a peer that claims a large frame and sends
	// little costs little memory.
	readChunk = 64 << 10
)

// Reason says why a Request has no Body.
type Reason uint8

// The reasons. Only Decoded has a Body.
const (
	// Decoded: Body holds the request, decoded at Version.
	Decoded Reason = iota
	// UnknownKey: kmsg knows no request with this api key.
	UnknownKey
	// UnknownVersion: the version is negative or above kmsg's MaxVersion
	// for the key; the header past the client id and the body are not
	// parsed (their layout at that version is unknown).
	UnknownVersion
	// NotServed: ReadServedRequest only — the key or version is outside
	// the served table, so the body was not decoded.
	NotServed
)

func (r Reason) String() string {
	switch r {
	case Decoded:
		return "decoded"
	case UnknownKey:
		return "unknown api key"
	case UnknownVersion:
		return "unknown api version"
	case NotServed:
		return "not served"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Request is one request frame.
//
// A request this package cannot decode is not an error: Body is nil and
// Unsupported says why, so the gateway can answer (UnsupportedVersionResponse
// for ApiVersions) or log and close, as a Kafka broker does.
type Request struct {
	Key           int16
	Version       int16
	CorrelationID int32
	// ClientID is the header's client id; a null one reads as "", as in
	// Kafka's own RequestHeader.
	ClientID string
	// HeaderTags are the header's tagged fields (request header v2, used
	// by flexible versions); none are defined today.
	HeaderTags kmsg.Tags
	// Body is the decoded request at Version, nil unless Unsupported is
	// Decoded. Its byte-slice fields (Produce records, SASL tokens) alias
	// Raw.
	Body        kmsg.Request
	Unsupported Reason
	// Raw is the frame without its 4-byte size: header, then body.
	Raw []byte
}

// ReadRequest reads one request frame from r: a 4-byte big-endian size,
// then that many bytes of header and body. maxBytes <= 0 means
// DefaultMaxRequestBytes.
//
// Errors: io.EOF, bare, when r ends before the frame starts (the client
// closed cleanly); ErrTruncated (also wrapping io.ErrUnexpectedEOF, or r's
// own error) when it ends or fails inside one; ErrFrameTooLarge when the
// size exceeds maxBytes, refused before the body is read or allocated;
// ErrMalformed when the size is below the header minimum, the header does
// not parse, or a known request's body does not decode. After any error
// the stream is out of step: close the connection.
//
// Memory: the body buffer grows with the bytes actually received (at most
// twice the frame). kmsg's decoding then preallocates each array by its
// claimed count, bounded only by the bytes left, so a hostile frame of n
// bytes can cost about n times the array's element struct: under 100 bytes
// for every request but a few broker-to-broker and Streams ones (up to 232).
// Use ReadServedRequest so that requests the gateway does not serve are
// never decoded, and a small maxBytes before authentication (Kafka's
// sasl.server.max.receive.size is 512 KiB).
func ReadRequest(r io.Reader, maxBytes int32) (*Request, error) {
	return ReadServedRequest(r, maxBytes, nil)
}

// ReadServedRequest is ReadRequest that decodes only the bodies of the keys
// and versions in served; others come back with Body nil and Unsupported
// NotServed (or UnknownKey/UnknownVersion). A nil served decodes every
// request kmsg knows.
func ReadServedRequest(r io.Reader, maxBytes int32, served Versions) (*Request, error) {
	frame, err := readFrame(r, maxBytes)
	if err != nil {
		return nil, err
	}
	return parseRequest(frame, served)
}

// readFrame reads one size-prefixed frame and returns its bytes after the
// size.
func readFrame(r io.Reader, maxBytes int32) ([]byte, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRequestBytes
	}
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, truncated(err)
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	switch {
	case n > maxBytes:
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, maxBytes)
	case n < minFrame:
		return nil, fmt.Errorf("%w: frame size %d below the header's %d", ErrMalformed, n, minFrame)
	}
	return readBody(r, int(n))
}

// readBody reads exactly n bytes, growing its buffer as they arrive.
func readBody(r io.Reader, n int) ([]byte, error) {
	var buf []byte
	for len(buf) < n {
		next := min(n, max(2*len(buf), readChunk))
		buf = slices.Grow(buf, next-len(buf))
		if _, err := io.ReadFull(r, buf[len(buf):next]); err != nil {
			return nil, truncated(err)
		}
		buf = buf[:next]
	}
	return buf, nil
}

// truncated wraps the error of a read that ended inside a frame; a bare EOF
// there is unexpected.
func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %w", ErrTruncated, err)
}

// parseRequest parses a frame (without its size) into a Request.
func parseRequest(frame []byte, served Versions) (*Request, error) {
	h := reader{src: frame}
	req := &Request{Raw: frame}
	req.Key, req.Version, req.CorrelationID = h.int16(), h.int16(), h.int32()
	body := kmsg.RequestForKey(req.Key)
	// ControlledShutdown v0 is the one request with header v0: no client id.
	if req.Key != kmsg.ControlledShutdown.Int16() || req.Version != 0 {
		req.ClientID = h.nullableString()
	}
	if !h.Ok() {
		return nil, fmt.Errorf("%w: short request header", ErrMalformed)
	}
	switch {
	case body == nil:
		req.Unsupported = UnknownKey
	case req.Version < 0 || req.Version > body.MaxVersion():
		req.Unsupported = UnknownVersion
	case served != nil && !served.Serves(req.Key, req.Version):
		req.Unsupported = NotServed
	default:
		if err := decodeBody(req, body, &h); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// decodeBody reads the header's tagged fields (flexible versions) and the
// body that follows into req.Body.
func decodeBody(req *Request, body kmsg.Request, h *reader) error {
	body.SetVersion(req.Version)
	if body.IsFlexible() {
		req.HeaderTags = kmsg.ReadTags(h)
		if !h.Ok() {
			return fmt.Errorf("%w: %s v%d: bad header tags", ErrMalformed, kmsg.NameForKey(req.Key), req.Version)
		}
	}
	if err := body.ReadFrom(h.src); err != nil {
		return fmt.Errorf("%w: %s v%d body: %w", ErrMalformed, kmsg.NameForKey(req.Key), req.Version, err)
	}
	req.Body = body
	return nil
}

// AppendResponse appends resp as a response frame to dst: the 4-byte size,
// the response header (v0: the correlation id; v1 adds an empty tagged
// field section, for flexible responses except ApiVersions, whose response
// header is always v0 so that a client can read it before knowing the
// broker's versions), then resp.AppendTo.
//
// resp's version must already be the request's (kmsg's ResponseKind sets
// it), except UnsupportedVersionResponse's v0 answer. A response body is the
// caller's to bound (Fetch's MaxBytes); one past 2 GiB panics, as it cannot
// be framed.
func AppendResponse(dst []byte, correlationID int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(correlationID))
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		dst = append(dst, 0) // no tagged fields
	}
	dst = resp.AppendTo(dst)
	n := len(dst) - start - 4
	if n > math.MaxInt32 {
		panic(fmt.Sprintf("kafkawire: a %d-byte response cannot be framed", n))
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	return dst
}

// reader reads a request header with a sticky failure, and serves kmsg's
// TagReader for the header's tagged fields.
type reader struct {
	src []byte
	bad bool
}

// Ok reports no failure so far; it also lets kmsg.ReadTags stop at the
// first failure.
func (r *reader) Ok() bool { return !r.bad }

// Span returns the next n bytes (nil and failed if fewer are left).
func (r *reader) Span(n int) []byte {
	if r.bad || n < 0 || n > len(r.src) {
		r.bad, r.src = true, nil
		return nil
	}
	b := r.src[:n:n]
	r.src = r.src[n:]
	return b
}

// Uvarint reads an unsigned varint of at most 32 bits.
func (r *reader) Uvarint() uint32 {
	v, n := binary.Uvarint(r.src)
	if r.bad || n <= 0 || v > math.MaxUint32 {
		r.bad, r.src = true, nil
		return 0
	}
	r.src = r.src[n:]
	return uint32(v)
}

func (r *reader) int16() int16 {
	if b := r.Span(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *reader) int32() int32 {
	if b := r.Span(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

// nullableString reads an int16-length string; -1 (null) reads as "".
func (r *reader) nullableString() string {
	n := r.int16()
	if n < 0 {
		return ""
	}
	return string(r.Span(int(n)))
}
