package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Known-answer vectors of Philox4x32-10 from Random123's kat_vectors.
func TestPhiloxKAT(t *testing.T) {
	cases := []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, [2]uint32{0, 0}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff}, [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0}, [4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	}
	for _, c := range cases {
		if got := Philox4x32(c.ctr, c.key); got != c.want {
			t.Errorf("Philox4x32(%x, %x) = %x, want %x", c.ctr, c.key, got, c.want)
		}
	}
}

func TestUniformRange(t *testing.T) {
	sum := 0.0
	for i := 0; i < 100000; i++ {
		u := Uniform(42, 7, int64(i/1000), i)
		if !(u > 0 && u < 1) {
			t.Fatalf("u = %g outside (0, 1)", u)
		}
		sum += float64(u)
	}
	if m := sum / 100000; math.Abs(m-0.5) > 0.005 {
		t.Fatalf("mean of uniforms %g", m)
	}
	if g := Gumbel(1, 2, 3, 4); g != -Log(-Log(Uniform(1, 2, 3, 4))) {
		t.Fatal("Gumbel")
	}
}

func TestSampleDistribution(t *testing.T) {
	logits := []float32{0, 1, 2, float32(math.NaN()), -1}
	counts := make([]int, len(logits))
	const draws = 40000
	for i := 0; i < draws; i++ {
		tok := Sample(logits, SampleParams{Temperature: 1, Seed: 9}, int64(i), 5)
		counts[tok]++
	}
	z := 0.0
	for i, v := range logits {
		if v == v {
			z += math.Exp(float64(v))
		}
		_ = i
	}
	for i, v := range logits {
		if v != v {
			if counts[i] != 0 {
				t.Fatalf("NaN logit drawn %d times", counts[i])
			}
			continue
		}
		p := math.Exp(float64(v)) / z
		sd := math.Sqrt(draws * p * (1 - p))
		if math.Abs(float64(counts[i])-draws*p) > 5*sd {
			t.Fatalf("token %d drawn %d times, expected %.0f ± %.0f", i, counts[i], draws*p, sd)
		}
	}
}

func TestSampleRules(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	V := 500
	logits := make([]float32, V)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 2)
	}
	logits[17], logits[300] = 9, 9 // a tie: order (value desc, index asc) puts 17 first
	if tok := Sample(logits, SampleParams{Temperature: 0}, 0, 0); tok != 17 {
		t.Fatalf("greedy = %d, want 17 (ties to the smaller index)", tok)
	}
	for i := 0; i < 300; i++ {
		if tok := Sample(logits, SampleParams{Temperature: 1, TopK: 1, Seed: uint64(i)}, 1, 1); tok != 17 {
			t.Fatalf("top-k 1 drew %d", tok)
		}
		tok := Sample(logits, SampleParams{Temperature: 1, TopK: 2, Seed: uint64(i)}, 1, 1)
		if tok != 17 && tok != 300 {
			t.Fatalf("top-k 2 drew %d", tok)
		}
		if tok := Sample(logits, SampleParams{Temperature: 0.7, TopP: 0.01, Seed: uint64(i)}, 1, 1); tok != 17 {
			t.Fatalf("top-p 0.01 drew %d", tok)
		}
	}
	// the draw depends on (seed, seq, pos) only: the same row in any batch slot, any call order
	a := Sample(logits, SampleParams{Temperature: 1, Seed: 5}, 123, 45)
	for slot := 0; slot < 8; slot++ {
		Sample(logits, SampleParams{Temperature: 1, Seed: 5}, int64(slot), 45) // other sequences in between
		if b := Sample(logits, SampleParams{Temperature: 1, Seed: 5}, 123, 45); b != a {
			t.Fatalf("draw changed with the batch: %d vs %d", b, a)
		}
	}
	diff := false
	for pos := int64(0); pos < 20; pos++ {
		if Sample(logits, SampleParams{Temperature: 1, Seed: 5}, 123, pos) != a {
			diff = true
		}
	}
	if !diff {
		t.Fatal("the draw does not depend on the position")
	}
}
