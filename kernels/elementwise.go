package kernels

import "fmt"

// ResidualForward is out = round_dt(a + b). a, b, out are (n); out may alias a or b.
func ResidualForward(dt DType, out, a, b []float32, n int) {
	checkLen("ResidualForward", "a", a, n)
	checkLen("ResidualForward", "b", b, n)
	checkLen("ResidualForward", "out", out, n)
	for i := 0; i < n; i++ {
		out[i] = dt.Round(float32(a[i] + b[i]))
	}
}

// SwiGLUForward is out = round_dt(round_dt(SiLU(gate))·up), HF's act_fn(gate_proj(x)) * up_proj(x) as two
// ops in the model dtype. gate, up, out are (n); out may alias gate or up.
func SwiGLUForward(dt DType, out, gate, up []float32, n int) {
	checkLen("SwiGLUForward", "gate", gate, n)
	checkLen("SwiGLUForward", "up", up, n)
	checkLen("SwiGLUForward", "out", out, n)
	for i := 0; i < n; i++ {
		s := dt.Round(SiLU(gate[i]))
		out[i] = dt.Round(float32(s * up[i]))
	}
}

// EmbeddingForward copies rows of the table: table is (V, C), tokens is (T), out is (T, C).
// A token outside [0, V) is an error.
func EmbeddingForward(dt DType, out, table []float32, tokens []int32, T, V, C int) error {
	return EmbeddingForwardW(dt, out, WeightsF32(table), tokens, T, V, C)
}

// EmbeddingForwardW is EmbeddingForward with the table in its stored dtype (widened exactly, then rounded).
func EmbeddingForwardW(dt DType, out []float32, table Weights, tokens []int32, T, V, C int) error {
	checkWeights("EmbeddingForward", "table", table, V*C)
	checkLen("EmbeddingForward", "out", out, T*C)
	for t := 0; t < T; t++ {
		id := int(tokens[t])
		if id < 0 || id >= V {
			return fmt.Errorf("kernels: EmbeddingForward: token %d at row %d outside the vocabulary [0, %d)", id, t, V)
		}
		o := out[t*C : (t+1)*C]
		table.Widen(o, id*C)
		for i, v := range o {
			o[i] = dt.Round(v)
		}
	}
	return nil
}
