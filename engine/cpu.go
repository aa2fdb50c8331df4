package engine

import (
	"fmt"

	"bitalign/kernels"
	"bitalign/nvls"
)

// cpuBuf is a CPU backend buffer: a float32 slice (a view shares its parent's array).
type cpuBuf struct{ s []float32 }

func (b *cpuBuf) Len() int { return len(b.s) }

// cpuWeights is a weight in its stored dtype on the CPU backend (UploadWeights): the model's own tensor, no copy.
type cpuWeights struct{ w kernels.Weights }

func (b *cpuWeights) Len() int { return b.w.Len() }

// weights unwraps a weight operand: an UploadWeights Buf, or a float32 one (weights uploaded as values).
func weights(b Buf) kernels.Weights {
	switch b := b.(type) {
	case *cpuWeights:
		return b.w
	case nil:
		return kernels.Weights{}
	}
	return kernels.WeightsF32(s(b))
}

// CPU is the reference backend: every op is the package kernels function of the same name.
type CPU struct {
	err error
}

// NewCPU returns a CPU backend.
func NewCPU() *CPU { return &CPU{} }

func (c *CPU) Name() string { return "cpu" }
func (c *CPU) Err() error   { return c.err }

func (c *CPU) fail(err error) {
	if c.err == nil && err != nil {
		c.err = err
	}
}

// s unwraps a buffer; a nil Buf is a nil slice.
func s(b Buf) []float32 {
	if b == nil {
		return nil
	}
	return b.(*cpuBuf).s
}

func (c *CPU) Alloc(n int) Buf {
	if n < 0 {
		c.fail(fmt.Errorf("engine: cpu: alloc of %d elements", n))
		return &cpuBuf{}
	}
	return &cpuBuf{s: make([]float32, n)}
}

func (c *CPU) Free(Buf) {}

func (c *CPU) View(b Buf, off, n int) Buf {
	if wb, ok := b.(*cpuWeights); ok {
		if off < 0 || n < 0 || off+n > wb.Len() {
			c.fail(fmt.Errorf("engine: cpu: view [%d, %d) of a %d-element weight", off, off+n, wb.Len()))
			return &cpuBuf{}
		}
		return &cpuWeights{w: wb.w.Slice(off, off+n)}
	}
	x := s(b)
	if off < 0 || n < 0 || off+n > len(x) {
		c.fail(fmt.Errorf("engine: cpu: view [%d, %d) of a %d-element buffer", off, off+n, len(x)))
		return &cpuBuf{}
	}
	return &cpuBuf{s: x[off : off+n : off+n]}
}

func (c *CPU) Upload(dst Buf, src []float32) {
	if c.err == nil && len(src) != dst.Len() {
		c.fail(fmt.Errorf("engine: cpu: upload of %d elements into %d", len(src), dst.Len()))
		return
	}
	copy(s(dst), src)
}

func (c *CPU) UploadWeights(w kernels.Weights) Buf { return &cpuWeights{w: w} }

func (c *CPU) Download(dst []float32, src Buf) error {
	if c.err != nil {
		return c.err
	}
	if len(dst) != src.Len() {
		return fmt.Errorf("engine: cpu: download of %d elements into %d", src.Len(), len(dst))
	}
	if wb, ok := src.(*cpuWeights); ok {
		wb.w.Widen(dst, 0)
		return nil
	}
	copy(dst, s(src))
	return nil
}

func (c *CPU) Copy(dst, src Buf) {
	if c.err == nil && dst.Len() != src.Len() {
		c.fail(fmt.Errorf("engine: cpu: copy of %d elements into %d", src.Len(), dst.Len()))
		return
	}
	if wb, ok := src.(*cpuWeights); ok {
		wb.w.Widen(s(dst), 0)
		return
	}
	copy(s(dst), s(src))
}

func (c *CPU) Embed(out, table Buf, ids []int32, H int, dt kernels.DType) {
	if c.err != nil {
		return
	}
	c.fail(kernels.EmbeddingForwardW(dt, s(out), weights(table), ids, len(ids), table.Len()/H, H))
}

func (c *CPU) Matmul(p kernels.Profile, out, x, w, bias Buf, M, K, N int, dt kernels.DType) {
	if c.err != nil {
		return
	}
	if p == kernels.TC { // K is never split here: one chain over K (tc.2)
		c.fail(kernels.MatmulTCW(kernels.ColumnParallel, dt, s(out), s(x), weights(w), s(bias), M, K, N))
		return
	}
	kernels.MatmulForwardW(p, dt, s(out), s(x), weights(w), s(bias), M, K, N)
}

func (c *CPU) MatmulPartial(p kernels.Profile, out, x, w Buf, M, kLocal, N, rank, tp int) {
	if c.err != nil {
		return
	}
	if p == kernels.TC { // the rank's subtree of its 8/tp segment chains; AllReduce finishes the tree (tc.2)
		c.fail(kernels.MatmulTCPartialW(s(out), s(x), weights(w), M, kLocal, N, tp))
		return
	}
	c.fail(kernels.MatmulPartialW(p, s(out), s(x), weights(w), M, kLocal, N, rank, tp))
}

func (c *CPU) MatmulFinish(out, bias Buf, M, N int, dt kernels.DType) {
	if c.err != nil {
		return
	}
	kernels.MatmulFinish(dt, s(out), s(bias), M, N)
}

func (c *CPU) RMSNorm(p kernels.Profile, out, x, w Buf, rows, C int, eps float32, dt kernels.DType) {
	if c.err != nil {
		return
	}
	kernels.RMSNormForwardW(p, dt, s(out), s(x), weights(w), rows, C, eps)
}

func (c *CPU) RoPE(out, x Buf, pos []int32, T, heads, hd int, cos, sin Buf, dt kernels.DType) {
	if c.err != nil {
		return
	}
	for _, p := range pos {
		if int(p+1)*hd/2 > cos.Len() {
			c.fail(fmt.Errorf("engine: cpu: RoPE at position %d beyond the %d-position table", p, cos.Len()/(hd/2)))
			return
		}
	}
	kernels.RoPEForward(dt, s(out), s(x), pos, T, heads, hd, s(cos), s(sin))
}

func (c *CPU) Attention(p kernels.Profile, out, q, k, v Buf, start, n, heads, kvHeads, hd int, dt kernels.DType, o AttnOptions) {
	if c.err != nil {
		return
	}
	qpos := make([]int32, n)
	for i := range qpos {
		qpos[i] = int32(start + i)
	}
	S := start + n
	if o.FastExp { // the fast-exp fault: canonical attention with an approximate exp in the softmax
		c.fail(kernels.AttentionForwardExp(kernels.Canonical, kernels.FastExp, dt, s(out), s(q), s(k), s(v), qpos, n, S, heads, kvHeads, hd, kernels.AttentionScale(hd)))
		return
	}
	if p == kernels.TC {
		c.fail(kernels.AttentionTC(dt, s(out), s(q), s(k), s(v), qpos, n, S, heads, kvHeads, hd, kernels.AttentionScale(hd)))
		return
	}
	c.fail(kernels.AttentionForward(p, dt, s(out), s(q), s(k), s(v), qpos, n, S, heads, kvHeads, hd, kernels.AttentionScale(hd)))
}

func (c *CPU) SwiGLU(out, gate, up Buf, n int, dt kernels.DType) {
	if c.err != nil {
		return
	}
	kernels.SwiGLUForward(dt, s(out), s(gate), s(up), n)
}

func (c *CPU) Residual(out, a, b Buf, dt kernels.DType) {
	if c.err != nil {
		return
	}
	kernels.ResidualForward(dt, s(out), s(a), s(b), out.Len())
}

func (c *CPU) Round(x Buf, dt kernels.DType) {
	if c.err != nil {
		return
	}
	dt.RoundSlice(s(x))
}

func (c *CPU) AllReduce(comm nvls.Comm, x Buf) {
	if c.err != nil {
		return
	}
	c.fail(comm.AllReduce(s(x)))
}

func (c *CPU) AllGather(comm nvls.Comm, out, in Buf, rows, cols int) {
	if c.err != nil {
		return
	}
	// nvls gathers contiguous rank blocks: gather (rows, cols) blocks, then interleave them into rows.
	n := comm.Size()
	tmp := make([]float32, n*rows*cols)
	if err := comm.AllGather(tmp, s(in)); err != nil {
		c.fail(err)
		return
	}
	o := s(out)
	for r := 0; r < n; r++ {
		for t := 0; t < rows; t++ {
			copy(o[t*cols*n+r*cols:t*cols*n+(r+1)*cols], tmp[(r*rows+t)*cols:(r*rows+t+1)*cols])
		}
	}
}

func (c *CPU) LogProbs(p kernels.Profile, out, logits Buf, targets []int32, T, vLocal int, comm nvls.Comm) {
	if c.err != nil {
		return
	}
	var red kernels.Reducer
	if comm != nil {
		red = comm
	}
	c.fail(kernels.LogProbs(p, s(out), s(logits), targets, T, vLocal, red))
}
