package bus

// Wire format, version 1.
//
// The hot-path messages between producers, readers and nodes are compact
// binary, never JSON or gob. Every message starts with two bytes:
//
//	type    u8   1 WriteReq, 2 WriteReply, 3 ScanReq, 4 ScanReply
//	version u8   1
//
// then the fields below, in order. Integers of fixed width are big-endian
// (u32, u64; i64 is the two's complement u64). Lengths and counts are
// unsigned varints (encoding/binary.AppendUvarint) in their minimal form; a
// longer-than-needed varint is rejected, so each value has exactly one
// encoding and decode(encode(v)) == v and encode(decode(b)) == b. A "bytes"
// field is a uvarint length followed by that many bytes. Flags bytes carry
// booleans; unknown flag bits are rejected.
//
//	WriteReq    flags u8 (bit0 Repair) | partition u32 | offset u64 |
//	            topic bytes | shard bytes
//	WriteReply  status u8 | nodeClock i64 | detail bytes
//	ScanReq     flags u8 (bit0 Seal, bit1 HeadersOnly, bit2 Probe) | partition u32 |
//	            from u64 | to u64 | maxBytes u32 | topic bytes
//	ScanReply   status u8 | nodeClock i64 | seal u64 | birth u64 | next u64 | after u64 |
//	            detail bytes | count uvarint | count × (offset u64 | shard bytes)
//
// Limits (checked by Validate and by every decoder): a topic passes
// ValidName (1..128 bytes), a detail is at most 256 bytes, a shard is
// 1..8 MiB, a scan page holds at most 65536 entries with strictly increasing
// offsets all below next, a status is one of the named values, a scan range
// has from <= to, and a whole message is at most 16 MiB. Decoders never
// panic, check every length and count before allocating, reject trailing
// bytes, and return errors that wrap ErrBadMessage with the exact reason.
// Byte slices in decoded values alias the input (capacity-limited, so an
// append to them never overwrites the input).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrBadMessage is wrapped by every decoding and validation error of a wire message.
var ErrBadMessage = errors.New("bad message")

// WireVersion is the wire format version this package writes and reads.
const WireVersion = 1

// Limits of the wire format.
const (
	MaxTopicLen    = MaxNameLen // bytes in a topic name
	MaxDetail      = 256        // bytes in a reply's Detail
	MaxShard       = 8 << 20    // bytes in one shard
	MaxScanEntries = 1 << 16    // entries in one scan reply page
	MaxMessage     = 16 << 20   // bytes in one encoded message
)

// MsgType is the first byte of every wire message.
type MsgType uint8

// The message types.
const (
	TypeWriteReq   MsgType = 1
	TypeWriteReply MsgType = 2
	TypeScanReq    MsgType = 3
	TypeScanReply  MsgType = 4
)

// String returns the message type's name.
func (t MsgType) String() string {
	switch t {
	case TypeWriteReq:
		return "write request"
	case TypeWriteReply:
		return "write reply"
	case TypeScanReq:
		return "scan request"
	case TypeScanReply:
		return "scan reply"
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Status is a node's answer to a request (docs/design.md#write-path step 5, docs/design.md#slot-store, docs/design.md#read-path).
type Status uint8

// The statuses. The zero value is not a status and is rejected on the wire.
const (
	StatusOK         Status = iota + 1 // done: slot written (or same shard already there), or scan page served
	StatusConflict                     // the slot holds another stripe's shard
	StatusSealed                       // offset below the seal or older than now-A
	StatusClockAhead                   // offset beyond now+F; NodeClock says where the node is
	StatusBadRequest                   // malformed or inconsistent request (Detail says why)
	StatusStoreError                   // the node's store failed; try elsewhere
	StatusBusy                         // overloaded; retry later
	StatusUnknown                      // node's incarnation is younger than the offset range asked: it cannot say empty
	StatusWrongNode                    // this node does not hold that partition's slot (stale ensemble)
	StatusClockOff                     // the node's clock is off cluster time: it takes no writes until corrected
	statusEnd
)

var statusNames = [...]string{
	StatusOK:         "OK",
	StatusConflict:   "CONFLICT",
	StatusSealed:     "SEALED",
	StatusClockAhead: "CLOCK_AHEAD",
	StatusBadRequest: "BAD_REQUEST",
	StatusStoreError: "STORE_ERROR",
	StatusBusy:       "BUSY",
	StatusUnknown:    "UNKNOWN",
	StatusWrongNode:  "WRONG_NODE",
	StatusClockOff:   "CLOCK_OFF",
}

// Valid reports whether s is one of the named statuses.
func (s Status) Valid() bool { return s >= StatusOK && s < statusEnd }

// String returns the status name in upper case ("OK", "CONFLICT",
// "CLOCK_AHEAD", ...), or "Status(n)" for an unnamed value.
func (s Status) String() string {
	if s.Valid() {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// TruncDetail cuts s to at most MaxDetail bytes on a UTF-8 boundary, for
// building a reply Detail from an arbitrary error text.
func TruncDetail(s string) string {
	if len(s) <= MaxDetail {
		return s
	}
	cut := MaxDetail
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Flag bits.
const (
	writeFlagRepair   = 1 << 0
	writeFlagsKnown   = writeFlagRepair
	scanFlagSeal      = 1 << 0
	scanFlagHeaders   = 1 << 1
	scanFlagProbe     = 1 << 2
	scanFlagClose     = 1 << 3
	scanFlagsKnown    = scanFlagSeal | scanFlagHeaders | scanFlagProbe | scanFlagClose
	fixedWriteReq     = 2 + 1 + 4 + 8             // header, flags, partition, offset
	fixedWriteReply   = 2 + 1 + 8                 // header, status, clock
	fixedScanReq      = 2 + 1 + 4 + 8 + 8 + 4     // header, flags, partition, from, to, maxBytes
	fixedScanReply    = 2 + 1 + 8 + 8 + 8 + 8 + 8 // header, status, clock, seal, birth, next, after
	minScanEntryBytes = 8 + 1 + 1                 // offset, length, one shard byte
)

// uvarintLen is the length of the minimal uvarint encoding of v.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func bytesLen(n int) int { return uvarintLen(uint64(n)) + n }

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func grow(dst []byte, n int) []byte {
	if cap(dst)-len(dst) < n {
		nd := make([]byte, len(dst), len(dst)+n)
		copy(nd, dst)
		dst = nd
	}
	return dst
}

func badf(what MsgType, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBadMessage, what, fmt.Sprintf(format, args...))
}

// PeekType checks the two-byte header of b (length, known type, version)
// and returns the message type. Errors wrap ErrBadMessage.
func PeekType(b []byte) (MsgType, error) {
	if len(b) < 2 {
		return 0, fmt.Errorf("%w: %d bytes, shorter than the 2-byte header", ErrBadMessage, len(b))
	}
	t := MsgType(b[0])
	if t < TypeWriteReq || t > TypeScanReply {
		return 0, fmt.Errorf("%w: unknown message type %d", ErrBadMessage, b[0])
	}
	if b[1] != WireVersion {
		return 0, fmt.Errorf("%w: %s: unsupported version %d (want %d)", ErrBadMessage, t, b[1], WireVersion)
	}
	if len(b) > MaxMessage {
		return 0, fmt.Errorf("%w: %s: %d bytes exceeds the %d-byte message limit", ErrBadMessage, t, len(b), MaxMessage)
	}
	return t, nil
}

// DecodeRequest decodes a request arriving on a slot subject: it returns a
// WriteReq or a ScanReq (values, not pointers), or an error wrapping
// ErrBadMessage for anything else, including replies.
func DecodeRequest(b []byte) (any, error) {
	t, err := PeekType(b)
	if err != nil {
		return nil, err
	}
	switch t {
	case TypeWriteReq:
		return DecodeWriteReq(b)
	case TypeScanReq:
		return DecodeScanReq(b)
	}
	return nil, fmt.Errorf("%w: %s is not a request", ErrBadMessage, t)
}

// ---------------------------------------------------------------- WriteReq

// WriteReq asks a node to store one shard in the slot (Topic, Partition,
// Offset) (docs/design.md#write-path step 4, docs/design.md#write-path step 5). Repair marks a write by the repair loop
// (docs/design.md#repair-and-scrub), allowed below the seal under the repair rules.
type WriteReq struct {
	Topic     string
	Partition uint32
	Offset    uint64
	Repair    bool
	Shard     []byte // marshalled stripe shard, opaque to bus; 1..MaxShard bytes
}

// Validate checks the limits of the wire format; DecodeWriteReq applies it.
func (m WriteReq) Validate() error {
	if !validNameFast(m.Topic) {
		return badf(TypeWriteReq, "%v", ValidName("topic", m.Topic))
	}
	if len(m.Shard) == 0 || len(m.Shard) > MaxShard {
		return badf(TypeWriteReq, "shard of %d bytes: want 1..%d", len(m.Shard), MaxShard)
	}
	return nil
}

// Size returns the length of m's encoding.
func (m WriteReq) Size() int {
	return fixedWriteReq + bytesLen(len(m.Topic)) + bytesLen(len(m.Shard))
}

// Append appends m's encoding to dst. It does not validate: a message that
// fails Validate encodes to bytes that DecodeWriteReq rejects.
func (m WriteReq) Append(dst []byte) []byte {
	dst = grow(dst, m.Size())
	var flags byte
	if m.Repair {
		flags |= writeFlagRepair
	}
	dst = append(dst, byte(TypeWriteReq), WireVersion, flags)
	dst = binary.BigEndian.AppendUint32(dst, m.Partition)
	dst = binary.BigEndian.AppendUint64(dst, m.Offset)
	dst = appendString(dst, m.Topic)
	return appendBytes(dst, m.Shard)
}

// Marshal returns m's encoding in a new slice of exactly Size bytes.
func (m WriteReq) Marshal() []byte { return m.Append(make([]byte, 0, m.Size())) }

// HeadSize is the length of AppendHead's output for a shard of shardLen
// bytes (m.Shard is ignored).
func (m WriteReq) HeadSize(shardLen int) int {
	return fixedWriteReq + bytesLen(len(m.Topic)) + uvarintLen(uint64(shardLen))
}

// AppendHead appends m's encoding up to and including the shard's length
// prefix, for a shard of shardLen bytes that the caller appends next
// (m.Shard is ignored). It lets a producer marshal a shard straight into
// the request instead of marshalling it and copying it in: m.Shard =
// shard gives the same bytes as AppendHead(dst, len(shard)) + shard.
func (m WriteReq) AppendHead(dst []byte, shardLen int) []byte {
	var flags byte
	if m.Repair {
		flags |= writeFlagRepair
	}
	dst = append(dst, byte(TypeWriteReq), WireVersion, flags)
	dst = binary.BigEndian.AppendUint32(dst, m.Partition)
	dst = binary.BigEndian.AppendUint64(dst, m.Offset)
	dst = appendString(dst, m.Topic)
	return binary.AppendUvarint(dst, uint64(shardLen))
}

// DecodeWriteReq decodes a WriteReq; Shard aliases b.
func DecodeWriteReq(b []byte) (WriteReq, error) {
	var m WriteReq
	r := reader{b: b, what: TypeWriteReq}
	r.header()
	flags := r.u8("flags")
	if r.err == nil && flags&^writeFlagsKnown != 0 {
		r.fail("unknown flags %#02x", flags&^writeFlagsKnown)
	}
	m.Repair = flags&writeFlagRepair != 0
	m.Partition = r.u32("partition")
	m.Offset = r.u64("offset")
	m.Topic = string(r.bytes("topic", MaxTopicLen))
	m.Shard = r.bytes("shard", MaxShard)
	r.end()
	if r.err != nil {
		return WriteReq{}, r.err
	}
	if err := m.Validate(); err != nil {
		return WriteReq{}, err
	}
	return m, nil
}

// -------------------------------------------------------------- WriteReply

// WriteReply is a node's answer to a WriteReq. Every reply carries the
// node's clock so that the producer can keep a skew estimate (docs/design.md#write-path step 5).
type WriteReply struct {
	Status    Status
	NodeClock int64  // node's unix ns at reply
	Detail    string // short reason, at most MaxDetail bytes (see TruncDetail)
}

// Validate checks the limits of the wire format; DecodeWriteReply applies it.
func (m WriteReply) Validate() error {
	if !m.Status.Valid() {
		return badf(TypeWriteReply, "unknown status %d", uint8(m.Status))
	}
	if len(m.Detail) > MaxDetail {
		return badf(TypeWriteReply, "detail of %d bytes exceeds %d", len(m.Detail), MaxDetail)
	}
	return nil
}

// Size returns the length of m's encoding.
func (m WriteReply) Size() int { return fixedWriteReply + bytesLen(len(m.Detail)) }

// Append appends m's encoding to dst. It does not validate.
func (m WriteReply) Append(dst []byte) []byte {
	dst = grow(dst, m.Size())
	dst = append(dst, byte(TypeWriteReply), WireVersion, byte(m.Status))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.NodeClock))
	return appendString(dst, m.Detail)
}

// Marshal returns m's encoding in a new slice of exactly Size bytes.
func (m WriteReply) Marshal() []byte { return m.Append(make([]byte, 0, m.Size())) }

// DecodeWriteReply decodes a WriteReply.
func DecodeWriteReply(b []byte) (WriteReply, error) {
	var m WriteReply
	r := reader{b: b, what: TypeWriteReply}
	r.header()
	m.Status = Status(r.u8("status"))
	m.NodeClock = int64(r.u64("node clock"))
	m.Detail = string(r.bytes("detail", MaxDetail))
	r.end()
	if r.err != nil {
		return WriteReply{}, r.err
	}
	if err := m.Validate(); err != nil {
		return WriteReply{}, err
	}
	return m, nil
}

// ----------------------------------------------------------------- ScanReq

// ScanReq asks a node for the slots of (Topic, Partition) with offsets in
// [From, To), one page at a time (docs/design.md#read-path). Seal also raises the seal of
// the range to the end of what was scanned (docs/design.md#slot-store). HeadersOnly asks for
// shard headers instead of whole shards (what a header is, is the stripe
// package's business). MaxBytes is the reader's page budget; 0 means the
// node's default, and a node never exceeds its own (see ScanReq.Budget).
type ScanReq struct {
	Topic       string
	Partition   uint32
	From, To    uint64
	MaxBytes    uint32
	Seal        bool
	HeadersOnly bool
	// Probe asks the node for the first occupied offset at or after To
	// in the partition (ScanReply.After), so a reader far behind can skip
	// empty time.
	Probe bool
	// Close asks for a closing scan (docs/design.md#the-read-frontier):
	// the node answers only up to the offset below which it takes no new
	// write, by its seal or its clock minus A, and returns that offset as
	// ScanReply.Seal; pages end there (Next == Seal on the last page). It
	// never writes a seal. Not with Seal.
	Close bool
}

// Validate checks the limits of the wire format; DecodeScanReq applies it.
func (m ScanReq) Validate() error {
	if !validNameFast(m.Topic) {
		return badf(TypeScanReq, "%v", ValidName("topic", m.Topic))
	}
	if m.From > m.To {
		return badf(TypeScanReq, "range [%d, %d) is reversed", m.From, m.To)
	}
	if m.Seal && m.Close {
		return badf(TypeScanReq, "a scan either seals or closes, not both")
	}
	return nil
}

// Budget returns the byte budget for a reply page to m on a server whose
// max payload is maxPayload: ScanPageBudget(maxPayload), lowered to
// MaxBytes when the reader asked for less.
func (m ScanReq) Budget(maxPayload int) int {
	b := ScanPageBudget(maxPayload)
	if m.MaxBytes != 0 && int64(m.MaxBytes) < int64(b) {
		b = int(m.MaxBytes)
	}
	return b
}

// Size returns the length of m's encoding.
func (m ScanReq) Size() int { return fixedScanReq + bytesLen(len(m.Topic)) }

// Append appends m's encoding to dst. It does not validate.
func (m ScanReq) Append(dst []byte) []byte {
	dst = grow(dst, m.Size())
	var flags byte
	if m.Seal {
		flags |= scanFlagSeal
	}
	if m.HeadersOnly {
		flags |= scanFlagHeaders
	}
	if m.Probe {
		flags |= scanFlagProbe
	}
	if m.Close {
		flags |= scanFlagClose
	}
	dst = append(dst, byte(TypeScanReq), WireVersion, flags)
	dst = binary.BigEndian.AppendUint32(dst, m.Partition)
	dst = binary.BigEndian.AppendUint64(dst, m.From)
	dst = binary.BigEndian.AppendUint64(dst, m.To)
	dst = binary.BigEndian.AppendUint32(dst, m.MaxBytes)
	return appendString(dst, m.Topic)
}

// Marshal returns m's encoding in a new slice of exactly Size bytes.
func (m ScanReq) Marshal() []byte { return m.Append(make([]byte, 0, m.Size())) }

// DecodeScanReq decodes a ScanReq.
func DecodeScanReq(b []byte) (ScanReq, error) {
	var m ScanReq
	r := reader{b: b, what: TypeScanReq}
	r.header()
	flags := r.u8("flags")
	if r.err == nil && flags&^scanFlagsKnown != 0 {
		r.fail("unknown flags %#02x", flags&^scanFlagsKnown)
	}
	m.Seal = flags&scanFlagSeal != 0
	m.HeadersOnly = flags&scanFlagHeaders != 0
	m.Probe = flags&scanFlagProbe != 0
	m.Close = flags&scanFlagClose != 0
	m.Partition = r.u32("partition")
	m.From = r.u64("from")
	m.To = r.u64("to")
	m.MaxBytes = r.u32("max bytes")
	m.Topic = string(r.bytes("topic", MaxTopicLen))
	r.end()
	if r.err != nil {
		return ScanReq{}, r.err
	}
	if err := m.Validate(); err != nil {
		return ScanReq{}, err
	}
	return m, nil
}

// --------------------------------------------------------------- ScanReply

// ScanEntry is one occupied slot in a scan reply.
type ScanEntry struct {
	Offset uint64
	Shard  []byte // the shard, or its header for a HeadersOnly scan; 1..MaxShard bytes
}

// ScanReply is one page of a node's answer to a ScanReq. Entries hold the
// occupied slots in [req.From, Next) in increasing offset order; the reader
// asks again from Next until Next == req.To (for a closing scan: until
// Next == Seal, the node's closed offset). Seal is the range's seal after
// this scan (for a closing scan: where the node closed it) and Birth the node's incarnation birth: offsets below Birth that
// repair has not filled are unknown, not empty (docs/design.md#slot-store).
type ScanReply struct {
	Status    Status
	NodeClock int64  // node's unix ns at reply
	Detail    string // short reason, at most MaxDetail bytes
	Seal      uint64 // the range seal after this scan; closing scans: the closed offset
	Birth     uint64 // node incarnation birth (unix ns)
	Next      uint64 // scan resumes here; == req.To when complete
	After     uint64 // with req.Probe, on the last page: first occupied offset >= req.To, 0 if none
	Entries   []ScanEntry
}

// Validate checks the limits of the wire format; DecodeScanReply applies
// it: status, detail and shard sizes, the entry count, strictly increasing
// offsets all below Next, and the 16 MiB message limit.
func (m ScanReply) Validate() error {
	if !m.Status.Valid() {
		return badf(TypeScanReply, "unknown status %d", uint8(m.Status))
	}
	if len(m.Detail) > MaxDetail {
		return badf(TypeScanReply, "detail of %d bytes exceeds %d", len(m.Detail), MaxDetail)
	}
	if len(m.Entries) > MaxScanEntries {
		return badf(TypeScanReply, "%d entries exceeds %d", len(m.Entries), MaxScanEntries)
	}
	size := fixedScanReply + bytesLen(len(m.Detail)) + uvarintLen(uint64(len(m.Entries)))
	for i, e := range m.Entries {
		if len(e.Shard) == 0 || len(e.Shard) > MaxShard {
			return badf(TypeScanReply, "entry %d (offset %d): shard of %d bytes: want 1..%d", i, e.Offset, len(e.Shard), MaxShard)
		}
		if i > 0 && e.Offset <= m.Entries[i-1].Offset {
			return badf(TypeScanReply, "entry %d: offset %d not above previous %d", i, e.Offset, m.Entries[i-1].Offset)
		}
		size += 8 + bytesLen(len(e.Shard))
	}
	if n := len(m.Entries); n > 0 && m.Entries[n-1].Offset >= m.Next {
		return badf(TypeScanReply, "next %d not above last entry offset %d", m.Next, m.Entries[n-1].Offset)
	}
	if size > MaxMessage {
		return badf(TypeScanReply, "%d bytes exceeds the %d-byte message limit", size, MaxMessage)
	}
	return nil
}

// Size returns the length of m's encoding.
func (m ScanReply) Size() int {
	n := fixedScanReply + bytesLen(len(m.Detail)) + uvarintLen(uint64(len(m.Entries)))
	for _, e := range m.Entries {
		n += ScanEntrySize(len(e.Shard))
	}
	return n
}

// Append appends m's encoding to dst. It does not validate.
func (m ScanReply) Append(dst []byte) []byte {
	dst = grow(dst, m.Size())
	dst = append(dst, byte(TypeScanReply), WireVersion, byte(m.Status))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.NodeClock))
	dst = binary.BigEndian.AppendUint64(dst, m.Seal)
	dst = binary.BigEndian.AppendUint64(dst, m.Birth)
	dst = binary.BigEndian.AppendUint64(dst, m.Next)
	dst = binary.BigEndian.AppendUint64(dst, m.After)
	dst = appendString(dst, m.Detail)
	dst = binary.AppendUvarint(dst, uint64(len(m.Entries)))
	for _, e := range m.Entries {
		dst = binary.BigEndian.AppendUint64(dst, e.Offset)
		dst = appendBytes(dst, e.Shard)
	}
	return dst
}

// Marshal returns m's encoding in a new slice of exactly Size bytes.
func (m ScanReply) Marshal() []byte { return m.Append(make([]byte, 0, m.Size())) }

// DecodeScanReply decodes a ScanReply; the entries' shards alias b. Entries
// is nil when the page is empty.
func DecodeScanReply(b []byte) (ScanReply, error) {
	var m ScanReply
	r := reader{b: b, what: TypeScanReply}
	r.header()
	m.Status = Status(r.u8("status"))
	m.NodeClock = int64(r.u64("node clock"))
	m.Seal = r.u64("seal")
	m.Birth = r.u64("birth")
	m.Next = r.u64("next")
	m.After = r.u64("after")
	m.Detail = string(r.bytes("detail", MaxDetail))
	count := r.uvarint("entry count", MaxScanEntries)
	if r.err == nil && count > uint64(len(r.b)/minScanEntryBytes) {
		r.fail("entry count %d cannot fit in the remaining %d bytes", count, len(r.b))
	}
	if r.err == nil && count > 0 {
		m.Entries = make([]ScanEntry, count)
		for i := range m.Entries {
			m.Entries[i].Offset = r.u64("entry offset")
			m.Entries[i].Shard = r.bytes("entry shard", MaxShard)
			if r.err != nil {
				r.err = fmt.Errorf("%w (entry %d of %d)", r.err, i, count)
				break
			}
		}
	}
	r.end()
	if r.err != nil {
		return ScanReply{}, r.err
	}
	if err := m.Validate(); err != nil {
		return ScanReply{}, err
	}
	return m, nil
}

// ------------------------------------------------------------------ reader

// reader consumes a message front to back with a sticky error: after the
// first failure every read returns zero and the error is kept.
type reader struct {
	b    []byte // what is left
	off  int    // bytes consumed, for error messages
	what MsgType
	err  error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s: %s at byte %d", ErrBadMessage, r.what, fmt.Sprintf(format, args...), r.off)
	}
}

func (r *reader) header() {
	t, err := PeekType(r.b)
	if err != nil {
		r.err = err
		return
	}
	if t != r.what {
		r.err = fmt.Errorf("%w: got a %s, want a %s", ErrBadMessage, t, r.what)
		return
	}
	r.b, r.off = r.b[2:], 2
}

func (r *reader) take(field string, n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail("truncated %s: need %d bytes, have %d", field, n, len(r.b))
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	r.off += n
	return p
}

func (r *reader) u8(field string) uint8 {
	if p := r.take(field, 1); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) u32(field string) uint32 {
	if p := r.take(field, 4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64(field string) uint64 {
	if p := r.take(field, 8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// uvarint reads a minimal uvarint no larger than limit.
func (r *reader) uvarint(field string, limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	switch {
	case n == 0:
		r.fail("truncated %s", field)
		return 0
	case n < 0:
		r.fail("%s overflows 64 bits", field)
		return 0
	case n != uvarintLen(v):
		r.fail("%s is a non-minimal varint", field)
		return 0
	case v > limit:
		r.fail("%s %d exceeds %d", field, v, limit)
		return 0
	}
	r.b = r.b[n:]
	r.off += n
	return v
}

// bytes reads a length-prefixed field of at most limit bytes. An empty field
// is returned as a nil slice.
func (r *reader) bytes(field string, limit int) []byte {
	n := r.uvarint(field+" length", uint64(limit))
	if r.err != nil || n == 0 {
		return nil
	}
	return r.take(field, int(n))
}

// end fails if bytes are left over.
func (r *reader) end() {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
}
