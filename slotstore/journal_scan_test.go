package slotstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syndtr/goleveldb/leveldb/journal"
)

// testChunk is one chunk of a clean journal.
type testChunk struct {
	at     int
	typ    byte
	length int
}

// journalChunks walks the chunks of a journal written by goleveldb up to
// its first zero header (a pre-allocated tail) or its end.
func journalChunks(t testing.TB, b []byte) []testChunk {
	t.Helper()
	var out []testChunk
	for blk := 0; blk < len(b); blk += jBlock {
		end := min(blk+jBlock, len(b))
		for pos := blk; pos+jHeader <= end; {
			typ, length, reason := chunkAt(b[blk:end], pos-blk)
			if reason != "" {
				return out
			}
			out = append(out, testChunk{pos, typ, length})
			pos += jHeader + length
		}
	}
	return out
}

// ackedJournal writes n synced puts of about size bytes each and returns
// the store's directory, the keys, and the journal holding them: closed
// (cut to its records) or, if crashed, a copy of the directory taken while
// the store is open (records, then the pre-allocated zeros).
func ackedJournal(t *testing.T, n, size int, crashed bool) (string, []Key, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	var keys []Key
	for i := range n {
		k := Key{"a", 1, uint64(i + 1)}
		put(t, s, k, testShard(t, k.Offset, 1, size))
		keys = append(keys, k)
	}
	if crashed {
		c := t.TempDir()
		copyDir(t, dir, c)
		dir = c
	}
	s.Close()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) != 1 {
		t.Fatalf("journals %v, want one", logs)
	}
	return dir, keys, logs[0]
}

// TestJournalDamagedLastBlock: damage to an acknowledged record in the last
// block holding records, with acknowledged records after it in the same
// block, is refused. goleveldb's reader drops the rest of a damaged block,
// so the damage looked like a torn tail and the store opened without the
// records after it: a node answering "empty" for slots it had acked.
func TestJournalDamagedLastBlock(t *testing.T) {
	for _, crashed := range []bool{false, true} {
		t.Run(fmt.Sprintf("crashed=%v", crashed), func(t *testing.T) {
			dir, keys, path := ackedJournal(t, 45, 1024, crashed)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			chunks := journalChunks(t, b)
			last := chunks[len(chunks)-1].at / jBlock * jBlock // the last block holding records
			var victim testChunk
			for i, c := range chunks {
				if c.at >= last+jHeader && c.typ == jFull && i+3 < len(chunks) {
					victim = c // a whole record inside the block, records after it
					break
				}
			}
			if victim.length == 0 {
				t.Fatalf("no record to damage in the last block (chunks %v)", chunks)
			}
			mid := victim.at + jHeader + victim.length/2
			for i := range 3 {
				b[mid+i] ^= 0x5a
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, quiet())
			if err == nil {
				lost := 0
				for _, k := range keys {
					if _, err := s.Get(k); errors.Is(err, ErrNotFound) {
						lost++
					}
				}
				s.Close()
				t.Fatalf("store opened over damage at offset %d of %s and lost %d acknowledged writes", victim.at, path, lost)
			}
			wantErr(t, err, ErrCorrupt)
			for _, want := range []string{path, fmt.Sprintf("offset %d", victim.at), "journal damaged before its end"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error does not say %q: %v", want, err)
				}
			}
		})
	}
}

// TestJournalTornLastRecord: the last record partially written (never
// acknowledged: its fsync did not return) is a torn tail, in the last
// block too: cut short (an appended journal), or cut short with the
// pre-allocated zeros after it, or with garbage in its unwritten part.
func TestJournalTornLastRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		crashed bool
		tear    func(b []byte, c testChunk) []byte
	}{
		{"cut", false, func(b []byte, c testChunk) []byte { return b[:c.at+jHeader+c.length/2] }},
		{"zeroed", true, func(b []byte, c testChunk) []byte {
			clear(b[c.at+jHeader+c.length/2 : c.at+jHeader+c.length])
			return b
		}},
		{"garbage", false, func(b []byte, c testChunk) []byte {
			for i := c.at + jHeader + c.length/2; i < len(b); i++ {
				b[i] = byte(i*7 + 3)
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, keys, path := ackedJournal(t, 45, 1024, tc.crashed)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			chunks := journalChunks(t, b)
			lastRec := chunks[len(chunks)-1]
			if lastRec.typ != jFull {
				t.Fatalf("last record spans blocks (chunks %v)", chunks)
			}
			if err := os.WriteFile(path, tc.tear(b, lastRec), 0o644); err != nil {
				t.Fatal(err)
			}
			s := openT(t, dir, quiet())
			for _, k := range keys[:len(keys)-1] {
				if _, err := s.Get(k); err != nil {
					t.Fatalf("write before the torn one, %v: %v", k, err)
				}
			}
			_, err = s.Get(keys[len(keys)-1])
			wantErr(t, err, ErrNotFound)
		})
	}
}

// testJournal writes records with goleveldb's journal writer.
func testJournal(t testing.TB, records [][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := journal.NewWriter(&buf)
	for _, r := range records {
		jw, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		jw.Write(r)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestScanJournal: the scanner on journals built record by record.
func TestScanJournal(t *testing.T) {
	rec := func(n int, seed byte) []byte { return bytes.Repeat([]byte{seed, seed + 1, 0x55}, n/3+1)[:n] }
	var records [][]byte
	for i := range 30 {
		records = append(records, rec(100+i*373, byte(i))) // multi-block records among them
	}
	clean := testJournal(t, records)
	if s, err := scanJournal(bytes.NewReader(clean)); err != nil || s.Damaged || s.Records != len(records) {
		t.Fatalf("clean journal: %+v, %v", s, err)
	}
	zeroTail := append(bytes.Clone(clean), make([]byte, 3*jBlock+100)...)
	if s, _ := scanJournal(bytes.NewReader(zeroTail)); s.Refused() || s.Records != len(records) {
		t.Fatalf("zero tail: %+v", s)
	}
	chunks := journalChunks(t, clean)
	lastRec := len(chunks) - 1 // the chunks of the records before the last one
	for chunks[lastRec].typ != jFull && chunks[lastRec].typ != jFirst {
		lastRec--
	}
	for i, c := range chunks[:lastRec] {
		b := bytes.Clone(clean)
		b[c.at+jHeader+c.length/2] ^= 1
		if c.length == 0 {
			b[c.at] ^= 1
		}
		s, _ := scanJournal(bytes.NewReader(b))
		if !s.Refused() || s.At != int64(c.at) {
			t.Fatalf("chunk %d (%+v) damaged: %+v", i, c, s)
		}
	}
	// Damage to the zero padding at a block's end loses nothing.
	padded := testJournal(t, [][]byte{rec(jBlock-jHeader-3, 9), rec(50, 1)})
	padded[jBlock-2] = 0xff
	if s, _ := scanJournal(bytes.NewReader(padded)); s.Damaged || s.Records != 2 {
		t.Fatalf("damaged padding: %+v", s)
	}
	for cut := 0; cut < len(clean); cut += 97 {
		if s, _ := scanJournal(bytes.NewReader(clean[:cut])); s.Refused() {
			t.Fatalf("cut at %d: %+v", cut, s)
		}
	}
}

// FuzzJournalCheck: no input makes the scanner panic, and it refuses at
// least whatever goleveldb's lenient reader (replay) shows to be damaged
// before its end (a record read after a dropped chunk). Built from the
// input, a journal of records (some spanning blocks) is never refused when
// torn at cut with zeros after it (a crash), and always refused when a byte
// of a record before its last one is flipped.
func FuzzJournalCheck(f *testing.F) {
	f.Add([]byte("hello"), uint32(3), uint16(0))
	f.Add([]byte{200, 9, 9, 9, 1, 2, 3, 0, 0, 5, 77}, uint32(40000), uint16(300))
	f.Add(testJournal(f, [][]byte{[]byte("a"), []byte("bc"), []byte("def")}), uint32(20), uint16(9000))
	f.Fuzz(func(t *testing.T, data []byte, cut uint32, zeros uint16) {
		oracle(t, "input", data)
		var records [][]byte // piece i of data, repeated; no chunk type byte in a payload
		size := 0
		for rest := data; len(rest) > 0 && size < 96<<10; {
			piece := bytes.Clone(rest[:min(len(rest), 1+int(rest[0]%64))])
			rest = rest[len(piece):]
			for i, c := range piece {
				if c >= jFull && c <= jLast {
					piece[i] = c + 4 // so a torn tail cannot show a chunk held in a payload
				}
			}
			r := bytes.Repeat(piece, 1+int(piece[0]>>6)*int(zeros%128)*8)
			records = append(records, r)
			size += len(r)
		}
		if len(records) == 0 {
			return
		}
		clean := testJournal(t, records)
		at := int(cut) % len(clean)
		torn := append(bytes.Clone(clean[:at]), make([]byte, zeros)...)
		if s := oracle(t, "torn", torn); s.Refused() {
			t.Fatalf("journal torn at %d refused: %+v", at, s)
		}
		damaged := bytes.Clone(clean)
		damaged[at] ^= byte(zeros) | 1
		chunks := journalChunks(t, clean)
		lastRec := len(chunks) - 1
		for chunks[lastRec].typ != jFull && chunks[lastRec].typ != jFirst {
			lastRec--
		}
		inChunk := false // not in the zero padding at a block's end
		for _, c := range chunks[:lastRec] {
			inChunk = inChunk || (c.at <= at && at < c.at+jHeader+c.length)
		}
		if s := oracle(t, "damaged", damaged); inChunk && !s.Refused() {
			t.Fatalf("journal damaged at %d (before the last record at %d) not refused: %+v", at, chunks[lastRec].at, s)
		}
	})
}

// oracle scans b and checks it against goleveldb's lenient reader.
func oracle(t *testing.T, what string, b []byte) journalScan {
	t.Helper()
	s, err := scanJournal(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if lenientDamage(b) && !s.Refused() {
		t.Fatalf("%s: goleveldb reads a record after a dropped chunk; scan %+v", what, s)
	}
	return s
}

// lenientDamage: goleveldb's lenient reader (what replay uses) returns a
// complete record after it dropped a chunk.
func lenientDamage(b []byte) bool {
	drops := &countDrops{}
	r := journal.NewReader(bytes.NewReader(b), drops, false, true)
	for {
		rec, err := r.Next()
		if err != nil {
			return false
		}
		if _, err := io.Copy(io.Discard, rec); err != nil {
			continue
		}
		if drops.n > 0 {
			return true
		}
	}
}

type countDrops struct{ n int }

func (d *countDrops) Drop(error) { d.n++ }
