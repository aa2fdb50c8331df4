package kernels

import "testing"

// TestSegmentAlignment checks docs/arithmetic.md §3 exhaustively for K up to 4096: with tp in {1, 2, 4, 8}
// dividing K, rank r's local boundaries floor(j·K/tp / G) shifted by r·K/tp are exactly the global
// boundaries floor((r·G + j)·K / 8).
func TestSegmentAlignment(t *testing.T) {
	for K := 0; K <= 4096; K++ {
		global := segBounds(K, Segments)
		for _, tp := range []int{1, 2, 4, 8} {
			if K%tp != 0 {
				continue
			}
			G, err := localSegments("test", K/tp, tp)
			if err != nil {
				t.Fatal(err)
			}
			local := segBounds(K/tp, G)
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
		if _, err := localSegments("test", 8, tp); err == nil {
			t.Errorf("tp = %d accepted", tp)
		}
	}
}

func TestTreeSumOrder(t *testing.T) {
	p := []float32{1e8, 1, -1e8, 1, 3, 1e-3, 7, -5}
	want := float32(float32(float32(p[0]+p[1])+float32(p[2]+p[3])) + float32(float32(p[4]+p[5])+float32(p[6]+p[7])))
	if got := treeSum(append([]float32(nil), p...)); got != want {
		t.Fatalf("treeSum = %g, want %g", got, want)
	}
	if seqSum(p) == want {
		t.Fatal("test values do not distinguish the tree from a sequential sum")
	}
}
