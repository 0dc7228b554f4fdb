package kafkawire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Java clients frame snappy the xerial way (snappy-java's
// SnappyOutputStream): a 16-byte header — this magic, then version and
// minimum compatible version, both 1 — then chunks, each a big-endian
// int32 length and a raw snappy block. Other clients (franz-go, librdkafka)
// may send one raw snappy block. Both decode; AppendBatch writes xerial,
// which every Kafka consumer reads.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const (
	xerialHeaderLen = 16
	// xerialChunk is snappy-java's default block size.
	xerialChunk = 32 << 10
)

// decompress returns the records of a batch compressed with c, refusing
// (ErrTooLarge) more than limit bytes before producing them all: each
// codec stops at limit+1 bytes, or knows the size up front (snappy, zstd
// with a content size). An undecodable payload is ErrCorruptBatch.
func decompress(c Codec, src []byte, limit int) ([]byte, error) {
	var out []byte
	var err error
	switch c {
	case NoCompression:
		out = src
	case Gzip:
		out, err = ungzip(src, limit)
	case Snappy:
		out, err = unsnappy(src, limit)
	case LZ4:
		out, err = unlz4(src, limit)
	case Zstd:
		out, err = unzstd(src, limit)
	}
	switch {
	case errors.Is(err, ErrTooLarge):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %w", ErrCorruptBatch, c, err)
	case len(out) > limit:
		return nil, tooLarge(c, limit)
	}
	return out, nil
}

func tooLarge(c Codec, limit int) error {
	return fmt.Errorf("%w: %s records past the %d-byte limit", ErrTooLarge, c, limit)
}

// readLimited reads r to its end, stopping (ErrTooLarge) past limit bytes;
// the buffer grows as bytes arrive, from hint.
func readLimited(c Codec, r io.Reader, limit, hint int) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(min(hint, limit+1))
	if _, err := buf.ReadFrom(io.LimitReader(r, int64(limit)+1)); err != nil {
		return nil, err
	}
	if buf.Len() > limit {
		return nil, tooLarge(c, limit)
	}
	return buf.Bytes(), nil
}

var gzipReaders sync.Pool // *gzip.Reader

func ungzip(src []byte, limit int) ([]byte, error) {
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(src))
	} else {
		err = zr.Reset(bytes.NewReader(src))
	}
	if err != nil {
		return nil, err
	}
	defer gzipReaders.Put(zr)
	return readLimited(Gzip, zr, limit, 4*len(src))
}

// unsnappy decodes raw or xerial-framed snappy; snappy states each block's
// decoded size up front, so the limit is checked before decoding.
func unsnappy(src []byte, limit int) ([]byte, error) {
	if !bytes.HasPrefix(src, xerialMagic) {
		n, err := snappy.DecodedLen(src)
		if err != nil {
			return nil, err
		}
		if n > limit {
			return nil, tooLarge(Snappy, limit)
		}
		return snappy.Decode(nil, src)
	}
	if len(src) < xerialHeaderLen {
		return nil, errors.New("short xerial header")
	}
	chunks := src[xerialHeaderLen:]
	total, err := xerialSize(chunks, limit)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, total)
	for len(chunks) > 0 {
		n := int(binary.BigEndian.Uint32(chunks))
		block := chunks[4 : 4+n]
		chunks = chunks[4+n:]
		d, err := snappy.Decode(out[len(out):cap(out)], block)
		if err != nil {
			return nil, err
		}
		out = out[:len(out)+len(d)]
	}
	return out, nil
}

// xerialSize checks the framing of xerial chunks and returns their decoded
// size, refusing more than limit.
func xerialSize(chunks []byte, limit int) (int, error) {
	total := 0
	for len(chunks) > 0 {
		if len(chunks) < 4 {
			return 0, errors.New("short xerial chunk length")
		}
		n := binary.BigEndian.Uint32(chunks)
		if uint64(n) > uint64(len(chunks)-4) {
			return 0, fmt.Errorf("xerial chunk of %d bytes, %d left", n, len(chunks)-4)
		}
		d, err := snappy.DecodedLen(chunks[4 : 4+n])
		if err != nil {
			return 0, err
		}
		if total += d; total > limit {
			return 0, tooLarge(Snappy, limit)
		}
		chunks = chunks[4+n:]
	}
	return total, nil
}

var lz4Readers = sync.Pool{New: func() any { return lz4.NewReader(nil) }}

// unlz4 decodes an LZ4 frame (the format of record batch v2; magic 0/1's
// broken header checksum does not arise here).
func unlz4(src []byte, limit int) ([]byte, error) {
	zr := lz4Readers.Get().(*lz4.Reader)
	defer lz4Readers.Put(zr)
	zr.Reset(bytes.NewReader(src))
	return readLimited(LZ4, zr, limit, 4*len(src))
}

// zstdDecoders hold synchronous decoders (concurrency 1: no goroutines, so
// a pooled one dropped by the GC leaks nothing).
var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		panic(fmt.Sprintf("kafkawire: zstd decoder: %v", err)) // fixed options: a bug
	}
	return d
}}

// unzstd decodes zstd frames in memory. WithDecoderMaxMemory caps the
// output (a frame's stated content size is checked before allocating) and
// the window a frame may declare: frames declaring a window above limit
// (zstd levels 20+ by streaming encoders) are refused too.
func unzstd(src []byte, limit int) ([]byte, error) {
	d := zstdDecoders.Get().(*zstd.Decoder)
	defer zstdDecoders.Put(d)
	if err := d.ResetWithOptions(nil, zstd.WithDecoderMaxMemory(uint64(limit)+1)); err != nil {
		return nil, err
	}
	out, err := d.DecodeAll(src, nil)
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return nil, fmt.Errorf("%w: zstd: %w (limit %d bytes)", ErrTooLarge, err, limit)
	}
	return out, err
}

// compress returns src compressed with c (not NoCompression).
func compress(c Codec, src []byte) ([]byte, error) {
	switch c {
	case Gzip:
		return gzipBytes(src)
	case Snappy:
		return xerialBytes(src), nil
	case LZ4:
		return lz4Bytes(src)
	case Zstd:
		return zstdEncoder().EncodeAll(src, nil), nil
	}
	return nil, fmt.Errorf("%w: codec %d", ErrBadSpec, c)
}

var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

func gzipBytes(src []byte) ([]byte, error) {
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	return writeAll(zw, src)
}

// resetWriter is a pooled compressing writer (gzip, lz4).
type resetWriter interface {
	Reset(io.Writer)
	Write([]byte) (int, error)
	Close() error
}

// writeAll compresses src with w into a new buffer.
func writeAll(w resetWriter, src []byte) ([]byte, error) {
	var buf bytes.Buffer
	w.Reset(&buf)
	if _, err := w.Write(src); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// xerialBytes frames src as xerial snappy chunks.
func xerialBytes(src []byte) []byte {
	out := make([]byte, 0, xerialHeaderLen+snappy.MaxEncodedLen(len(src))+4*(len(src)/xerialChunk+1))
	out = append(out, xerialMagic...)
	out = binary.BigEndian.AppendUint32(out, 1) // version
	out = binary.BigEndian.AppendUint32(out, 1) // minimum compatible version
	for len(src) > 0 {
		chunk := src[:min(len(src), xerialChunk)]
		src = src[len(chunk):]
		at := len(out)
		out = append(out, 0, 0, 0, 0)
		block := snappy.Encode(out[len(out):cap(out)], chunk)
		binary.BigEndian.PutUint32(out[at:], uint32(len(block)))
		out = out[:len(out)+len(block)]
	}
	return out
}

// lz4Writers use 64 KiB blocks, the block size Kafka's Java client writes
// (every consumer reads it), and compress synchronously.
var lz4Writers = sync.Pool{New: func() any {
	w := lz4.NewWriter(nil)
	if err := w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ConcurrencyOption(1)); err != nil {
		panic(fmt.Sprintf("kafkawire: lz4 writer: %v", err)) // fixed options: a bug
	}
	return w
}}

func lz4Bytes(src []byte) ([]byte, error) {
	zw := lz4Writers.Get().(*lz4.Writer)
	defer lz4Writers.Put(zw)
	return writeAll(zw, src)
}

// zstdEncoder is shared: EncodeAll is safe for concurrent use (up to
// GOMAXPROCS at once) and starts no goroutines.
var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil)
	if err != nil {
		panic(fmt.Sprintf("kafkawire: zstd encoder: %v", err)) // fixed options: a bug
	}
	return e
})
