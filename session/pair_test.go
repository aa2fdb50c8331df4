package session

import (
	"context"
	"math/rand/v2"
	"testing"

	"bitalign/capture"
)

func memPair(t testing.TB, dt capture.DType, rows, cols int, a, b []byte) *Pair {
	f := formats[dt]
	p := &Pair{DType: dt, Rows: rows, Cols: cols, Feat: []int64{int64(cols)}, A: a, B: b, f: f,
		HasA: make([]bool, rows), HasB: make([]bool, rows)}
	for i := range p.HasA {
		p.HasA[i], p.HasB[i] = true, true
	}
	p.computeLevels()
	return p
}

// TestPairLevelsMatchBruteForce checks the parallel comparison against a serial scan of every element.
func TestPairLevelsMatchBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, sz := range []struct{ rows, cols int }{{1, 1}, {7, 300}, {100, 37}, {257, 129}} {
		for _, rate := range []float64{0, 0.001, 0.05, 0.5} {
			a, b := plant(r, formats[capture.BF16], sz.rows*sz.cols, rate)
			p := memPair(t, capture.BF16, sz.rows, sz.cols, a, b)
			if sz.rows > 3 {
				p.HasB[2] = false // a missing row
				p.computeLevels()
			}
			var hist [65]uint64
			var mism int64
			var maxULP uint64
			maxAt, missing := 0, 0
			for row := 0; row < p.Rows; row++ {
				if !p.HasA[row] || !p.HasB[row] {
					missing++
					hist[0] += uint64(p.Cols)
					for _, l := range p.Levels[row*p.Cols : (row+1)*p.Cols] {
						if l != 0 {
							t.Fatalf("a missing row has level %d", l)
						}
					}
					continue
				}
				for c := 0; c < p.Cols; c++ {
					i := row*p.Cols + c
					cls, d := p.f.compare(p.f.load(p.A, i), p.f.load(p.B, i))
					want := bucket(d)
					if cls == ClassNaNNumber {
						want = LevelNaN
					}
					if got := int(p.Levels[i]); got != want {
						t.Fatalf("%dx%d rate %g element (%d,%d): level %d, want %d", sz.rows, sz.cols, rate, row, c, got, want)
					}
					hist[bucket(d)]++
					if d > 0 {
						mism++
					}
					if d > maxULP {
						maxULP, maxAt = d, i
					}
				}
			}
			if p.Hist != hist || p.Mismatched != mism || p.MaxULP != maxULP || p.MaxAt != maxAt || p.MissingRow != missing {
				t.Fatalf("%dx%d rate %g: hist/mismatched/max %d %d@%d missing %d, want %d %d@%d %d", sz.rows, sz.cols, rate,
					p.Mismatched, p.MaxULP, p.MaxAt, p.MissingRow, mism, maxULP, maxAt, missing)
			}
		}
	}
}

func TestSessionPairPrefillVsDecode(t *testing.T) {
	const T, H = 12, 40
	bt := decode(testOps, 2, T, H, 5)
	for _, x := range bt {
		if x.Op == "layers.0.attn_norm" && x.Seq == 1 && x.Pos == 8 {
			flipBit(x.Data, 3, 6) // pos 8, feature 3: 64 ULP
		}
	}
	dir := t.TempDir()
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, prefill(testOps, 2, T, H))
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, bt)
	rep, err := Diff(context.Background(), a, b)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSession(a, b, rep)
	if got := s.Seqs("layers.0.attn_norm", "out"); len(got) != 2 || got[1] != (SeqID{0, 1}) {
		t.Fatalf("seqs %v", got)
	}
	p, err := s.Pair("layers.0.attn_norm", "out", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Rows != T || p.Cols != H || p.Pos0 != 0 || p.Mismatched != 1 || p.MaxLevel != 7 || p.Index != 1 {
		t.Fatalf("pair %dx%d pos0 %d mismatched %d max level %d index %d", p.Rows, p.Cols, p.Pos0, p.Mismatched, p.MaxLevel, p.Index)
	}
	e := p.Element(8, 3)
	if e.ULP != 64 || e.Class != ClassNumeric || e.Pos != 8 || e.A.Hex == e.B.Hex || !e.HasA || !e.HasB {
		t.Fatalf("element %+v", e)
	}
	if p.Levels[8*H+3] != 7 || p.Levels[8*H+4] != 0 {
		t.Fatalf("levels %d %d", p.Levels[8*H+3], p.Levels[8*H+4])
	}
	if p.MaxULP != 64 || p.MaxAt != 8*H+3 || p.Hist[7] != 1 {
		t.Fatalf("max ULP %d at %d, hist[7] %d; want 64 at %d, 1", p.MaxULP, p.MaxAt, p.Hist[7], 8*H+3)
	}
	if q, _ := s.Pair("layers.0.attn_norm", "out", 0, 1); q != p {
		t.Fatal("pair not cached")
	}
	if _, err := s.Pair("nope", "out", 0, 0); err == nil {
		t.Fatal("no error for an unknown op")
	}
	if d := rep.Divergent(); len(d) != 1 || rep.Ops[d[0]].Op != "layers.0.attn_norm" {
		t.Fatalf("divergent ops: %v", d)
	}
}

// BenchmarkPairLevels is the one-time cost of comparing a 4096×4096 bf16 pair for the heatmap.
func BenchmarkPairLevels(b *testing.B) {
	a, bb := plant(rand.New(rand.NewPCG(8, 9)), formats[capture.BF16], 4096*4096, 0.01)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		memPair(b, capture.BF16, 4096, 4096, a, bb)
	}
}
