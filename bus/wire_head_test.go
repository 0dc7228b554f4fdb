package bus

import (
	"bytes"
	"testing"
)

// TestWriteReqAppendHead: the head plus the shard is byte for byte the
// whole request, for shard lengths around the varint boundaries.
func TestWriteReqAppendHead(t *testing.T) {
	for _, n := range []int{1, 127, 128, 16383, 16384, 70000} {
		shard := bytes.Repeat([]byte{0xab}, n)
		m := WriteReq{Topic: "orders", Partition: 7, Offset: 1 << 62, Repair: n%2 == 0, Shard: shard}
		head := m.AppendHead([]byte("x"), n)
		if len(head)-1 != m.HeadSize(n) {
			t.Fatalf("shard %d: head is %d bytes, HeadSize says %d", n, len(head)-1, m.HeadSize(n))
		}
		if got, want := append(head, shard...), append([]byte("x"), m.Marshal()...); !bytes.Equal(got, want) {
			t.Fatalf("shard %d: head+shard differs from Marshal", n)
		}
	}
}
