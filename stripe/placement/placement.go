// Package placement is raidq's one rendezvous (highest-random-weight)
// hash: which nodes hold a partition's shards, and which group member
// reads a partition. Each candidate's score is FNV-1a-64 of
// "<prefix>/<candidate id>"; the highest score wins and ties go to the
// smaller id. A candidate joining or leaving moves only what it wins or
// held, and every process computes the same answer from the same inputs.
//
// Callers own their prefix, and changing one moves every assignment made
// with it: ensembles use "<topic>/<partition>", group assignment
// "<group>/<topic>/<partition>". Members on mixed versions must agree, so
// these formats are part of the protocol.
package placement

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// Score is candidate id's rendezvous score under prefix.
func Score(prefix, id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(prefix))
	h.Write([]byte{'/'})
	h.Write([]byte(id))
	return h.Sum64()
}

// Rank returns ids ordered best first under prefix (highest score, ties
// to the smaller id). ids is not modified.
func Rank(prefix string, ids []string) []string {
	type scored struct {
		id    string
		score uint64
	}
	s := make([]scored, len(ids))
	for i, id := range ids {
		s[i] = scored{id, Score(prefix, id)}
	}
	slices.SortFunc(s, func(a, b scored) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.id, b.id))
	})
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i].id
	}
	return out
}

// Winner is Rank(prefix, ids)[0] without sorting ("" when ids is empty).
func Winner(prefix string, ids []string) string {
	best, bestScore := "", uint64(0)
	for _, id := range ids {
		s := Score(prefix, id)
		if best == "" || s > bestScore || (s == bestScore && id < best) {
			best, bestScore = id, s
		}
	}
	return best
}
