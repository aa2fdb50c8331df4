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

func bruteHeatmap(p *Pair, rows, cols int) [][]float32 {
	out := make([][]float32, rows)
	for i := range out {
		out[i] = make([]float32, cols)
		for j := range out[i] {
			r0, r1, c0, c1 := p.CellRange(i, j, rows, cols)
			m, miss := 0, false
			for r := r0; r < r1; r++ {
				if !p.HasA[r] || !p.HasB[r] {
					miss = true
					continue
				}
				for c := c0; c < c1; c++ {
					_, d := p.f.compare(p.f.load(p.A, r*p.Cols+c), p.f.load(p.B, r*p.Cols+c))
					cls, _ := p.f.compare(p.f.load(p.A, r*p.Cols+c), p.f.load(p.B, r*p.Cols+c))
					l := bucket(d)
					if cls == ClassNaNNumber {
						l = LevelNaN
					}
					m = max(m, l)
				}
			}
			out[i][j] = float32(m)
			if m == 0 && miss {
				out[i][j] = LevelMissing
			}
		}
	}
	return out
}

func TestHeatmapMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, sz := range []struct{ rows, cols int }{{1, 1}, {7, 300}, {100, 37}, {257, 129}} {
		for _, rate := range []float64{0, 0.001, 0.05, 0.5} {
			a, b := plant(r, formats[capture.BF16], sz.rows*sz.cols, rate)
			p := memPair(t, capture.BF16, sz.rows, sz.cols, a, b)
			if sz.rows > 3 {
				p.HasB[2] = false // a missing row
				p.computeLevels()
			}
			for _, hm := range []struct{ rows, cols int }{{1, 1}, {3, 5}, {10, 17}, {sz.rows, sz.cols}, {sz.rows + 3, 2 * sz.cols}, {33, 80}} {
				got := p.Heatmap(hm.rows, hm.cols)
				want := bruteHeatmap(p, hm.rows, hm.cols)
				for i := range want {
					for j := range want[i] {
						if got[i][j] != want[i][j] {
							t.Fatalf("%dx%d rate %g heatmap %dx%d cell (%d,%d): %v, want %v", sz.rows, sz.cols, rate, hm.rows, hm.cols, i, j, got[i][j], want[i][j])
						}
					}
				}
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
	if p.Level(8, 3) != 7 || p.Level(8, 4) != 0 {
		t.Fatalf("levels %d %d", p.Level(8, 3), p.Level(8, 4))
	}
	hm := p.Heatmap(4, 4) // rows 0-2, 3-5, 6-8, 9-11; cols 0-9...
	if hm[2][0] != 7 || hm[0][0] != 0 {
		t.Fatalf("heatmap %v", hm)
	}
	if r, c := p.Worst(p.CellRange(2, 0, 4, 4)); r != 8 || c != 3 {
		t.Fatalf("worst %d %d", r, c)
	}
	if q, _ := s.Pair("layers.0.attn_norm", "out", 0, 1); q != p {
		t.Fatal("pair not cached")
	}
	if _, err := s.Pair("nope", "out", 0, 0); err == nil {
		t.Fatal("no error for an unknown op")
	}
	i := rep.NextDivergent(-1)
	if i < 0 || rep.Ops[i].Op != "layers.0.attn_norm" || rep.NextDivergent(i) != -1 || rep.PrevDivergent(i) != -1 || rep.PrevDivergent(len(rep.Ops)) != i {
		t.Fatalf("next/prev divergent: %d", i)
	}
}

func TestLayout(t *testing.T) {
	for _, c := range []struct {
		dt           capture.DType
		s, e, m, tot int
	}{{capture.BF16, 1, 8, 7, 16}, {capture.F16, 1, 5, 10, 16}, {capture.F32, 1, 8, 23, 32}, {capture.F8E4M3, 1, 4, 3, 8},
		{capture.F8E5M2, 1, 5, 2, 8}, {capture.I32, 1, 0, 0, 32}, {capture.U8, 0, 0, 0, 8}} {
		s, e, m, tot := Layout(c.dt)
		if s != c.s || e != c.e || m != c.m || tot != c.tot {
			t.Errorf("%s: %d %d %d %d", c.dt, s, e, m, tot)
		}
	}
}

// BenchmarkHeatmap4096 downsamples a 4096×4096 bf16 pair with 1% mismatches to a 200×60 terminal's cells
// (half blocks: 116 rows × 180 columns), uncached (the first frame after a resize) and cached.
func BenchmarkHeatmap4096(b *testing.B) {
	a, bb := plant(rand.New(rand.NewPCG(8, 9)), formats[capture.BF16], 4096*4096, 0.01)
	p := memPair(b, capture.BF16, 4096, 4096, a, bb)
	b.Run("uncached", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			p.heatLast = nil
			p.Heatmap(116, 180)
		}
	})
	b.Run("cached", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			p.Heatmap(116, 180)
		}
	})
}

// BenchmarkPairLevels is the one-time cost of comparing a 4096×4096 bf16 pair for the heatmap.
func BenchmarkPairLevels(b *testing.B) {
	a, bb := plant(rand.New(rand.NewPCG(8, 9)), formats[capture.BF16], 4096*4096, 0.01)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		memPair(b, capture.BF16, 4096, 4096, a, bb)
	}
}
