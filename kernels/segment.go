package kernels

import "fmt"

// The canonical order's numbers live here, once: the segment count and bounds, the standard profile's split
// rule and chunk bounds, and the tree that adds partials. The CPU reference, the CUDA launchers
// (kernels/cuda) and the nvls CPU transport all call these functions.

// Segments is the number of fixed K-segments of every long reduction (docs/arithmetic.md §3).
const Segments = 8

// SegBounds returns the G+1 boundaries floor(j·L/G), j = 0..G (64-bit products): the canonical segments of a
// reduction of length L split over 8/G ranks (G = Segments on one rank), docs/arithmetic.md §3.
func SegBounds(L, G int) []int {
	b := make([]int, G+1)
	for j := 0; j <= G; j++ {
		b[j] = int(int64(j) * int64(L) / int64(G))
	}
	return b
}

// LocalSegments returns G = Segments/tp, the number of canonical segments each of tp ranks holds (each holding
// lLocal elements of an L = lLocal·tp reduction), or an error when tp is not 1, 2, 4 or 8 (docs/arithmetic.md
// §3). op names the caller in the error.
func LocalSegments(op string, lLocal, tp int) (int, error) {
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

// StandardSplits is the standard profile's split-K count for a matmul of M rows (docs/arithmetic.md §13), as
// vendor libraries choose it from the batch size: 4 if M < 8, 2 if M < 64, else 1.
func StandardSplits(M int) int {
	switch {
	case M < 8:
		return 4
	case M < 64:
		return 2
	}
	return 1
}

// ChunkBounds splits L into contiguous chunks of ceil(L/n) (the standard profile's split-K, §13); the last
// chunk may be shorter, and there are fewer than n when ceil(L/n)·(n-1) >= L.
func ChunkBounds(L, n int) []int {
	c := (L + n - 1) / n
	b := []int{0}
	for lo := c; lo < L; lo += c {
		b = append(b, lo)
	}
	return append(b, L)
}

// MatmulBounds returns the K-ranges of MatmulForward's chains for M rows and whether their partials are
// added by TreeSum (canonical: the 8 fixed segments, whatever M) or left to right (standard: StandardSplits(M)
// chunks).
func MatmulBounds(p Profile, M, K int) (bounds []int, tree bool) {
	if p == Standard {
		return ChunkBounds(K, StandardSplits(M)), false // the order depends on the batch size M
	}
	return SegBounds(K, Segments), true // fixed 8-segment split: the order never depends on M
}

// PartialBounds returns the local K-ranges of MatmulPartial's chains on one of tp ranks and whether they are
// added by TreeSum (canonical: the rank's G = 8/tp segments, the same on every rank) or form one chain
// (standard).
func PartialBounds(p Profile, kLocal, tp int) (bounds []int, tree bool, err error) {
	G, err := LocalSegments("MatmulPartial", kLocal, tp)
	if err != nil {
		return nil, false, err
	}
	if p == Standard {
		return []int{0, kLocal}, false, nil
	}
	return SegBounds(kLocal, G), true, nil
}

// TCBounds returns the K-ranges of a tc matmul's chains (docs/arithmetic.md tc.2) and whether they are added
// by TreeSum: one chain over K for a column-parallel matmul (never split, whatever M), the 8 fixed segments for
// a row-parallel one.
func TCBounds(l TCLayout, K int) (bounds []int, tree bool) {
	if l == RowParallel {
		return SegBounds(K, Segments), true // the 8 segments of §3, so that TP 2/4/8 finish the same tree
	}
	return []int{0, K}, false // one chain in ascending k-steps: the order never depends on M
}

// TCPartialBounds returns the local K-ranges of MatmulTCPartial's chains on one of tp ranks (the rank's
// G = 8/tp segments, the same on every rank, added by TreeSum), or the 8-segment rule's error for another tp.
func TCPartialBounds(kLocal, tp int) (bounds []int, tree bool, err error) {
	return PartialBounds(Canonical, kLocal, tp) // the canonical segments: tc changes the chains, not the bounds
}

// TreeSum adds len(p) partials (a power of two) by the fixed pairwise tree: adjacent pairs first, level by
// level, ((p0⊕p1)⊕(p2⊕p3))⊕((p4⊕p5)⊕(p6⊕p7)) for 8 (docs/arithmetic.md §3), which is also the tree over
// ranks T(0, n) of §12. It overwrites p.
func TreeSum(p []float32) float32 {
	TreeSumRows(p, len(p), 1)
	return p[0]
}

// TreeSumRows is TreeSum for w sums at once: p holds n rows (n a power of two) of w partials, row r =
// p[r·w : (r+1)·w], and element j of the result, left in p[j], is the tree over the rows' elements j. It
// overwrites p[:n·w]. Eight rows (the canonical matmul's panels) take the tree written out in one pass, which
// TestTreeSumRows checks against the level-by-level loop; that pass keeps the panel matmul at its speed
// (about 15 % of it at K = 1024 is this epilogue otherwise).
func TreeSumRows(p []float32, n, w int) {
	if n == Segments && w > 1 {
		// the same tree written out for 8 rows: one pass, no intermediate stores
		r0, r1, r2, r3 := p[:w], p[w:2*w], p[2*w:3*w], p[3*w:4*w]
		r4, r5, r6, r7 := p[4*w:5*w], p[5*w:6*w], p[6*w:7*w], p[7*w:8*w]
		for j := range r0 {
			r0[j] = float32(float32(float32(r0[j]+r1[j])+float32(r2[j]+r3[j])) +
				float32(float32(r4[j]+r5[j])+float32(r6[j]+r7[j])))
		}
		return
	}
	for ; n > 1; n /= 2 {
		for i := 0; i < n/2; i++ {
			dst, a, b := p[i*w:(i+1)*w], p[2*i*w:(2*i+1)*w], p[(2*i+1)*w:(2*i+2)*w]
			a, b = a[:len(dst)], b[:len(dst)]
			for j := range dst {
				dst[j] = float32(a[j] + b[j])
			}
		}
	}
}

// seqSum adds partials left to right (standard profile).
func seqSum(p []float32) float32 {
	s := p[0]
	for _, v := range p[1:] {
		s = float32(s + v)
	}
	return s
}
