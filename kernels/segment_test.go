package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSegmentAlignment checks docs/arithmetic.md §3 exhaustively for K up to 4096: with tp in {1, 2, 4, 8}
// dividing K, rank r's local boundaries floor(j·K/tp / G) shifted by r·K/tp are exactly the global
// boundaries floor((r·G + j)·K / 8).
func TestSegmentAlignment(t *testing.T) {
	for K := 0; K <= 4096; K++ {
		global := SegBounds(K, Segments)
		for _, tp := range []int{1, 2, 4, 8} {
			if K%tp != 0 {
				continue
			}
			G, err := LocalSegments("test", K/tp, tp)
			if err != nil {
				t.Fatal(err)
			}
			local := SegBounds(K/tp, G)
			for r := 0; r < tp; r++ {
				for j := 0; j <= G; j++ {
					if got, want := r*K/tp+local[j], global[r*G+j]; got != want {
						t.Fatalf("K=%d tp=%d rank %d boundary %d: local gives %d, global %d", K, tp, r, j, got, want)
					}
				}
			}
		}
	}
	for _, tp := range []int{0, 3, 16} {
		if _, err := LocalSegments("test", 8, tp); err == nil {
			t.Errorf("tp = %d accepted", tp)
		}
	}
}

func TestTreeSumOrder(t *testing.T) {
	p := []float32{1e8, 1, -1e8, 1, 3, 1e-3, 7, -5}
	want := float32(float32(float32(p[0]+p[1])+float32(p[2]+p[3])) + float32(float32(p[4]+p[5])+float32(p[6]+p[7])))
	if got := TreeSum(append([]float32(nil), p...)); got != want {
		t.Fatalf("TreeSum = %g, want %g", got, want)
	}
	if seqSum(p) == want {
		t.Fatal("test values do not distinguish the tree from a sequential sum")
	}
}

// TreeSumRows is TreeSum applied to every column of its rows (the panel matmul adds 64 outputs at once).
func TestTreeSumRows(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		const w = 64
		r := rand.New(rand.NewPCG(uint64(n), 3))
		p := make([]float32, n*w)
		for i := range p { // mixed signs and magnitudes 1e-3 … 1e8: the order shows in the bits
			p[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(12)-3)))
		}
		want := make([]float32, w)
		col := make([]float32, n)
		for j := range want {
			for r := range col {
				col[r] = p[r*w+j]
			}
			want[j] = TreeSum(col)
		}
		TreeSumRows(p, n, w)
		for j := range want {
			if p[j] != want[j] {
				t.Fatalf("n=%d column %d: TreeSumRows %g, TreeSum %g", n, j, p[j], want[j])
			}
		}
	}
}

// The matmul's bounds: canonical never depends on M; standard switches its split-K at M = 8 and M = 64
// (docs/arithmetic.md §13).
func TestMatmulBounds(t *testing.T) {
	const K = 1000
	for _, M := range []int{1, 7, 8, 63, 64, 5000} {
		b, tree := MatmulBounds(Canonical, M, K)
		if !tree || len(b) != Segments+1 || b[1] != 125 || b[8] != K {
			t.Errorf("canonical M=%d: %v tree=%v", M, b, tree)
		}
	}
	for _, c := range []struct{ M, chunks int }{{1, 4}, {7, 4}, {8, 2}, {63, 2}, {64, 1}, {5000, 1}} {
		b, tree := MatmulBounds(Standard, c.M, K)
		if tree || len(b) != c.chunks+1 || b[1] != (K+c.chunks-1)/c.chunks || b[c.chunks] != K {
			t.Errorf("standard M=%d: %v tree=%v, want %d chunks", c.M, b, tree, c.chunks)
		}
	}
	if b := ChunkBounds(5, 4); len(b) != 4 || b[1] != 2 || b[3] != 5 {
		t.Errorf("ChunkBounds(5, 4) = %v: chunks of ceil(5/4) = 2", b)
	}
	b, tree, err := PartialBounds(Canonical, 12, 4)
	if err != nil || !tree || len(b) != 3 || b[1] != 6 {
		t.Errorf("PartialBounds(canonical, 12, 4) = %v %v %v", b, tree, err)
	}
	if _, _, err := PartialBounds(Canonical, 12, 3); err == nil {
		t.Error("PartialBounds accepted tp = 3")
	}
}
