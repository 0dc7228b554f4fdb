// Package kafkawire is the Kafka protocol's wire format for raidq's Kafka
// gateway (actors/kafka): request and response frames, record batches v2,
// and SASL PLAIN. Request and response bodies are franz-go's kmsg types,
// encoded and decoded by kmsg; error codes are kerr's.
//
// It does no I/O beyond the io.Reader handed to ReadRequest, starts no
// goroutines and keeps no state but codec pools.
//
//   - Frames (frame.go, versions.go): ReadRequest reads one size-prefixed
//     request, parses its header (v0 for ControlledShutdown v0, v1, or v2
//     with tagged fields for flexible versions) and decodes the body with
//     kmsg; a key or version kmsg does not know is returned without a body,
//     not as an error. AppendResponse frames a response (header v0, or v1
//     for flexible ones except ApiVersions). Versions is the table of
//     served keys, ApiVersionsResponse its answer and
//     UnsupportedVersionResponse the KIP-511 answer to an ApiVersions
//     version not served.
//   - Record batches (batch.go, record.go, compress.go, encode.go):
//     DecodeBatches checks and decodes the record batches v2 of a Produce
//     partition, every codec (gzip; snappy raw or xerial-framed; lz4 frame;
//     zstd); AppendBatch encodes one for a Fetch response; ValidateProduce
//     adds a broker's checks on what a client may write; CodeFor maps the
//     errors to Kafka codes.
//   - ParsePlain (plain.go) parses a SASL PLAIN message.
//
// Limits: a request frame is at most ReadRequest's maxBytes (default 100
// MiB, Kafka's socket.request.max.bytes), refused before the body is read,
// and its buffer grows only as bytes arrive. DecodeBatches holds to Limits
// (DefaultLimits: 64 MiB of records per batch after decompression and 128
// MiB per call, 2^18 records and 2^18 headers per call, 64 headers per
// record, 1 MiB keys, 64 MiB values): every codec stops at the limit or
// knows the decompressed size first, and record and header arrays are
// allocated only after their counts pass the limits. SASL PLAIN fields
// are at most 255 bytes.
package kafkawire
