package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const eps = 1e-6
	for _, C := range []int{1, 7, 64, 1000} {
		const maxRows = 40
		x := randBF16(r, maxRows*C, 2)
		w := randBF16(r, C, 1)
		all := make([]float32, maxRows*C)
		RMSNormForward(Canonical, F32, all, x, w, maxRows, C, eps)
		// accuracy against float64 (f32 output: x·r and w·h each rounded once)
		for i := 0; i < maxRows; i++ {
			ss := 0.0
			for _, v := range x[i*C : (i+1)*C] {
				ss += float64(v) * float64(v)
			}
			rs := 1 / math.Sqrt(ss/float64(C)+eps)
			for k := 0; k < C; k++ {
				want := float64(w[k]) * float64(x[i*C+k]) * rs
				if e := math.Abs(float64(all[i*C+k])-want) / (math.Abs(want) + 1e-30); e > 8*0x1p-24 {
					t.Fatalf("C=%d row %d [%d]: %g, want %g (rel %.2g)", C, i, k, all[i*C+k], want, e)
				}
			}
		}
		// batch invariance: each row alone gives the same bits, bf16 output too
		allB := make([]float32, maxRows*C)
		RMSNormForward(Canonical, BF16, allB, x, w, maxRows, C, eps)
		for i := 0; i < maxRows; i++ {
			one := make([]float32, C)
			RMSNormForward(Canonical, BF16, one, x[i*C:(i+1)*C], w, 1, C, eps)
			assertSame(t, fmt.Sprintf("RMSNorm C=%d row %d alone vs in %d rows", C, i, maxRows), one, allB[i*C:(i+1)*C])
		}
		if C >= 64 {
			one := make([]float32, maxRows*C)
			for i := 0; i < maxRows; i++ {
				RMSNormForward(Standard, F32, one[i*C:(i+1)*C], x[i*C:(i+1)*C], w, 1, C, eps)
			}
			std := make([]float32, maxRows*C)
			RMSNormForward(Standard, F32, std, x, w, maxRows, C, eps)
			assertDiffers(t, fmt.Sprintf("standard RMSNorm C=%d, 1 row vs %d rows", C, maxRows), std, one)
		}
	}
}

func TestRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	T, heads, hd := 5, 3, 16
	cos, sin := RoPETables(10000, hd, 64, F32)
	x := randBF16(r, T*heads*hd, 1)
	pos := []int32{0, 1, 7, 30, 63}
	out := make([]float32, len(x))
	if err := RoPEForward(F32, out, x, pos, T, heads, hd, cos, sin); err != nil {
		t.Fatal(err)
	}
	h := hd / 2
	for t0 := 0; t0 < T; t0++ {
		for hh := 0; hh < heads; hh++ {
			for i := 0; i < hd; i++ {
				j := i % h
				ang := float64(pos[t0]) / math.Pow(10000, float64(2*j)/float64(hd))
				base := (t0*heads + hh) * hd
				var want float64
				if i < h {
					want = float64(x[base+i])*math.Cos(ang) - float64(x[base+i+h])*math.Sin(ang)
				} else {
					want = float64(x[base+i])*math.Cos(ang) + float64(x[base+i-h])*math.Sin(ang)
				}
				if e := math.Abs(float64(out[base+i]) - want); e > 4e-7*(math.Abs(float64(x[base+i]))+math.Abs(float64(x[base+(i+h)%hd]))) {
					t.Fatalf("RoPE t=%d head %d [%d]: %g, want %g", t0, hh, i, out[base+i], want)
				}
			}
		}
	}
	// position 0 is the identity; rows are independent of each other
	one := make([]float32, heads*hd)
	RoPEForward(F32, one, x[2*heads*hd:3*heads*hd], pos[2:3], 1, heads, hd, cos, sin)
	assertSame(t, "RoPE row alone", one, out[2*heads*hd:3*heads*hd])
	assertSame(t, "RoPE at position 0", out[:heads*hd], x[:heads*hd])
	if err := RoPEForward(F32, one, x[:heads*hd], []int32{64}, 1, heads, hd, cos, sin); err == nil {
		t.Fatal("position 64 of a 64-position table accepted")
	}
}

// attentionRef is float64 causal GQA.
func attentionRef(q, k, v []float32, qPos []int32, T, nh, nkv, hd int, scale float64) (ref, scale2 []float64) {
	ref = make([]float64, T*nh*hd)
	scale2 = make([]float64, T*nh*hd)
	for t := 0; t < T; t++ {
		for h := 0; h < nh; h++ {
			g := h / (nh / nkv)
			P := int(qPos[t])
			s := make([]float64, P+1)
			m := math.Inf(-1)
			for j := 0; j <= P; j++ {
				d := 0.0
				for i := 0; i < hd; i++ {
					d += float64(q[(t*nh+h)*hd+i]) * float64(k[(j*nkv+g)*hd+i])
				}
				s[j] = d * scale
				m = math.Max(m, s[j])
			}
			l := 0.0
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				l += s[j]
			}
			for i := 0; i < hd; i++ {
				a, b := 0.0, 0.0
				for j := range s {
					a += s[j] * float64(v[(j*nkv+g)*hd+i])
					b += s[j] * math.Abs(float64(v[(j*nkv+g)*hd+i]))
				}
				ref[(t*nh+h)*hd+i], scale2[(t*nh+h)*hd+i] = a/l, b/l
			}
		}
	}
	return ref, scale2
}

func TestAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	for _, c := range []struct{ S, nh, nkv, hd int }{{1, 1, 1, 4}, {5, 4, 2, 8}, {70, 4, 1, 16}, {300, 2, 2, 32}, {130, 6, 3, 8}} {
		S, nh, nkv, hd := c.S, c.nh, c.nkv, c.hd
		q := randBF16(r, S*nh*hd, 1)
		k := randBF16(r, S*nkv*hd, 1)
		v := randBF16(r, S*nkv*hd, 1)
		pos := make([]int32, S)
		for i := range pos {
			pos[i] = int32(i)
		}
		scale := AttentionScale(hd)
		name := fmt.Sprintf("S=%d nh=%d nkv=%d hd=%d", S, nh, nkv, hd)
		for _, p := range []Profile{Canonical, Standard} {
			prefill := make([]float32, S*nh*hd)
			if err := AttentionForward(p, F32, prefill, q, k, v, pos, S, S, nh, nkv, hd, scale); err != nil {
				t.Fatal(err)
			}
			ref, sc := attentionRef(q, k, v, pos, S, nh, nkv, hd, float64(scale))
			checkClose(t, fmt.Sprintf("%v attention %s", p, name), prefill, ref, sc, 2e-5)
			// decode: one query at a time from a cache holding positions 0..t only
			decode := make([]float32, S*nh*hd)
			for t0 := 0; t0 < S; t0++ {
				if err := AttentionForward(p, F32, decode[t0*nh*hd:(t0+1)*nh*hd], q[t0*nh*hd:(t0+1)*nh*hd], k[:(t0+1)*nkv*hd], v[:(t0+1)*nkv*hd], pos[t0:t0+1], 1, t0+1, nh, nkv, hd, scale); err != nil {
					t.Fatal(err)
				}
			}
			if p == Canonical {
				assertSame(t, "canonical attention prefill vs decode "+name, decode, prefill)
				// chunked prefill: the last rows as a second chunk
				h := S / 2
				chunk := make([]float32, (S-h)*nh*hd)
				if err := AttentionForward(p, BF16, chunk, q[h*nh*hd:], k, v, pos[h:], S-h, S, nh, nkv, hd, scale); err != nil {
					t.Fatal(err)
				}
				want := append([]float32(nil), prefill[h*nh*hd:]...)
				BF16.RoundSlice(want)
				assertSame(t, "canonical attention chunked prefill "+name, chunk, want)
			} else if S > 128 { // below 129 keys the standard prefill tile and decode split coincide
				assertDiffers(t, "standard attention prefill vs decode "+name, decode, prefill)
			}
		}
	}
	if err := AttentionForward(Canonical, F32, make([]float32, 4), make([]float32, 4), make([]float32, 4), make([]float32, 4), []int32{1}, 1, 1, 1, 1, 4, 0.5); err == nil {
		t.Fatal("query position beyond the cache accepted")
	}
}

func TestElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	n := 1000
	a, b := randBF16(r, n, 3), randBF16(r, n, 3)
	out := make([]float32, n)
	ResidualForward(BF16, out, a, b, n)
	for i := range out {
		if out[i] != RoundBF16(float32(float64(a[i])+float64(b[i]))) {
			t.Fatalf("residual %d", i)
		}
	}
	SwiGLUForward(F32, out, a, b, n)
	for i := range out {
		s := float64(a[i]) / (1 + math.Exp(-float64(a[i])))
		want := s * float64(b[i])
		if e := math.Abs(float64(out[i]) - want); e > 4*0x1p-24*math.Abs(want)+1e-30 {
			t.Fatalf("swiglu %d: %g want %g", i, out[i], want)
		}
	}
	table := randBF16(r, 10*4, 1)
	emb := make([]float32, 2*4)
	if err := EmbeddingForward(BF16, emb, table, []int32{3, 9}, 2, 10, 4); err != nil {
		t.Fatal(err)
	}
	assertSame(t, "embedding", emb, append(append([]float32(nil), table[12:16]...), table[36:40]...))
	if err := EmbeddingForward(BF16, emb, table, []int32{10, 0}, 2, 10, 4); err == nil {
		t.Fatal("token 10 of a 10-token vocabulary accepted")
	}
}

func TestFastExpDiffers(t *testing.T) {
	diff := 0
	for x := float32(-20); x < 20; x += 0.01 {
		if e := math.Abs(float64(FastExp(x))/math.Exp(float64(x)) - 1); e > 1e-3 {
			t.Fatalf("FastExp(%g) relative error %.2g: too inaccurate to be realistic", x, e)
		}
		if FastExp(x) != Exp(x) {
			diff++
		}
	}
	if diff == 0 {
		t.Fatal("FastExp never differs from Exp: the fast-exp fault would plant nothing")
	}
	r := rand.New(rand.NewPCG(39, 40))
	S, nh, hd := 40, 2, 8
	q, k, v := randBF16(r, S*nh*hd, 2), randBF16(r, S*nh*hd, 2), randBF16(r, S*nh*hd, 1)
	pos := make([]int32, S)
	for i := range pos {
		pos[i] = int32(i)
	}
	a, b := make([]float32, S*nh*hd), make([]float32, S*nh*hd)
	AttentionForward(Canonical, BF16, a, q, k, v, pos, S, S, nh, nh, hd, AttentionScale(hd))
	AttentionForwardExp(Canonical, FastExp, BF16, b, q, k, v, pos, S, S, nh, nh, hd, AttentionScale(hd))
	assertDiffers(t, "attention with FastExp", b, a)
}
