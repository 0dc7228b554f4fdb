package bus

import (
	"encoding/binary"
	"fmt"
)

// InDoubtReport is what a reader publishes on Subjects.InDoubt when it
// skipped an offset as in doubt (docs/design.md#read-path): the offset and the stripe it
// could not decode there. The repair loops of the partition's nodes keep
// it and re-append the stripe at a fresh offset once it proves decodable,
// so it is delivered late rather than lost. The stripe id travels as its
// two parts (producer id, sequence); bus does not know the stripe package.
//
// Encoding (version 1): version u8 | partition u32 | offset u64 |
// producer [16]byte | seq u64 | topic bytes | to bytes (bytes: uvarint
// length + bytes).
type InDoubtReport struct {
	Topic     string
	Partition uint32
	Offset    uint64
	Producer  [16]byte
	Seq       uint64
	// To, when set, names the one node the report is for: a node hands a
	// report to the node that must re-append the stripe (which may have
	// been down when the reader published it). Empty: every node.
	To string
}

const inDoubtVersion = 1

// Marshal encodes r.
func (r InDoubtReport) Marshal() []byte {
	b := make([]byte, 0, 1+4+8+16+8+bytesLen(len(r.Topic))+bytesLen(len(r.To)))
	b = append(b, inDoubtVersion)
	b = binary.BigEndian.AppendUint32(b, r.Partition)
	b = binary.BigEndian.AppendUint64(b, r.Offset)
	b = append(b, r.Producer[:]...)
	b = binary.BigEndian.AppendUint64(b, r.Seq)
	b = appendString(b, r.Topic)
	return appendString(b, r.To)
}

// DecodeInDoubt decodes an InDoubtReport; errors wrap ErrBadMessage.
func DecodeInDoubt(b []byte) (InDoubtReport, error) {
	var r InDoubtReport
	if len(b) < 1+4+8+16+8+2 {
		return r, fmt.Errorf("%w: in-doubt report of %d bytes", ErrBadMessage, len(b))
	}
	if b[0] != inDoubtVersion {
		return r, fmt.Errorf("%w: in-doubt report version %d", ErrBadMessage, b[0])
	}
	r.Partition = binary.BigEndian.Uint32(b[1:])
	r.Offset = binary.BigEndian.Uint64(b[5:])
	copy(r.Producer[:], b[13:29])
	r.Seq = binary.BigEndian.Uint64(b[29:])
	rd := reader{b: b[37:], what: TypeScanReq}
	r.Topic = string(rd.bytes("topic", MaxTopicLen))
	r.To = string(rd.bytes("to", MaxNameLen))
	rd.end()
	switch {
	case rd.err != nil:
		return InDoubtReport{}, fmt.Errorf("%w: in-doubt report: %v", ErrBadMessage, rd.err)
	case !validNameFast(r.Topic):
		return InDoubtReport{}, fmt.Errorf("%w: in-doubt report: bad topic %q", ErrBadMessage, r.Topic)
	case r.To != "" && !validNameFast(r.To):
		return InDoubtReport{}, fmt.Errorf("%w: in-doubt report: bad node %q", ErrBadMessage, r.To)
	}
	return r, nil
}
