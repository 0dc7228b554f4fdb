package core

import "slices"

// Intervals is a set of disjoint, sorted half-open intervals [from, to).
type Intervals struct{ iv [][2]uint64 }

// Add inserts [from, to), merging with neighbours.
func (s *Intervals) Add(from, to uint64) {
	if from >= to {
		return
	}
	i, _ := slices.BinarySearchFunc(s.iv, from, func(e [2]uint64, x uint64) int {
		switch {
		case e[1] < x:
			return -1
		case e[0] > x:
			return 1
		}
		return 0
	})
	j := i
	for j < len(s.iv) && s.iv[j][0] <= to {
		from, to = min(from, s.iv[j][0]), max(to, s.iv[j][1])
		j++
	}
	s.iv = slices.Replace(s.iv, i, j, [2]uint64{from, to})
}

// End returns the end of the interval holding x, or x if none does.
func (s *Intervals) End(x uint64) uint64 {
	i, ok := slices.BinarySearchFunc(s.iv, x, func(e [2]uint64, x uint64) int {
		switch {
		case e[1] <= x:
			return -1
		case e[0] > x:
			return 1
		}
		return 0
	})
	if !ok {
		return x
	}
	return s.iv[i][1]
}

// PruneBelow forgets everything below x.
func (s *Intervals) PruneBelow(x uint64) {
	k := 0
	for k < len(s.iv) && s.iv[k][1] <= x {
		k++
	}
	s.iv = s.iv[k:]
	if len(s.iv) > 0 && s.iv[0][0] < x {
		s.iv[0][0] = x
	}
}
