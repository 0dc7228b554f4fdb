// Package stripe encodes micro-batches into Reed-Solomon shards and back
// (docs/design.md#write-path step 3). It is pure: no clock, no I/O.
package stripe

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/raidq/raidq/stripe/quorum"
)

// ErrCorruptShard is wrapped by every shard decoding error, including CRC
// mismatches: callers treat such a shard as missing and report it.
var ErrCorruptShard = errors.New("corrupt shard")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC returns the CRC32C of b, the checksum used everywhere in raidq.
func CRC(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// ProducerID identifies one producer instance (random, 128 bits).
type ProducerID [16]byte

func (p ProducerID) String() string { return hex.EncodeToString(p[:]) }

// ID is a stripe id: the same on every retry of a batch, so consumers dedupe on it.
type ID struct {
	Producer ProducerID
	Seq      uint64
}

func (id ID) String() string { return fmt.Sprintf("%s-%d", id.Producer, id.Seq) }

// Flags on a shard.
const (
	// FlagRepair marks a shard rebuilt by repair rather than written by its producer.
	FlagRepair uint8 = 1 << 0
)

const (
	shardMagic0  = 'R'
	shardMagic1  = 'Q'
	shardVersion = 1
	// HeaderSize is the fixed size of a v1 shard header.
	HeaderSize = 60
	// MaxShardData bounds one shard's data (a full batch split over k>=1).
	MaxShardData = MaxBatchBytes
)

// ShardHeader is the fixed header every shard carries.
type ShardHeader struct {
	Flags      uint8
	N, K       uint8
	Index      uint8
	ID         ID
	Offset     uint64 // the slot offset the producer chose for this attempt
	PayloadLen uint32 // length of the whole batch payload
	PayloadCRC uint32 // CRC32C of the whole batch payload
	DataLen    uint32 // length of this shard's data
	DataCRC    uint32 // CRC32C of this shard's data
}

// Shard is a header plus its data.
type Shard struct {
	ShardHeader
	Data []byte
}

// Marshal returns the wire/disk form of the shard (header + CRC of header + data).
func (s *Shard) Marshal() []byte {
	return s.AppendTo(make([]byte, 0, s.Size()))
}

// Size is the length of the shard's marshalled form.
func (s *Shard) Size() int { return HeaderSize + len(s.Data) }

// AppendTo appends the marshalled shard to dst.
func (s *Shard) AppendTo(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, shardMagic0, shardMagic1, shardVersion, s.Flags, s.N, s.K, s.Index, 0)
	dst = append(dst, s.ID.Producer[:]...)
	dst = binary.BigEndian.AppendUint64(dst, s.ID.Seq)
	dst = binary.BigEndian.AppendUint64(dst, s.Offset)
	dst = binary.BigEndian.AppendUint32(dst, s.PayloadLen)
	dst = binary.BigEndian.AppendUint32(dst, s.PayloadCRC)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s.Data)))
	dst = binary.BigEndian.AppendUint32(dst, s.DataCRC)
	dst = binary.BigEndian.AppendUint32(dst, CRC(dst[start:]))
	return append(dst, s.Data...)
}

// ParseHeader decodes and checks a shard header (not the data).
func ParseHeader(b []byte) (ShardHeader, error) {
	var h ShardHeader
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: %d bytes, header needs %d", ErrCorruptShard, len(b), HeaderSize)
	}
	if b[0] != shardMagic0 || b[1] != shardMagic1 {
		return h, fmt.Errorf("%w: bad magic", ErrCorruptShard)
	}
	if b[2] != shardVersion {
		return h, fmt.Errorf("%w: unknown shard version %d", ErrCorruptShard, b[2])
	}
	if got, want := CRC(b[:HeaderSize-4]), binary.BigEndian.Uint32(b[HeaderSize-4:]); got != want {
		return h, fmt.Errorf("%w: header CRC %08x, want %08x", ErrCorruptShard, got, want)
	}
	h.Flags, h.N, h.K, h.Index = b[3], b[4], b[5], b[6]
	copy(h.ID.Producer[:], b[8:24])
	h.ID.Seq = binary.BigEndian.Uint64(b[24:])
	h.Offset = binary.BigEndian.Uint64(b[32:])
	h.PayloadLen = binary.BigEndian.Uint32(b[40:])
	h.PayloadCRC = binary.BigEndian.Uint32(b[44:])
	h.DataLen = binary.BigEndian.Uint32(b[48:])
	h.DataCRC = binary.BigEndian.Uint32(b[52:])
	return h, h.check()
}

func (h *ShardHeader) check() error {
	p := quorum.Params{N: int(h.N), K: int(h.K)}
	switch {
	case p.N < quorum.MinShards || p.N > quorum.MaxShards || p.K < 1 || p.K >= p.N:
		return fmt.Errorf("%w: bad shape n=%d k=%d", ErrCorruptShard, h.N, h.K)
	case h.Index >= h.N:
		return fmt.Errorf("%w: index %d >= n=%d", ErrCorruptShard, h.Index, h.N)
	case h.PayloadLen == 0 || h.PayloadLen > MaxBatchBytes:
		return fmt.Errorf("%w: payload length %d", ErrCorruptShard, h.PayloadLen)
	case h.DataLen != shardSize(int(h.PayloadLen), int(h.K)):
		return fmt.Errorf("%w: data length %d, want %d for payload %d over k=%d",
			ErrCorruptShard, h.DataLen, shardSize(int(h.PayloadLen), int(h.K)), h.PayloadLen, h.K)
	}
	return nil
}

// Parse decodes a marshalled shard and verifies both CRCs. Data aliases b.
func Parse(b []byte) (Shard, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Shard{}, err
	}
	data := b[HeaderSize:]
	if uint32(len(data)) != h.DataLen {
		return Shard{}, fmt.Errorf("%w: %d data bytes, header says %d", ErrCorruptShard, len(data), h.DataLen)
	}
	if got := CRC(data); got != h.DataCRC {
		return Shard{}, fmt.Errorf("%w: data CRC %08x, want %08x (stripe %s index %d)", ErrCorruptShard, got, h.DataCRC, h.ID, h.Index)
	}
	return Shard{ShardHeader: h, Data: data}, nil
}

// SameStripe reports whether two headers are shards of one encoding: same
// stripe id, shape and payload checksum. Readers group by this.
func (h *ShardHeader) SameStripe(o *ShardHeader) bool {
	return h.ID == o.ID && h.N == o.N && h.K == o.K && h.PayloadLen == o.PayloadLen && h.PayloadCRC == o.PayloadCRC
}

// shardSize is ceil(payload/k), at least 1: the size every shard of the stripe has.
func shardSize(payload, k int) uint32 {
	if payload <= 0 {
		return 0
	}
	return uint32((payload + k - 1) / k)
}
