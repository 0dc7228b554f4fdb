package kafkawire

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The package's sentinel errors. Every error it returns wraps exactly one
// of them (with %w), so the gateway decides with errors.Is what to answer
// or whether to close the connection; CodeFor maps them to Kafka's codes.
var (
	// ErrFrameTooLarge: a request frame claims more bytes than the reader
	// accepts. Nothing past the size was read or allocated; the
	// connection cannot be resynchronised and must be closed.
	ErrFrameTooLarge = errors.New("kafkawire: request frame too large")
	// ErrTruncated: the stream ended inside a frame. It also wraps
	// io.ErrUnexpectedEOF, so a gateway treats it as the client going away.
	ErrTruncated = errors.New("kafkawire: truncated request frame")
	// ErrMalformed: a frame's header or a known request's body does not
	// decode. Kafka brokers close the connection on it.
	ErrMalformed = errors.New("kafkawire: malformed request")

	// ErrOldMessageFormat: a magic 0 or 1 message set, which this package
	// does not decode (Kafka code UNSUPPORTED_FOR_MESSAGE_FORMAT).
	ErrOldMessageFormat = errors.New("kafkawire: message format v0/v1 not supported")
	// ErrCorruptBatch: a record batch whose framing, magic, CRC or
	// compressed payload is wrong (CORRUPT_MESSAGE).
	ErrCorruptBatch = errors.New("kafkawire: corrupt record batch")
	// ErrInvalidRecord: the batch is intact but its records do not parse
	// or disagree with its header (INVALID_RECORD).
	ErrInvalidRecord = errors.New("kafkawire: invalid record")
	// ErrUnsupportedCompression: compression codec 5 to 7
	// (UNSUPPORTED_COMPRESSION_TYPE).
	ErrUnsupportedCompression = errors.New("kafkawire: unsupported compression codec")
	// ErrTooLarge: a batch exceeds one of the Limits — decompressed size,
	// record, header, key or value counts and sizes (MESSAGE_TOO_LARGE).
	ErrTooLarge = errors.New("kafkawire: record batch exceeds a limit")

	// ErrBadSpec: AppendBatch was given a BatchSpec it cannot encode.
	ErrBadSpec = errors.New("kafkawire: invalid batch spec")
	// ErrBadVersions: a Versions table names an unknown key or a range
	// kmsg cannot encode.
	ErrBadVersions = errors.New("kafkawire: invalid versions table")
	// ErrBadPlain: a SASL PLAIN message that does not follow RFC 4616.
	ErrBadPlain = errors.New("kafkawire: malformed SASL PLAIN message")
)

// CodeFor returns the Kafka error code (from kerr) a gateway answers for a
// DecodeBatches or ReadRequest error: 0 for nil, UNKNOWN_SERVER_ERROR for
// an error of no other package.
func CodeFor(err error) int16 {
	codes := []struct {
		err  error
		code *kerr.Error
	}{
		{ErrOldMessageFormat, kerr.UnsupportedForMessageFormat},
		{ErrCorruptBatch, kerr.CorruptMessage},
		{ErrInvalidRecord, kerr.InvalidRecord},
		{ErrUnsupportedCompression, kerr.UnsupportedCompressionType},
		{ErrTooLarge, kerr.MessageTooLarge},
		{ErrMalformed, kerr.InvalidRequest},
		{ErrFrameTooLarge, kerr.InvalidRequest},
		{ErrBadPlain, kerr.SaslAuthenticationFailed},
	}
	if err == nil {
		return 0
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code.Code
		}
	}
	return kerr.UnknownServerError.Code
}
