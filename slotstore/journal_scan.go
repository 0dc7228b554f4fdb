package slotstore

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/syndtr/goleveldb/leveldb/util"
)

// The LevelDB journal ("log") format, which scanJournal parses itself:
// the file is a sequence of 32 KiB blocks (the last may be shorter); a
// block holds chunks, each a 7-byte header (masked crc32c of type+payload:
// 4 bytes, payload length: 2, type: 1) and its payload; a chunk never
// crosses a block, and fewer than 7 bytes left at a block's end are zero
// padding. A record is one full chunk, or a first chunk, middle chunks and
// a last chunk, in that order, in consecutive blocks.
const (
	jBlock  = 32 << 10
	jHeader = 7

	jFull   = 1
	jFirst  = 2
	jMiddle = 3
	jLast   = 4
)

// journalScan is what scanJournal found. Damage is the first place where
// the journal stops being a clean sequence of records: a torn last record,
// the zeros of a pre-allocated journal's tail, or real damage. It is a
// tail (accepted) only if no complete record follows it (Intact == 0).
type journalScan struct {
	Records  int    // complete records before the damage
	Damaged  bool   // the journal does not end cleanly after Records
	At       int64  // file offset of the damage
	Reason   string // what is wrong there
	Intact   int    // complete records that begin after the damage
	IntactAt int64  // file offset of the first of them
}

// Refused reports whether the damage is followed by intact records: those
// were written (and, with fsync, acknowledged) after the damaged bytes,
// so the damage is not a torn tail.
func (s journalScan) Refused() bool { return s.Intact > 0 }

// scanJournal parses a journal strictly (see the format above).
//
// Why not goleveldb's journal.Reader: on a damaged chunk it drops the rest
// of the block, so damage followed by intact records in the same block (in
// the last block of a journal, or in the last block holding data before a
// pre-allocated journal's zeros) looked like a torn tail, and the records
// dropped with it were acknowledged. After damage this scanner looks at
// every byte offset of the block for a valid chunk (type, length inside the
// block, checksum) and goes on parsing from there, so any complete record
// after the damage is counted. Zeros are never a valid chunk (type 0), so
// a zero tail is a tail. Chunks after the damage that continue a record
// begun before it (middle, last) do not count: they belong to the torn
// record. Any input is safe: nothing is trusted before it is checked.
func scanJournal(r io.Reader) (journalScan, error) {
	var (
		sc  journalScanner
		buf = make([]byte, jBlock)
	)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			sc.block(buf[:n])
		}
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return sc.s, err
		}
	}
	if sc.inRec {
		sc.damage(sc.recAt, "last record incomplete")
	}
	return sc.s, nil
}

type journalScanner struct {
	s     journalScan
	off   int64 // file offset of the block being parsed
	inRec bool  // a first chunk was seen and its last is still to come
	recAt int64 // file offset of that first chunk
}

// damage records the first damage and abandons the record in progress.
func (sc *journalScanner) damage(at int64, reason string) {
	if !sc.s.Damaged {
		sc.s.Damaged, sc.s.At, sc.s.Reason = true, at, reason
	}
	sc.inRec = false
}

// complete counts a complete record that began at at.
func (sc *journalScanner) complete(at int64) {
	if !sc.s.Damaged {
		sc.s.Records++
		return
	}
	if sc.s.Intact == 0 {
		sc.s.IntactAt = at
	}
	sc.s.Intact++
}

// block parses one block b at file offset sc.off.
func (sc *journalScanner) block(b []byte) {
	for pos := 0; pos+jHeader <= len(b); {
		typ, length, reason := chunkAt(b, pos)
		if reason != "" {
			sc.damage(sc.off+int64(pos), reason)
			if pos = resync(b, pos+1); pos < 0 {
				break
			}
			continue
		}
		sc.chunk(sc.off+int64(pos), typ)
		pos += jHeader + length
	}
	sc.off += int64(len(b))
}

// chunk follows the record state through one valid chunk at offset at.
func (sc *journalScanner) chunk(at int64, typ byte) {
	switch typ {
	case jFull, jFirst:
		if sc.inRec {
			sc.damage(sc.recAt, "record cut short: a new record starts before its last chunk")
		}
		if typ == jFull {
			sc.complete(at)
			return
		}
		sc.inRec, sc.recAt = true, at
	case jMiddle, jLast:
		if !sc.inRec {
			sc.damage(at, "orphan chunk: the start of its record is missing")
			return
		}
		if typ == jLast {
			sc.inRec = false
			sc.complete(sc.recAt)
		}
	}
}

// chunkAt checks the chunk whose header is at b[pos:] (pos+jHeader <=
// len(b)): its type and length, or why it is not a valid chunk.
func chunkAt(b []byte, pos int) (typ byte, length int, reason string) {
	h := b[pos : pos+jHeader]
	typ, length = h[6], int(binary.LittleEndian.Uint16(h[4:6]))
	switch {
	case typ == 0 && length == 0 && binary.LittleEndian.Uint32(h) == 0:
		return 0, 0, "zero header (zeros, not a record)"
	case typ < jFull || typ > jLast:
		return 0, 0, "invalid chunk type"
	case pos+jHeader+length > len(b):
		return 0, 0, "chunk length overflows the block (or the file)"
	case binary.LittleEndian.Uint32(h) != util.NewCRC(b[pos+6:pos+jHeader+length]).Value():
		return 0, 0, "checksum mismatch"
	}
	return typ, length, ""
}

// resync returns the first offset at or after from where a valid chunk
// starts in b, or -1.
func resync(b []byte, from int) int {
	for q := from; q+jHeader <= len(b); q++ {
		if t := b[q+6]; t < jFull || t > jLast {
			continue // cheap filter: zeros and most garbage stop here
		}
		if _, _, reason := chunkAt(b, q); reason == "" {
			return q
		}
	}
	return -1
}
