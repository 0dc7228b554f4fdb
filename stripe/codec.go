package stripe

import (
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/reedsolomon"
)

// ErrTooFewShards means fewer than k good shards of a stripe were given.
var ErrTooFewShards = errors.New("too few shards to decode")

// encoders caches one Reed-Solomon encoder per (k, m); they are safe for
// concurrent use and expensive to build.
var encoders sync.Map // [2]int -> reedsolomon.Encoder

func encoder(k, m int) (reedsolomon.Encoder, error) {
	key := [2]int{k, m}
	if e, ok := encoders.Load(key); ok {
		return e.(reedsolomon.Encoder), nil
	}
	e, err := reedsolomon.New(k, m)
	if err != nil {
		return nil, fmt.Errorf("reed-solomon k=%d m=%d: %w", k, m, err)
	}
	actual, _ := encoders.LoadOrStore(key, e)
	return actual.(reedsolomon.Encoder), nil
}

// Encode splits payload into k data shards plus n-k parity shards for the
// given stripe id and offset. All n shards share one backing buffer.
func Encode(id ID, offset uint64, n, k int, payload []byte) ([]Shard, error) {
	if len(payload) == 0 || len(payload) > MaxBatchBytes {
		return nil, fmt.Errorf("payload of %d bytes: must be 1..%d", len(payload), MaxBatchBytes)
	}
	buf := make([]byte, int(shardSize(len(payload), k))*n)
	copy(buf, payload)
	return encodeIn(id, offset, n, k, buf, len(payload))
}

// EncodeRecords is AppendBatch then Encode without the copy between them:
// the batch is encoded straight into the buffer the shards share. It
// returns the shards and the batch payload (which aliases the data
// shards; leave both alone).
func EncodeRecords(id ID, offset uint64, n, k int, recs []Record) ([]Shard, []byte, error) {
	plen := BatchSize(recs)
	if plen > MaxBatchBytes {
		return nil, nil, fmt.Errorf("batch of %d bytes exceeds limit %d", plen, MaxBatchBytes)
	}
	if k < 1 || n <= k {
		return nil, nil, fmt.Errorf("reed-solomon k=%d m=%d: bad shape", k, n-k)
	}
	buf := make([]byte, 0, int(shardSize(plen, k))*n)
	payload, err := AppendBatch(buf, recs)
	if err != nil {
		return nil, nil, err
	}
	if len(payload) != plen {
		return nil, nil, fmt.Errorf("batch encoded to %d bytes, sized %d", len(payload), plen) // a bug
	}
	shards, err := encodeIn(id, offset, n, k, buf[:cap(buf)], plen)
	return shards, payload, err
}

// encodeIn encodes the payload at the start of buf (plen bytes, the rest
// zero; len(buf) = n*shardSize) in place.
func encodeIn(id ID, offset uint64, n, k int, buf []byte, plen int) ([]Shard, error) {
	enc, err := encoder(k, n-k)
	if err != nil {
		return nil, err
	}
	payload := buf[:plen]
	size := len(buf) / n
	data := make([][]byte, n)
	for i := range data {
		data[i] = buf[i*size : (i+1)*size : (i+1)*size]
	}
	if err := enc.Encode(data); err != nil {
		return nil, fmt.Errorf("reed-solomon encode: %w", err)
	}
	pcrc := CRC(payload)
	shards := make([]Shard, n)
	for i := range shards {
		shards[i] = Shard{ShardHeader: ShardHeader{N: uint8(n), K: uint8(k), Index: uint8(i), ID: id, Offset: offset,
			PayloadLen: uint32(len(payload)), PayloadCRC: pcrc, DataLen: uint32(size), DataCRC: CRC(data[i])}, Data: data[i]}
	}
	return shards, nil
}

// Reshard returns a copy of the shards retargeted at another offset (a retry
// of the same stripe id elsewhere). Data is shared, not copied.
func Reshard(shards []Shard, offset uint64) []Shard {
	out := make([]Shard, len(shards))
	for i, s := range shards {
		s.Offset = offset
		out[i] = s
	}
	return out
}

// Decode rebuilds the payload from the shards of one stripe (indexed by
// shard index, nil or absent for missing). Every given shard must already
// have passed Parse and SameStripe. When all k data shards are present no
// Reed-Solomon work is done. The payload CRC is verified.
func Decode(shards []*Shard) ([]byte, error) {
	var ref *Shard
	for _, s := range shards {
		if s != nil {
			ref = s
			break
		}
	}
	if ref == nil {
		return nil, ErrTooFewShards
	}
	n, k := int(ref.N), int(ref.K)
	if len(shards) > n {
		return nil, fmt.Errorf("%w: %d shard slots for n=%d", ErrCorruptShard, len(shards), n)
	}
	data := make([][]byte, n)
	have, haveData := 0, 0
	for i, s := range shards {
		if s == nil {
			continue
		}
		if int(s.Index) != i || !s.SameStripe(&ref.ShardHeader) || len(s.Data) != int(ref.DataLen) {
			return nil, fmt.Errorf("%w: shard at %d does not belong with stripe %s", ErrCorruptShard, i, ref.ID)
		}
		data[i] = s.Data
		have++
		if i < k {
			haveData++
		}
	}
	if have < k {
		return nil, fmt.Errorf("%w: have %d of k=%d (stripe %s)", ErrTooFewShards, have, k, ref.ID)
	}
	if haveData < k {
		enc, err := encoder(k, n-k)
		if err != nil {
			return nil, err
		}
		if err := enc.ReconstructData(data); err != nil {
			return nil, fmt.Errorf("%w: reconstruct: %v", ErrCorruptShard, err)
		}
	}
	payload := make([]byte, 0, int(ref.DataLen)*k)
	for i := 0; i < k; i++ {
		payload = append(payload, data[i]...)
	}
	payload = payload[:ref.PayloadLen]
	if CRC(payload) != ref.PayloadCRC {
		return nil, fmt.Errorf("%w: payload CRC mismatch after decode (stripe %s)", ErrCorruptShard, ref.ID)
	}
	return payload, nil
}

// Rebuild reconstructs every missing shard of a stripe (for repair). The
// returned slice has all n shards.
func Rebuild(shards []*Shard) ([]Shard, error) {
	payload, err := Decode(shards)
	if err != nil {
		return nil, err
	}
	var ref *Shard
	for _, s := range shards {
		if s != nil {
			ref = s
			break
		}
	}
	return Encode(ref.ID, ref.Offset, int(ref.N), int(ref.K), payload)
}
