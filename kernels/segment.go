package kernels

import "fmt"

// Segments is the number of fixed K-segments of every long reduction (docs/arithmetic.md §3).
const Segments = 8

// segBounds returns the G+1 boundaries floor(j·L/G), j = 0..G: the canonical segments of a reduction of
// length L split over 8/G ranks (G = 8 on one rank).
func segBounds(L, G int) []int {
	b := make([]int, G+1)
	for j := 0; j <= G; j++ {
		b[j] = int(int64(j) * int64(L) / int64(G))
	}
	return b
}

// localSegments returns G = 8/tp, the number of canonical segments each of tp ranks holds (each holding
// lLocal elements of an L = lLocal·tp reduction), or an error when tp is not 1, 2, 4 or 8.
func localSegments(op string, lLocal, tp int) (int, error) {
	switch tp {
	case 1, 2, 4, 8:
	default:
		return 0, fmt.Errorf("kernels: %s: tensor-parallel degree %d not in {1, 2, 4, 8} (8-segment rule)", op, tp)
	}
	if lLocal < 0 {
		return 0, fmt.Errorf("kernels: %s: negative length %d", op, lLocal)
	}
	return Segments / tp, nil
}

// treeSum adds len(p) partials (a power of two) by the fixed pairwise tree
// ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)); it overwrites p.
func treeSum(p []float32) float32 {
	for n := len(p); n > 1; n /= 2 {
		for i := 0; i < n/2; i++ {
			p[i] = float32(p[2*i] + p[2*i+1])
		}
	}
	return p[0]
}

// seqSum adds partials left to right (standard profile).
func seqSum(p []float32) float32 {
	s := p[0]
	for _, v := range p[1:] {
		s = float32(s + v)
	}
	return s
}
