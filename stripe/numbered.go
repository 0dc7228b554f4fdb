package stripe

// Record-numbered stripes. A stripe whose producer id starts with
// NumberedPrefix numbers its records: record i carries sequence Seq+i of
// its producer (a Kafka idempotent producer's sequence numbers, per
// partition), so one write may hold several of its producer's batches and
// a retry of any one of them is recognised by its sequences. Readers
// deliver each sequence of such a producer once (actors/core,
// reader_seqs.go). Other producers never draw an id with this prefix.
const NumberedPrefix = "kf"

// Numbered says whether id's records are numbered from id.Seq.
func Numbered(id ID) bool {
	return id.Producer[0] == NumberedPrefix[0] && id.Producer[1] == NumberedPrefix[1]
}
