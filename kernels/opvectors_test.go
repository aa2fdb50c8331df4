package kernels

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"bitalign/internal/golden"
)

// opVectorsFile pins the CPU reference's outputs for every op the Python library offers, on inputs both sides
// make from integer arithmetic alone (vectorValue): op, its parameters, and the sha256 of the output's
// little-endian bits. The Python package's GPU test (capture/python/tests/test_ops_gpu.py) runs the PTX through
// bitalign.ops on the same inputs and must match every hash: the Go reference, the Go engine's CUDA kernels and
// the PyTorch library agree bit for bit (go test ./kernels -run OpVectors -update rewrites it).
const opVectorsFile = "testdata/op_vectors.tsv"

// vectorValue is element i of input stream s: an integer in [-127, 127] over 2^(shift+e), e in 0…8, exactly
// representable in bf16 (8 significant bits) and spread over nine binades so that sums round (an order change
// shows), from a multiplicative hash; the Python tests' stream() computes the same.
func vectorValue(s uint32, i int, shift int) float32 {
	h := uint32(i)*2654435761 + s*40503
	h ^= h >> 15
	v := int32(h%255) - 127
	e := shift + int(h>>8)%9
	return float32(v) / float32(int64(1)<<e)
}

func stream(s uint32, n, shift int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = vectorValue(s, i, shift)
	}
	return x
}

func hashF32(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

func hashI32(v []int32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

func opVectors(t *testing.T) []byte {
	var b bytes.Buffer
	b.WriteString("# op\tparameters\tsha256 of the output's little-endian bits (go test ./kernels -run OpVectors -update)\n")
	line := func(op, params, h string) { fmt.Fprintf(&b, "%s\t%s\t%s\n", op, params, h) }
	for _, sh := range [][2]int{{1, 6}, {2, 10}, {16, 5}} {
		line("input", fmt.Sprintf("stream=%d n=100003 shift=%d", sh[0], sh[1]), hashF32(stream(uint32(sh[0]), 100003, sh[1])))
	}
	profiles := []Profile{Canonical, Standard}
	for _, p := range profiles {
		for _, dt := range []DType{BF16, F32} {
			for _, s := range [][3]int{{1, 64, 7}, {3, 1001, 256}, {17, 4096, 64}, {64, 256, 256}, {300, 1536, 96}} {
				for _, bias := range []bool{false, true} {
					M, K, N := s[0], s[1], s[2]
					x, w := stream(1, M*K, 6), stream(2, N*K, 10)
					var bb []float32
					if bias {
						bb = stream(3, N, 8)
					}
					out := make([]float32, M*N)
					MatmulForward(p, dt, out, x, w, bb, M, K, N)
					line("linear", fmt.Sprintf("profile=%s dt=%s M=%d K=%d N=%d bias=%t", p, dt, M, K, N, bias), hashF32(out))
				}
			}
		}
		// one rank's share of a row-parallel matmul (the rank's subtree, float32, unrounded): the first and the
		// last rank of each degree; bitalign.tp's tests add every rank's partials by the tree and must get the
		// linear rows' bits above
		for _, s := range [][3]int{{1, 64, 7}, {17, 4096, 64}, {300, 1536, 96}} {
			M, K, N := s[0], s[1], s[2]
			x, w := stream(1, M*K, 6), stream(2, N*K, 10)
			for _, tp := range []int{2, 4, 8} {
				kl := K / tp
				for _, r := range []int{0, tp - 1} {
					out := make([]float32, M*N)
					if err := MatmulPartial(p, out, columns(x, M, K, r*kl, (r+1)*kl), columns(w, N, K, r*kl, (r+1)*kl), M, kl, N, r, tp); err != nil {
						t.Fatal(err)
					}
					line("linear_partial", fmt.Sprintf("profile=%s M=%d K=%d N=%d tp=%d rank=%d", p, M, K, N, tp, r), hashF32(out))
				}
			}
		}
		for _, dt := range []DType{BF16, F32} {
			for _, s := range [][2]int{{1, 64}, {3, 1536}, {5, 4100}} {
				rows, C := s[0], s[1]
				x, w := stream(4, rows*C, 6), stream(5, C, 7)
				out := make([]float32, rows*C)
				RMSNormForward(p, dt, out, x, w, rows, C, 1e-6)
				line("rms_norm", fmt.Sprintf("profile=%s dt=%s rows=%d C=%d eps=1e-06", p, dt, rows, C), hashF32(out))
			}
		}
		for _, s := range [][5]int{{5, 5, 4, 2, 64}, {1, 70, 4, 2, 64}, {9, 9, 6, 1, 128}, {1, 130, 12, 2, 128}, {3, 300, 4, 4, 80}} {
			for _, dt := range []DType{BF16, F32} {
				T, S, nh, nkv, hd := s[0], s[1], s[2], s[3], s[4]
				q, k, v := stream(8, T*nh*hd, 6), stream(9, S*nkv*hd, 6), stream(10, S*nkv*hd, 6)
				pos := make([]int32, T)
				for i := range pos {
					pos[i] = int32(S - T + i)
				}
				out := make([]float32, T*nh*hd)
				if err := AttentionForward(p, dt, out, q, k, v, pos, T, S, nh, nkv, hd, AttentionScale(hd)); err != nil {
					t.Fatal(err)
				}
				line("attention", fmt.Sprintf("profile=%s dt=%s T=%d S=%d nh=%d nkv=%d hd=%d", p, dt, T, S, nh, nkv, hd), hashF32(out))
			}
		}
		for _, s := range [][2]int{{3, 1000}, {2, 151936}} {
			T, V := s[0], s[1]
			logits := stream(14, T*V, 5)
			out := make([]float32, T*V)
			if err := LogSoftmaxForward(p, out, logits, T, V, nil); err != nil {
				t.Fatal(err)
			}
			line("log_softmax", fmt.Sprintf("profile=%s T=%d V=%d", p, T, V), hashF32(out))
			targets := make([]int32, T)
			for i := range targets {
				targets[i] = int32(i*17) % int32(V)
			}
			lp := make([]float32, T)
			if err := LogProbs(p, lp, logits, targets, T, V, nil); err != nil {
				t.Fatal(err)
			}
			line("logprobs", fmt.Sprintf("profile=%s T=%d V=%d", p, T, V), hashF32(lp))
		}
	}
	for _, n := range []int{1, 1000, 70001} {
		a, c := stream(6, n, 6), stream(7, n, 6)
		out := make([]float32, n)
		ResidualForward(BF16, out, a, c, n)
		line("residual", fmt.Sprintf("dt=bf16 n=%d", n), hashF32(out))
		SwiGLUForward(BF16, out, a, c, n)
		line("swiglu", fmt.Sprintf("dt=bf16 n=%d", n), hashF32(out))
	}
	{
		T, heads, hd, maxPos := 6, 3, 64, 40
		x := stream(11, T*heads*hd, 6)
		cos, sin := stream(12, maxPos*hd/2, 7), stream(13, maxPos*hd/2, 7)
		pos := []int32{0, 1, 7, 20, 38, 39}
		out := make([]float32, len(x))
		if err := RoPEForward(BF16, out, x, pos, T, heads, hd, cos, sin); err != nil {
			t.Fatal(err)
		}
		line("rope", fmt.Sprintf("dt=bf16 T=%d heads=%d hd=%d maxPos=%d", T, heads, hd, maxPos), hashF32(out))
	}
	{
		V, C, T := 50, 96, 7
		table := stream(15, V*C, 6)
		tokens := make([]int32, T)
		for i := range tokens {
			tokens[i] = int32(i*31) % int32(V)
		}
		out := make([]float32, T*C)
		if err := EmbeddingForward(BF16, out, table, tokens, T, V, C); err != nil {
			t.Fatal(err)
		}
		line("embedding", fmt.Sprintf("dt=bf16 V=%d C=%d T=%d", V, C, T), hashF32(out))
	}
	for _, temp := range []float32{0, 0.8} {
		T, V := 4, 151936
		logits := stream(16, T*V, 5)
		tok := make([]int32, T)
		for r := range tok {
			tok[r] = Sample(logits[r*V:(r+1)*V], SampleParams{Temperature: temp, Seed: 42}, int64(1000+r), int64(5*r))
		}
		line("sample", fmt.Sprintf("T=%d V=%d temperature=%g seed=42", T, V, temp), hashI32(tok))
	}
	return b.Bytes()
}

func TestOpVectors(t *testing.T) {
	golden.Check(t, opVectorsFile, opVectors(t), "go test ./kernels -run OpVectors -update")
}

// ropeVectorsFile pins kernels.RoPETables (and its ω_j) for the bases and head dims of common models: the
// Python library's bitalign.rope must make the same tables (capture/python/tests/test_rope.py).
const ropeVectorsFile = "testdata/rope_vectors.tsv"

func TestRoPEVectors(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("# theta\thd\tmaxPos\tdt\tsha256(inv float64 bits)\tsha256(cos)\tsha256(sin) (go test ./kernels -run RoPEVectors -update)\n")
	for _, theta := range []float64{10000, 500000, 1e6, 5e6, 150000, 1234.5} {
		for _, hd := range []int{64, 80, 128} {
			for _, dt := range []DType{BF16, F32} {
				const maxPos = 32768
				inv, err := RoPEInvFreq(theta, hd)
				if err != nil {
					t.Fatal(err)
				}
				ib := make([]byte, 8*len(inv))
				for i, v := range inv {
					binary.LittleEndian.PutUint64(ib[8*i:], math.Float64bits(v))
				}
				cos, sin := RoPETables(theta, hd, maxPos, dt)
				fmt.Fprintf(&b, "%g\t%d\t%d\t%s\t%x\t%s\t%s\n", theta, hd, maxPos, dt, sha256.Sum256(ib), hashF32(cos), hashF32(sin))
			}
		}
	}
	golden.Check(t, ropeVectorsFile, b.Bytes(), "go test ./kernels -run RoPEVectors -update")
}

// TestSinCos64: sinCos64 is math.Sin and math.Cos (Go's pure-Go algorithm, no fusion with the default
// GOAMD64) over random arguments of every binade below 2^29 and the octant boundaries; RoPEInvFreq is within
// 8 ulps of 1/math.Pow (measured up to 7: Pow is Exp(y·Log(x)), and the exponent and the quotient round too) and exactly the
// correctly rounded value where that is known (test_rope.py checks every ω against decimal arithmetic).
func TestSinCos64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		x := r.Float64() * math.Ldexp(1, r.IntN(30)-1)
		if i%1000 == 0 {
			x = float64(i/1000) * math.Pi / 4
		}
		if x >= trigMax {
			continue
		}
		s, c := sinCos64(x)
		if s != math.Sin(x) || c != math.Cos(x) {
			t.Fatalf("x = %v: sinCos64 = (%v, %v), math = (%v, %v)", x, s, c, math.Sin(x), math.Cos(x))
		}
	}
	inv, err := RoPEInvFreq(10000, 128)
	if err != nil {
		t.Fatal(err)
	}
	for j, v := range inv {
		old := 1 / math.Pow(10000, float64(2*j)/128)
		if d := int64(math.Float64bits(v) - math.Float64bits(old)); d < -8 || d > 8 {
			t.Errorf("ω_%d = %v, 1/Pow = %v: %d ulps apart", j, v, old, d)
		}
	}
	if inv[32] != 0.01 { // 10000^(-64/128) = 1/100: the float64 nearest to it is the literal 0.01
		t.Errorf("ω_32 = %v, want 0.01", inv[32])
	}
	if _, err := RoPEInvFreq(-1, 64); err == nil {
		t.Error("a negative base was accepted")
	}
}
