package bus

import (
	"errors"
	"fmt"
)

// Paging of scan replies.
//
// NATS caps a message at the server's max payload (1 MiB by default), so a
// node answers a scan one page at a time: it adds entries to a
// ScanReplyBuilder until the next one would push the encoded reply over the
// page budget, then replies with Next set to the offset it stopped at.
//
// Progress rule: the first entry of a page is always accepted, even when it
// alone exceeds the budget, so that a scan can never get stuck on a large
// shard. It is still bounded by the hard wire limits (a shard is at most
// MaxShard, so a one-entry page is at most ScanReplyMaxOverhead +
// ScanEntrySize(MaxShard), well under MaxMessage). Such a page can exceed
// the NATS max payload when a single shard does; run nodes with a max
// payload of at least the largest shard plus ScanReplyMaxOverhead +
// ScanEntrySize(0) (stripe shards are at most 4 MiB + header, so 1 MiB is
// enough for the default 256 KiB batches, and 8 MiB for anything stripe can
// produce), or scan with HeadersOnly first.

// ErrPageFull is returned by ScanReplyBuilder.Add when the entry does not
// fit in the page: reply with what was built and resume at that offset.
var ErrPageFull = errors.New("scan page full")

// DefaultMaxPayload is the NATS max payload raidq servers use unless
// configured otherwise (ServerOptions.MaxPayload).
const DefaultMaxPayload = 1 << 20

// ScanReplyMaxOverhead is the largest encoding of a ScanReply without its
// entries: the fixed fields, a MaxDetail detail and the largest entry count.
const ScanReplyMaxOverhead = fixedScanReply + MaxDetail + 2 /* detail length */ + 3 /* count ≤ 65536 */

// ScanEntrySize returns the encoded size of one scan entry whose shard is
// shardLen bytes long.
func ScanEntrySize(shardLen int) int { return 8 + bytesLen(shardLen) }

// ScanPageBudget returns the byte budget for one encoded scan reply on a
// NATS connection whose max payload is maxPayload (DefaultMaxPayload when
// maxPayload <= 0, capped at MaxMessage). It keeps back a reserve for NATS
// headers a deployment may add to replies: 1 KiB, or a quarter of a tiny
// max payload. The result is always positive.
func ScanPageBudget(maxPayload int) int {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	if maxPayload > MaxMessage {
		maxPayload = MaxMessage
	}
	reserve := min(1024, maxPayload/4)
	return maxPayload - reserve
}

// ScanReplyBuilder fills one scan reply page under a byte budget. Its size
// accounting is an upper bound that assumes the largest Detail, so the
// final reply fits the budget whatever Detail it carries (except for the
// one-entry page of the progress rule above). Not safe for concurrent use.
type ScanReplyBuilder struct {
	budget  int
	size    int // ScanReplyMaxOverhead + entries so far
	entries []ScanEntry
}

// NewScanReplyBuilder returns a builder for pages of at most budget encoded
// bytes (see ScanPageBudget and ScanReq.Budget); budget <= 0 means
// ScanPageBudget(DefaultMaxPayload).
func NewScanReplyBuilder(budget int) *ScanReplyBuilder {
	b := &ScanReplyBuilder{}
	b.Reset(budget)
	return b
}

// Reset empties the builder for a new page with the given budget, keeping
// its entry storage. Entries returned earlier must no longer be used.
func (b *ScanReplyBuilder) Reset(budget int) {
	if budget <= 0 {
		budget = ScanPageBudget(DefaultMaxPayload)
	}
	clear(b.entries)
	b.budget, b.size, b.entries = budget, ScanReplyMaxOverhead, b.entries[:0]
}

// Add appends the slot at offset holding shard (not copied) to the page. It
// returns ErrPageFull, adding nothing, when the page already has entries
// and this one would take it over the budget, or when it holds
// MaxScanEntries. It returns an error wrapping ErrBadMessage, adding
// nothing, when the entry can never be sent: an empty or oversized shard, or
// an offset not above the previous entry's.
func (b *ScanReplyBuilder) Add(offset uint64, shard []byte) error {
	if len(shard) == 0 || len(shard) > MaxShard {
		return badf(TypeScanReply, "entry at offset %d: shard of %d bytes: want 1..%d", offset, len(shard), MaxShard)
	}
	if n := len(b.entries); n > 0 && offset <= b.entries[n-1].Offset {
		return badf(TypeScanReply, "entry at offset %d not above previous %d", offset, b.entries[n-1].Offset)
	}
	if len(b.entries) >= MaxScanEntries {
		return fmt.Errorf("%w: %d entries", ErrPageFull, len(b.entries))
	}
	es := ScanEntrySize(len(shard))
	if len(b.entries) > 0 && b.size+es > b.budget {
		return ErrPageFull
	}
	b.size += es
	b.entries = append(b.entries, ScanEntry{Offset: offset, Shard: shard})
	return nil
}

// Len returns the number of entries in the page.
func (b *ScanReplyBuilder) Len() int { return len(b.entries) }

// Size returns an upper bound of the page's encoded size (assuming a
// MaxDetail detail).
func (b *ScanReplyBuilder) Size() int { return b.size }

// Reply returns r with the page's entries as its Entries (nil when empty).
// The caller sets r.Next: the offset Add refused with ErrPageFull, or the
// request's To when the scan is complete. The entries alias the builder's
// storage until the next Reset.
func (b *ScanReplyBuilder) Reply(r ScanReply) ScanReply {
	if len(b.entries) == 0 {
		r.Entries = nil
	} else {
		r.Entries = b.entries
	}
	return r
}
