package bus

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/quick"
)

// message is what every wire type has in common.
type message interface {
	Marshal() []byte
	Append([]byte) []byte
	Size() int
	Validate() error
}

// decodeAny decodes b as the message type of want.
func decodeAny(want message, b []byte) (message, error) {
	switch want.(type) {
	case WriteReq:
		return DecodeWriteReq(b)
	case WriteReply:
		return DecodeWriteReply(b)
	case ScanReq:
		return DecodeScanReq(b)
	case ScanReply:
		return DecodeScanReply(b)
	}
	panic("unknown type")
}

func sampleMessages() []message {
	return []message{
		WriteReq{Topic: "t", Shard: []byte{1}},
		WriteReq{Topic: strings.Repeat("T", MaxTopicLen), Partition: math.MaxUint32, Offset: math.MaxUint64, Repair: true, Shard: bytes.Repeat([]byte{7}, 300)},
		WriteReply{Status: StatusOK},
		WriteReply{Status: StatusClockAhead, NodeClock: -1, Detail: "offset 5ns beyond now+F"},
		WriteReply{Status: StatusWrongNode, NodeClock: math.MaxInt64, Detail: strings.Repeat("d", MaxDetail)},
		ScanReq{Topic: "orders", Partition: 3, From: 10, To: 20},
		ScanReq{Topic: "o", From: 5, To: 5, MaxBytes: math.MaxUint32, Seal: true, HeadersOnly: true},
		ScanReq{Topic: "o", Seal: true, To: math.MaxUint64},
		ScanReq{Topic: "o", From: 1, To: 9, Close: true, Probe: true},
		ScanReply{Status: StatusOK, Next: 100},
		ScanReply{Status: StatusUnknown, NodeClock: 42, Detail: "born at 7", Seal: 9, Birth: 7, Next: 10},
		ScanReply{Status: StatusOK, NodeClock: 1, Seal: 50, Birth: 1, Next: 51, Entries: []ScanEntry{
			{Offset: 0, Shard: []byte{1}}, {Offset: 10, Shard: bytes.Repeat([]byte{2}, 200)}, {Offset: 50, Shard: []byte("xyz")}}},
	}
}

func checkRoundTrip(t *testing.T, m message) {
	t.Helper()
	if err := m.Validate(); err != nil {
		t.Fatalf("%#v: Validate: %v", m, err)
	}
	b := m.Marshal()
	if len(b) != m.Size() || cap(b) != m.Size() {
		t.Fatalf("%T: Marshal gave len %d cap %d, Size %d", m, len(b), cap(b), m.Size())
	}
	if a := m.Append([]byte("pre")); !bytes.Equal(a, append([]byte("pre"), b...)) {
		t.Fatalf("%T: Append differs from Marshal", m)
	}
	got, err := decodeAny(m, b)
	if err != nil {
		t.Fatalf("%T: decode: %v", m, err)
	}
	if !reflect.DeepEqual(normalize(got), normalize(m)) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, m)
	}
	if b2 := got.Marshal(); !bytes.Equal(b, b2) {
		t.Fatalf("%T: re-encoding differs", m)
	}
}

// normalize maps empty entry lists to nil, the one difference a round trip may make.
func normalize(m message) message {
	if r, ok := m.(ScanReply); ok && len(r.Entries) == 0 {
		r.Entries = nil
		return r
	}
	return m
}

func TestWireRoundTripTable(t *testing.T) {
	for _, m := range sampleMessages() {
		checkRoundTrip(t, m)
	}
}

func randBytes(r *rand.Rand, max int) []byte {
	b := make([]byte, 1+r.IntN(max))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randName(r *rand.Rand) string {
	const alpha = "abcXYZ019_-"
	b := make([]byte, 1+r.IntN(MaxNameLen))
	for i := range b {
		b[i] = alpha[r.IntN(len(alpha))]
	}
	return string(b)
}

func randDetail(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return ""
	}
	return string(randBytes(r, MaxDetail))
}

func randMessage(r *rand.Rand) message {
	switch r.IntN(4) {
	case 0:
		return WriteReq{Topic: randName(r), Partition: r.Uint32(), Offset: r.Uint64(), Repair: r.IntN(2) == 0, Shard: randBytes(r, 5000)}
	case 1:
		return WriteReply{Status: Status(1 + r.IntN(int(statusEnd-1))), NodeClock: r.Int64() - r.Int64(), Detail: randDetail(r)}
	case 2:
		from := r.Uint64()
		seal := r.IntN(2) == 0
		return ScanReq{Topic: randName(r), Partition: r.Uint32(), From: from, To: from + r.Uint64N(math.MaxUint64-from+1),
			MaxBytes: r.Uint32(), Seal: seal, Close: !seal && r.IntN(2) == 0, HeadersOnly: r.IntN(2) == 0}
	}
	m := ScanReply{Status: Status(1 + r.IntN(int(statusEnd-1))), NodeClock: r.Int64(), Detail: randDetail(r),
		Seal: r.Uint64(), Birth: r.Uint64()}
	off := r.Uint64N(1 << 62)
	for range r.IntN(40) {
		m.Entries = append(m.Entries, ScanEntry{Offset: off, Shard: randBytes(r, 2000)})
		off += 1 + r.Uint64N(1<<40)
	}
	m.Next = off + r.Uint64N(1<<20)
	return m
}

func TestWireRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		checkRoundTrip(t, randMessage(r))
	}
}

// TestWireRoundTripQuick lets testing/quick pick the raw fields and clamps
// them to what the wire format allows.
func TestWireRoundTripQuick(t *testing.T) {
	clampName := func(s string) string {
		b := []byte(s)
		for i := range b {
			if !nameByte(b[i]) {
				b[i] = '_'
			}
		}
		if len(b) == 0 {
			return "t"
		}
		return string(b[:min(len(b), MaxNameLen)])
	}
	clampDetail := func(s string) string { return s[:min(len(s), MaxDetail)] }
	shard := func(b []byte) []byte { return append(b, 0) }
	status := func(s uint8) Status { return Status(1 + s%uint8(statusEnd-1)) }

	cfg := &quick.Config{MaxCount: 500}
	if err := quick.Check(func(topic string, p uint32, off uint64, rep bool, sh []byte) bool {
		m := WriteReq{Topic: clampName(topic), Partition: p, Offset: off, Repair: rep, Shard: shard(sh)}
		got, err := DecodeWriteReq(m.Marshal())
		return err == nil && reflect.DeepEqual(got, m)
	}, cfg); err != nil {
		t.Error("WriteReq:", err)
	}
	if err := quick.Check(func(s uint8, clock int64, detail string) bool {
		m := WriteReply{Status: status(s), NodeClock: clock, Detail: clampDetail(detail)}
		got, err := DecodeWriteReply(m.Marshal())
		return err == nil && got == m
	}, cfg); err != nil {
		t.Error("WriteReply:", err)
	}
	if err := quick.Check(func(topic string, p uint32, a, b uint64, mb uint32, seal, hdr bool) bool {
		m := ScanReq{Topic: clampName(topic), Partition: p, From: min(a, b), To: max(a, b), MaxBytes: mb, Seal: seal, HeadersOnly: hdr}
		got, err := DecodeScanReq(m.Marshal())
		return err == nil && got == m
	}, cfg); err != nil {
		t.Error("ScanReq:", err)
	}
	if err := quick.Check(func(s uint8, clock int64, detail string, seal, birth uint64, gaps []uint32, shards [][]byte) bool {
		m := ScanReply{Status: status(s), NodeClock: clock, Detail: clampDetail(detail), Seal: seal, Birth: birth}
		off := uint64(0)
		for i, g := range gaps {
			off += uint64(g) + 1
			var sh []byte
			if i < len(shards) {
				sh = shards[i]
			}
			m.Entries = append(m.Entries, ScanEntry{Offset: off, Shard: shard(sh)})
		}
		m.Next = off + 1
		got, err := DecodeScanReply(m.Marshal())
		return err == nil && reflect.DeepEqual(normalize(got), normalize(m))
	}, cfg); err != nil {
		t.Error("ScanReply:", err)
	}
}

func TestStatusString(t *testing.T) {
	want := map[Status]string{StatusOK: "OK", StatusConflict: "CONFLICT", StatusSealed: "SEALED",
		StatusClockAhead: "CLOCK_AHEAD", StatusBadRequest: "BAD_REQUEST", StatusStoreError: "STORE_ERROR",
		StatusBusy: "BUSY", StatusUnknown: "UNKNOWN", StatusWrongNode: "WRONG_NODE", StatusClockOff: "CLOCK_OFF", 0: "Status(0)", 200: "Status(200)"}
	for s, w := range want {
		if s.String() != w {
			t.Errorf("Status(%d).String() = %q, want %q", uint8(s), s.String(), w)
		}
	}
	if StatusWrongNode != 9 || StatusClockOff != 10 || StatusOK != 1 {
		t.Fatal("status values are wire format: do not renumber")
	}
}

func TestTruncDetail(t *testing.T) {
	if got := TruncDetail("short"); got != "short" {
		t.Fatal(got)
	}
	s := strings.Repeat("é", 200) // 400 bytes, 2 per rune
	got := TruncDetail("x" + s)
	if len(got) > MaxDetail || len(got) < MaxDetail-1 || !strings.HasPrefix("x"+s, got) {
		t.Fatalf("TruncDetail: %d bytes", len(got))
	}
	if got[len(got)-1] == 0xc3 {
		t.Fatal("cut inside a rune")
	}
}

func expectBad(t *testing.T, what string, err error, substr string) {
	t.Helper()
	if !errors.Is(err, ErrBadMessage) {
		t.Errorf("%s: err = %v, want ErrBadMessage", what, err)
		return
	}
	if !strings.Contains(err.Error(), substr) {
		t.Errorf("%s: err = %q, want it to mention %q", what, err, substr)
	}
}

func TestDecodeRejectsTruncationTrailingVersionType(t *testing.T) {
	for _, m := range sampleMessages() {
		b := m.Marshal()
		for i := range len(b) {
			_, err := decodeAny(m, b[:i])
			expectBad(t, "truncated", err, "")
		}
		_, err := decodeAny(m, append(b[:len(b):len(b)], 0))
		expectBad(t, "trailing", err, "trailing")
		bv := bytes.Clone(b)
		bv[1] = 2
		_, err = decodeAny(m, bv)
		expectBad(t, "version", err, "unsupported version 2")
		for _, other := range sampleMessages() {
			if reflect.TypeOf(other) != reflect.TypeOf(m) {
				_, err = decodeAny(other, b)
				expectBad(t, "wrong type", err, "want a")
			}
		}
	}
	_, err := DecodeRequest(nil)
	expectBad(t, "nil", err, "header")
	_, err = DecodeRequest([]byte{9, 1})
	expectBad(t, "type 9", err, "unknown message type 9")
	_, err = DecodeRequest(WriteReply{Status: StatusOK}.Marshal())
	expectBad(t, "reply as request", err, "not a request")
	_, err = DecodeScanReq(ScanReq{Topic: "t", To: 1, Seal: true, Close: true}.Marshal())
	expectBad(t, "seal and close", err, "seals or closes")
	big := make([]byte, MaxMessage+1)
	big[0], big[1] = byte(TypeScanReply), WireVersion
	_, err = DecodeScanReply(big)
	expectBad(t, "oversized", err, "message limit")
}

func TestDecodeRequest(t *testing.T) {
	w := WriteReq{Topic: "t", Partition: 1, Offset: 2, Shard: []byte("s")}
	s := ScanReq{Topic: "t", From: 1, To: 2}
	for _, m := range []message{w, s} {
		got, err := DecodeRequest(m.Marshal())
		if err != nil || !reflect.DeepEqual(got, any(m)) {
			t.Errorf("DecodeRequest(%#v) = %#v, %v", m, got, err)
		}
	}
}

func TestDecodeAliasesInputCapped(t *testing.T) {
	b := WriteReq{Topic: "t", Shard: []byte("abc")}.Marshal()
	b = append(b[:len(b):len(b)], ScanReply{Status: StatusOK}.Marshal()...)[:len(b)]
	m, err := DecodeWriteReq(b)
	if err != nil {
		t.Fatal(err)
	}
	if cap(m.Shard) != len(m.Shard) {
		t.Fatalf("shard cap %d > len %d: appends would clobber the input", cap(m.Shard), len(m.Shard))
	}
	b[len(b)-1] = 'X'
	if string(m.Shard) != "abX" {
		t.Fatalf("shard %q does not alias the input", m.Shard)
	}
}

// hand builds raw messages for the rejection table.
type hand []byte

func (h hand) u8(v byte) hand     { return append(h, v) }
func (h hand) u32(v uint32) hand  { return binary.BigEndian.AppendUint32(h, v) }
func (h hand) u64(v uint64) hand  { return binary.BigEndian.AppendUint64(h, v) }
func (h hand) uv(v uint64) hand   { return binary.AppendUvarint(h, v) }
func (h hand) raw(b ...byte) hand { return append(h, b...) }
func (h hand) str(s string) hand  { return append(h.uv(uint64(len(s))), s...) }
func (h hand) zeros(n int) hand   { return append(h, make([]byte, n)...) }
func scanReplyHead(status byte) hand {
	return hand{4, 1}.u8(status).u64(0).u64(0).u64(0).u64(100).u64(0)
}

func TestDecodeRejectsBadFields(t *testing.T) {
	wr := func(flags byte) hand { return hand{1, 1}.u8(flags).u32(0).u64(0) }
	sr := func(flags byte) hand { return hand{3, 1}.u8(flags).u32(0) }
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"write ok baseline", wr(0).str("t").str("s"), ""},
		{"write unknown flag", wr(2).str("t").str("s"), "unknown flags 0x02"},
		{"write empty topic", wr(0).str("").str("s"), "topic name is empty"},
		{"write dotted topic", wr(0).str("a.b").str("s"), "'.'"},
		{"write long topic", wr(0).str(strings.Repeat("t", 129)).str("s"), "topic length 129 exceeds 128"},
		{"write empty shard", wr(0).str("t").uv(0), "shard of 0 bytes"},
		{"write huge shard", wr(0).str("t").uv(MaxShard + 1), "shard length 8388609 exceeds 8388608"},
		{"write shard past end", wr(0).str("t").uv(5).raw(1, 2), "truncated shard: need 5 bytes, have 2"},
		{"write non-minimal varint", wr(0).raw(0x81, 0x00).raw('t').str("s"), "non-minimal"},
		{"write varint overflow", wr(0).raw(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), "overflows"},
		{"write reply bad status 0", hand{2, 1}.u8(0).u64(0).uv(0), "unknown status 0"},
		{"write reply bad status 11", hand{2, 1}.u8(11).u64(0).uv(0), "unknown status 11"},
		{"write reply long detail", hand{2, 1}.u8(1).u64(0).str(strings.Repeat("d", 257)), "detail length 257 exceeds 256"},
		{"scan ok baseline", sr(3).u64(1).u64(2).u32(0).str("t"), ""},
		{"scan unknown flag", sr(16).u64(1).u64(2).u32(0).str("t"), "unknown flags 0x10"},
		{"scan reversed", sr(0).u64(3).u64(2).u32(0).str("t"), "range [3, 2) is reversed"},
		{"scan reply ok baseline", scanReplyHead(1).uv(0).uv(1).u64(5).str("s"), ""},
		{"scan reply too many entries", scanReplyHead(1).uv(0).uv(MaxScanEntries + 1), "entry count 65537 exceeds 65536"},
		{"scan reply count past end", scanReplyHead(1).uv(0).uv(MaxScanEntries).u64(5).str("s"), "cannot fit"},
		{"scan reply truncated entry", scanReplyHead(1).uv(0).uv(2).u64(5).str("s").u64(6).uv(5).raw(1), "entry 1 of 2"},
		{"scan reply trailing after entries", scanReplyHead(1).uv(0).uv(1).u64(5).str("s").zeros(3), "3 trailing bytes"},
		{"scan reply empty shard only", scanReplyHead(1).uv(0).uv(1).u64(5).uv(0), "cannot fit"},
		{"scan reply offsets equal", scanReplyHead(1).uv(0).uv(2).u64(5).str("s").u64(5).str("s"), "offset 5 not above previous 5"},
		{"scan reply offsets down", scanReplyHead(1).uv(0).uv(2).u64(6).str("s").u64(5).str("s"), "not above previous"},
		{"scan reply next not above", scanReplyHead(1).uv(0).uv(1).u64(100).str("s"), "next 100 not above last entry offset 100"},
		{"scan reply bad status", scanReplyHead(0).uv(0).uv(0), "unknown status 0"},
	}
	for _, c := range cases {
		_, err := decodeAny(mustType(c.b), c.b)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		expectBad(t, c.name, err, c.want)
	}
}

func mustType(b []byte) message {
	switch MsgType(b[0]) {
	case TypeWriteReq:
		return WriteReq{}
	case TypeWriteReply:
		return WriteReply{}
	case TypeScanReq:
		return ScanReq{}
	}
	return ScanReply{}
}

// TestDecodeScanReplyEmptyShard checks an entry with a zero-length shard
// that otherwise fits.
func TestDecodeScanReplyEmptyShard(t *testing.T) {
	b := scanReplyHead(1).uv(0).uv(2).u64(5).uv(0).u64(6).str("long enough")
	_, err := DecodeScanReply(b)
	expectBad(t, "empty shard", err, "shard of 0 bytes")
}

func TestValidateLimits(t *testing.T) {
	expectBad(t, "too many entries", ScanReply{Status: StatusOK, Next: 1 << 20, Entries: make([]ScanEntry, MaxScanEntries+1)}.Validate(), "entries exceeds")
	big := make([]byte, MaxShard)
	var es []ScanEntry
	for i := range 3 {
		es = append(es, ScanEntry{Offset: uint64(i), Shard: big})
	}
	expectBad(t, "over 16 MiB", ScanReply{Status: StatusOK, Next: 3, Entries: es}.Validate(), "message limit")
	expectBad(t, "huge shard", WriteReq{Topic: "t", Shard: make([]byte, MaxShard+1)}.Validate(), "shard of")
	if err := (WriteReq{Topic: "t", Shard: big}).Validate(); err != nil {
		t.Fatal(err)
	}
	// A max-size write request round-trips.
	checkRoundTrip(t, WriteReq{Topic: "t", Shard: big})
}

func TestScanPageBudget(t *testing.T) {
	for _, c := range []struct{ in, want int }{
		{0, DefaultMaxPayload - 1024}, {-5, DefaultMaxPayload - 1024}, {1 << 20, 1<<20 - 1024},
		{64 << 20, MaxMessage - 1024}, {1000, 750}, {1, 1},
	} {
		if got := ScanPageBudget(c.in); got != c.want {
			t.Errorf("ScanPageBudget(%d) = %d, want %d", c.in, got, c.want)
		}
	}
	if got := (ScanReq{MaxBytes: 5000}).Budget(0); got != 5000 {
		t.Errorf("Budget with MaxBytes 5000 = %d", got)
	}
	if got := (ScanReq{MaxBytes: math.MaxUint32}).Budget(0); got != DefaultMaxPayload-1024 {
		t.Errorf("Budget with huge MaxBytes = %d", got)
	}
	if got := (ScanReq{}).Budget(2048); got != 1536 {
		t.Errorf("Budget(2048) = %d", got)
	}
}

func TestScanReplyMaxOverhead(t *testing.T) {
	m := ScanReply{Status: StatusOK, Detail: strings.Repeat("d", MaxDetail), Next: 1 << 40,
		Entries: make([]ScanEntry, MaxScanEntries)}
	for i := range m.Entries {
		m.Entries[i] = ScanEntry{Offset: uint64(i), Shard: []byte{1}}
	}
	if got := m.Size() - MaxScanEntries*ScanEntrySize(1); got != ScanReplyMaxOverhead {
		t.Fatalf("max overhead %d, constant says %d", got, ScanReplyMaxOverhead)
	}
	checkRoundTrip(t, m) // a full page of MaxScanEntries decodes
}

func TestScanReplyBuilder(t *testing.T) {
	b := NewScanReplyBuilder(ScanReplyMaxOverhead + 3*ScanEntrySize(100))
	sh := make([]byte, 100)
	for i := range 3 {
		if err := b.Add(uint64(10+i), sh); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	if err := b.Add(20, []byte{1}); !errors.Is(err, ErrPageFull) {
		t.Fatalf("4th add = %v, want ErrPageFull", err)
	}
	expectBad(t, "not ascending", b.Add(12, sh), "not above previous")
	expectBad(t, "empty", b.Add(30, nil), "shard of 0 bytes")
	expectBad(t, "huge", b.Add(30, make([]byte, MaxShard+1)), "shard of")
	r := b.Reply(ScanReply{Status: StatusOK, Detail: strings.Repeat("d", MaxDetail), Next: 20})
	if len(r.Entries) != 3 || r.Size() > ScanReplyMaxOverhead+3*ScanEntrySize(100) || r.Size() > b.Size() {
		t.Fatalf("%d entries, size %d, builder size %d", len(r.Entries), r.Size(), b.Size())
	}
	checkRoundTrip(t, r)

	// Progress: the first entry of a page is taken even over the budget.
	b.Reset(10)
	if err := b.Add(1, make([]byte, MaxShard)); err != nil {
		t.Fatalf("first oversize entry: %v", err)
	}
	if err := b.Add(2, []byte{1}); !errors.Is(err, ErrPageFull) {
		t.Fatalf("second entry = %v, want ErrPageFull", err)
	}
	checkRoundTrip(t, b.Reply(ScanReply{Status: StatusOK, Next: 2}))

	// Empty page.
	b.Reset(0)
	if r := b.Reply(ScanReply{Status: StatusOK, Next: 5}); r.Entries != nil || b.Len() != 0 {
		t.Fatal("empty page has entries")
	}

	// Entry count cap.
	b.Reset(MaxMessage)
	for i := range MaxScanEntries {
		if err := b.Add(uint64(i), []byte{1}); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	if err := b.Add(MaxScanEntries, []byte{1}); !errors.Is(err, ErrPageFull) {
		t.Fatalf("entry %d = %v, want ErrPageFull", MaxScanEntries+1, err)
	}
}

// TestScanPaging pages random slot sets under random budgets the way a node
// would and checks that every page fits and the pages cover every slot.
func TestScanPaging(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := NewScanReplyBuilder(0)
	for range 200 {
		var slots []ScanEntry
		off := uint64(r.IntN(100))
		for range r.IntN(300) {
			slots = append(slots, ScanEntry{Offset: off, Shard: randBytes(r, 3000)})
			off += 1 + uint64(r.IntN(5))
		}
		to := off + 1
		budget := 1 + r.IntN(20000)
		var got []ScanEntry
		from, pages := uint64(0), 0
		for from < to {
			b.Reset(budget)
			next := to
			for _, s := range slots {
				if s.Offset < from {
					continue
				}
				if err := b.Add(s.Offset, s.Shard); errors.Is(err, ErrPageFull) {
					next = s.Offset
					break
				} else if err != nil {
					t.Fatal(err)
				}
			}
			page := b.Reply(ScanReply{Status: StatusOK, Detail: strings.Repeat("x", MaxDetail), Next: next})
			enc := page.Marshal()
			if len(enc) > budget && len(page.Entries) > 1 {
				t.Fatalf("page of %d entries is %d bytes, budget %d", len(page.Entries), len(enc), budget)
			}
			dec, err := DecodeScanReply(enc)
			if err != nil {
				t.Fatal(err)
			}
			if next != to && len(dec.Entries) == 0 {
				t.Fatal("no progress")
			}
			got = append(got, dec.Entries...)
			from = dec.Next
			pages++
		}
		if len(got) != len(slots) {
			t.Fatalf("paged %d of %d slots in %d pages", len(got), len(slots), pages)
		}
		for i := range got {
			if got[i].Offset != slots[i].Offset || !bytes.Equal(got[i].Shard, slots[i].Shard) {
				t.Fatalf("slot %d differs", i)
			}
		}
	}
}
