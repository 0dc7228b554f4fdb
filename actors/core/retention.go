package core

// RetentionCut is where retention by time cuts at now: the start of the
// owner range holding now - retention. Everything below it is older than
// the limit; the range holding the limit itself is kept whole.
func RetentionCut(now int64, retention int64) uint64 {
	return RangeStart(uint64(max(now-retention, 0)))
}
