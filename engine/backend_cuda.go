package engine

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"bitalign/cuda"
	"bitalign/kernels"
	cudakernels "bitalign/kernels/cuda"
	"bitalign/nvls"
)

// cudaDevice is one GPU with its loaded kernels, opened once per process and shared by every CUDA backend
// placed on it (ops of different backends interleave on the device's thread; each op is enqueued whole).
type cudaDevice struct {
	d     *cuda.Device
	k     *cudakernels.Kernels
	stage stager   // weight uploads (upload_cuda.go)
	mem   memCache // freed buffers kept for the next Alloc of their size (launch_cuda.go)
}

var cudaDevices = struct {
	sync.Mutex
	m map[int]*cudaDevice
}{m: map[int]*cudaDevice{}}

func openCUDADevice(ordinal int) (*cudaDevice, error) {
	cudaDevices.Lock()
	defer cudaDevices.Unlock()
	if cd := cudaDevices.m[ordinal]; cd != nil {
		return cd, nil
	}
	d, err := cuda.Open(ordinal)
	if err != nil {
		return nil, err
	}
	var k *cudakernels.Kernels
	if err := d.Do(func(c *cuda.Ctx) (err error) { k, err = cudakernels.Load(c); return err }); err != nil {
		d.Close()
		return nil, err
	}
	cd := &cudaDevice{d: d, k: k, mem: newMemCache(d.TotalMem())}
	cudaDevices.m[ordinal] = cd
	return cd, nil
}

// cudaBuf is device memory: n float32 at p, or n 16-bit weights (w16 BF16 or F16: an UploadWeights buffer
// holding the checkpoint's bits, read by the cudakernels.WeightSuffix twins; 0: float32). A view shares its
// root's allocation (root false).
type cudaBuf struct {
	p    cuda.Ptr
	n    int
	root bool
	w16  kernels.DType
}

// elem is the size of one element in bytes.
func (b *cudaBuf) elem() int64 {
	if b.w16 != 0 {
		return int64(b.w16.Size())
	}
	return 4
}

// weightDType is the dtype x's elements are stored in: BF16 or F16 for a weight buffer of 16-bit bits, else F32.
func weightDType(x Buf) kernels.DType {
	if cb, ok := x.(*cudaBuf); ok && cb.w16 != 0 {
		return cb.w16
	}
	return kernels.F32
}

func (b *cudaBuf) Len() int { return b.n }

// CUDA is the GPU backend: weights, activations and KV caches live in device memory, every op is the
// kernels/cuda twin of the CPU backend's kernels call (bitwise the same), and only Download brings data back.
// Collectives (AllReduce, AllGather, the LogProbs reductions over ranks) go through the host with the given
// nvls.Comm.
type CUDA struct {
	dev   *cudaDevice
	name  string
	errMu sync.Mutex // err is set by posted ops on the device thread too
	err   error
	args  argRing  // the small host arrays of the ops (ids, positions, targets) on their way (launch_cuda.go)
	st    cuda.Ptr // this backend's LogProbs statistics (m, S, d): 3·T floats
	stN   int64
	nar   cuda.Ptr // DownloadBF16's device buffer of bf16 bits
	narN  int64

	fp            *cudakernels.Fingerprinter // FingerprintRows (record_cuda.go)
	fpOut         cuda.Ptr                   // its output, 8 bytes a row
	fpOutN        int64
	fpUnavailable bool      // the loaded PTX has no fingerprint_rows
	ring          *copyRing // StartDownload's pinned buffers
	ringFailed    bool      // pinned memory unavailable: synchronous copies
	ringBytes     int64     // the ring's size (0: pinnedRingBytes; tests make it small)
	tcx           cuda.Ptr  // the tc matmul's x as bf16 bits (tcOperands)
	tcxN          int64
	tcw           cuda.Ptr // the tc matmul's w as bf16 bits when it is held as float32 (tcOperands)
	tcwN          int64
}

// NewCUDA returns a backend on GPU ordinal. Errors wrap cuda.ErrUnavailable when there is no usable GPU.
func NewCUDA(ordinal int) (*CUDA, error) {
	cd, err := openCUDADevice(ordinal)
	if err != nil {
		return nil, err
	}
	return &CUDA{dev: cd, name: fmt.Sprintf("cuda:%d", ordinal)}, nil
}

// CUDAFactory places TP rank r on GPU r mod the number of GPUs. It fails (wrapping cuda.ErrUnavailable) when
// no GPU is usable, and describes the devices it found.
func CUDAFactory() (BackendFactory, string, error) {
	n, err := cuda.DeviceCount()
	if err == nil && n == 0 {
		err = fmt.Errorf("cuda: no CUDA device: %w", cuda.ErrUnavailable)
	}
	if err != nil {
		return nil, "", err
	}
	first, err := openCUDADevice(0)
	if err != nil {
		return nil, "", err
	}
	desc := first.d.String()
	if n > 1 {
		desc = fmt.Sprintf("%s (+%d more)", desc, n-1)
	}
	return func(rank int) (Backend, error) { return NewCUDA(rank % n) }, desc, nil
}

// DescribeDevices lists the compute backends this machine offers, one line each: the CUDA driver and its
// GPUs (or why CUDA is unavailable), then the CPU.
func DescribeDevices() []string {
	var out []string
	n, err := cuda.DeviceCount()
	if err != nil {
		out = append(out, fmt.Sprintf("cuda: unavailable (%v)", err))
	} else {
		v, _ := cuda.DriverVersion()
		out = append(out, fmt.Sprintf("cuda: driver %d.%d, %d device(s)", v/1000, (v%1000)/10, n))
		for i := 0; i < n; i++ {
			d, err := cuda.Open(i)
			if err != nil {
				out = append(out, fmt.Sprintf("  %d: %v", i, err))
				continue
			}
			out = append(out, fmt.Sprintf("  %d: %s", i, d))
			d.Close()
		}
	}
	return append(out, "cpu: always available (the reference engine)")
}

// Devices are the --device values SelectBackend accepts ("gpu" is also taken for "cuda").
var Devices = []string{"auto", "cpu", "cuda"}

// SelectBackend resolves --device: "cpu" (nil factory: the CPU backend), "cuda" (an error when no GPU is
// usable) or "auto" (CUDA when usable, else the CPU). The string says which backend runs and, for auto's
// fallback, why.
func SelectBackend(device string) (BackendFactory, string, error) {
	switch device {
	case "", "cpu":
		return nil, "cpu", nil
	case "cuda", "gpu":
		f, desc, err := CUDAFactory()
		if err != nil {
			return nil, "", fmt.Errorf("engine: --device cuda: %w", err)
		}
		return f, desc, nil
	case "auto":
		f, desc, err := CUDAFactory()
		if err != nil {
			return nil, fmt.Sprintf("cpu (no usable GPU: %v)", err), nil
		}
		return f, desc, nil
	}
	return nil, "", fmt.Errorf("engine: unknown device %q (want cpu, cuda or auto)", device)
}

func (b *CUDA) Name() string { return b.name }

// Err waits until the device thread has launched every op queued before it, then returns the first error.
// A kernel's own fault surfaces at the next synchronising call (a Download, Synchronize).
func (b *CUDA) Err() error {
	b.dev.d.Do(func(*cuda.Ctx) error { return nil }) //nolint:errcheck // a barrier; a closed device failed earlier
	return b.failure()
}

// failure is the first error recorded so far (no barrier).
func (b *CUDA) failure() error {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	return b.err
}

func (b *CUDA) fail(err error) {
	if err == nil {
		return
	}
	b.errMu.Lock()
	defer b.errMu.Unlock()
	if b.err == nil {
		b.err = fmt.Errorf("engine: %s: %w", b.name, err)
	}
}

// do runs f on the device thread and waits for it, unless an error is pending: for what needs f's result now
// (an allocation's address, downloaded values).
func (b *CUDA) do(f func(c *cuda.Ctx, k *cudakernels.Kernels) error) {
	if b.failure() != nil {
		return
	}
	b.fail(b.dev.d.Do(func(c *cuda.Ctx) error { return f(c, b.dev.k) }))
}

// cudaPtr unwraps a buffer; nil is the null pointer.
func cudaPtr(x Buf) cuda.Ptr {
	if x == nil {
		return 0
	}
	return x.(*cudaBuf).p
}

// operand is a Buf as an op's closure captures it: its address, length and stored dtype now (see launch).
type operand struct {
	p  cuda.Ptr
	n  int
	dt kernels.DType
}

func operandOf(x Buf) operand { return operand{p: cudaPtr(x), n: x.Len(), dt: weightDType(x)} }

// cudaGrow makes *buf hold at least bytes (synchronising before it frees the old one).
func cudaGrow(c *cuda.Ctx, buf *cuda.Ptr, have *int64, bytes int64) error {
	if bytes <= *have {
		return nil
	}
	if *buf != 0 {
		if err := c.Synchronize(); err != nil {
			return err
		}
		if err := c.Free(*buf); err != nil {
			return err
		}
		*buf, *have = 0, 0
	}
	n := max(bytes, 4096)
	q, err := c.Alloc(n)
	if err != nil {
		return err
	}
	*buf, *have = q, n
	return nil
}

func (b *CUDA) Alloc(n int) Buf {
	if n < 0 {
		b.fail(fmt.Errorf("alloc of %d elements", n))
		return &cudaBuf{}
	}
	buf := &cudaBuf{n: n, root: true}
	if n == 0 {
		return buf
	}
	bytes := int64(n) * 4
	if p, ok := b.dev.mem.take(bytes); ok { // no trip to the device thread: the zeroing is queued
		buf.p = p
		b.launch(func(c *cuda.Ctx, _ *cudakernels.Kernels) error { return c.Memset8Async(p, 0, bytes, nil) })
		return buf
	}
	b.do(func(c *cuda.Ctx, _ *cudakernels.Kernels) error {
		q, err := b.allocDevice(c, bytes)
		if err != nil {
			return fmt.Errorf("alloc of %d floats: %w", n, err)
		}
		buf.p = q
		return c.Memset8Async(q, 0, bytes, nil) // in stream order, before any op that uses it
	})
	return buf
}

func (b *CUDA) Free(x Buf) {
	cb, ok := x.(*cudaBuf)
	if !ok || cb == nil || !cb.root || cb.p == 0 {
		return
	}
	ptr, bytes := cb.p, int64(cb.n)*cb.elem()
	cb.p = 0
	if b.dev.mem.put(ptr, bytes) { // the ops posted before this Free are launched before the next user's
		return
	}
	// freeing is allowed after an error too (so that a failed run releases its memory)
	b.dev.d.Do(func(c *cuda.Ctx) error { return c.Free(ptr) }) //nolint:errcheck
}

func (b *CUDA) View(x Buf, off, n int) Buf {
	cb := x.(*cudaBuf)
	if off < 0 || n < 0 || off+n > cb.n {
		b.fail(fmt.Errorf("view [%d, %d) of a %d-element buffer", off, off+n, cb.n))
		return &cudaBuf{}
	}
	return &cudaBuf{p: cb.p.Add(int64(off) * cb.elem()), n: n, w16: cb.w16}
}

func (b *CUDA) Upload(dst Buf, src []float32) {
	if b.failure() == nil && len(src) != dst.Len() {
		b.fail(fmt.Errorf("upload of %d elements into %d", len(src), dst.Len()))
		return
	}
	b.do(func(c *cuda.Ctx, _ *cudakernels.Kernels) error { return cuda.Upload(c, cudaPtr(dst), src) })
}

func (b *CUDA) Download(dst []float32, src Buf) error {
	if b.failure() != nil {
		return b.failure()
	}
	if len(dst) != src.Len() {
		return fmt.Errorf("engine: %s: download of %d elements into %d", b.name, src.Len(), len(dst))
	}
	if wdt := weightDType(src); wdt != kernels.F32 { // a 16-bit weight: its bits, widened on the host
		bits := make([]uint16, len(dst))
		b.do(func(c *cuda.Ctx, _ *cudakernels.Kernels) error { return cuda.Download(c, bits, cudaPtr(src)) })
		kernels.WeightsBits(wdt, bits, nil).Widen(dst, 0)
		return b.failure()
	}
	b.do(func(c *cuda.Ctx, _ *cudakernels.Kernels) error { return cuda.Download(c, dst, cudaPtr(src)) })
	return b.failure()
}

// DownloadBF16 narrows src's float32 values to bf16 bits on the device (narrow_bf16, fp.F32ToBF16's rule) and
// downloads the bits: the recorder's copies of bf16 ops move half the bytes. ok false when the loaded PTX has
// no narrow_bf16 (or src is a 16-bit weight buffer).
func (b *CUDA) DownloadBF16(dst []uint16, src Buf) (bool, error) {
	if b.failure() != nil {
		return false, b.failure()
	}
	if weightDType(src) != kernels.F32 || !b.dev.k.HasNarrowBF16() {
		return false, nil
	}
	if len(dst) != src.Len() {
		return false, fmt.Errorf("engine: %s: download of %d elements into %d", b.name, src.Len(), len(dst))
	}
	b.do(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		if err := cudaGrow(c, &b.nar, &b.narN, int64(2*len(dst))); err != nil {
			return err
		}
		if err := k.NarrowBF16(c, b.nar, cudaPtr(src), len(dst)); err != nil {
			return err
		}
		return cuda.Download(c, dst, b.nar) // synchronous: ordered after the kernel on the default stream
	})
	err := b.failure()
	return err == nil, err
}

// releaseScratch frees DownloadBF16's buffer, the tc matmul's operand buffers, the fingerprint tables and the
// pinned copy ring (the run is over and its writers drained; group.close).
func (b *CUDA) releaseScratch() {
	b.dev.d.Do(func(c *cuda.Ctx) error { //nolint:errcheck // freeing after an error too
		b.releaseRing(c)
		b.args.release(c)
		b.dev.mem.trim(c) //nolint:errcheck
		for _, s := range []struct {
			p *cuda.Ptr
			n *int64
		}{{&b.nar, &b.narN}, {&b.tcx, &b.tcxN}, {&b.tcw, &b.tcwN}} {
			if *s.p != 0 {
				c.Free(*s.p) //nolint:errcheck
				*s.p, *s.n = 0, 0
			}
		}
		return nil
	})
}

func (b *CUDA) Copy(dst, src Buf) {
	if b.failure() == nil && dst.Len() != src.Len() {
		b.fail(fmt.Errorf("copy of %d elements into %d", src.Len(), dst.Len()))
		return
	}
	if ws, wd := weightDType(src), weightDType(dst); ws != wd {
		b.fail(fmt.Errorf("copy of a %v buffer into a %v one", ws, wd))
		return
	}
	d, sp, bytes := cudaPtr(dst), cudaPtr(src), int64(src.Len())*dst.(*cudaBuf).elem()
	b.launch(func(c *cuda.Ctx, _ *cudakernels.Kernels) error {
		// on the default stream with the kernels, not the synchronous cuMemcpyDtoD: the forward's KV-cache
		// copies (4 a layer and sequence) cost 45 µs each that way on the H200 (BenchmarkForwardSize's table)
		return c.CopyDtoDAsync(d, sp, bytes, nil)
	})
}

func (b *CUDA) Embed(out, table Buf, ids []int32, H int, dt kernels.DType) {
	V := table.Len() / H
	for t, id := range ids {
		if id < 0 || int(id) >= V {
			b.fail(fmt.Errorf("kernels: EmbeddingForward: token %d at row %d outside the vocabulary [0, %d)", id, t, V))
			return
		}
	}
	ids = slices.Clone(ids)
	o, tp, wdt := cudaPtr(out), cudaPtr(table), weightDType(table)
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		d, err := cudaStage(b, c, ids)
		if err != nil {
			return err
		}
		return k.EmbeddingForwardW(c, dt, o, tp, wdt, d, len(ids), V, H)
	})
}

func (b *CUDA) Matmul(pr kernels.Profile, out, x, w, bias Buf, M, K, N int, dt kernels.DType) {
	o, xo, wo, bp := cudaPtr(out), operandOf(x), operandOf(w), cudaPtr(bias)
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		if pr == kernels.TC { // K is never split here: one chain over K (tc.2)
			xb, wb, err := b.tcOperands(c, k, xo, wo, M, K, N)
			if err != nil {
				return err
			}
			return k.MatmulTC(c, kernels.ColumnParallel, cudakernels.DTCode(dt), o, xb, wb, bp, M, K, N)
		}
		return k.MatmulForwardW(c, pr, cudakernels.DTCode(dt), o, xo.p, wo.p, wo.dt, bp, M, K, N)
	})
}

func (b *CUDA) MatmulPartial(pr kernels.Profile, out, x, w Buf, M, kLocal, N, rank, tp int) {
	o, xo, wo := cudaPtr(out), operandOf(x), operandOf(w)
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		if pr == kernels.TC { // the rank's subtree of its 8/tp segment chains; AllReduce finishes the tree (tc.2)
			xb, wb, err := b.tcOperands(c, k, xo, wo, M, kLocal, N)
			if err != nil {
				return err
			}
			return k.MatmulTCPartial(c, o, xb, wb, M, kLocal, N, tp)
		}
		return k.MatmulPartialW(c, pr, o, xo.p, wo.p, wo.dt, M, kLocal, N, tp)
	})
}

// ServesProfile: the tc profile needs the loaded PTX's tc modules (cudakernels.HasTC) and narrow_bf16 (the
// activations' narrowing for the tc matmul); every other profile runs on the committed kernels.
func (b *CUDA) ServesProfile(p kernels.Profile) error {
	if p != kernels.TC {
		return nil
	}
	if err := b.dev.k.HasTC(); err != nil {
		return fmt.Errorf("engine: %s: --profile tc needs the tc kernels (embedded, kernels/cuda/tc/*.ptx; make ptx rebuilds them; a BITALIGN_PTX_DIR tree must hold kernels/cuda/tc/): %w", b.name, err)
	}
	if err := b.dev.k.HasTCAttention(); err != nil {
		return fmt.Errorf("engine: %s: --profile tc needs the tc attention kernels (embedded, kernels/cuda/tc/tc_attention.ptx; make ptx rebuilds it; a BITALIGN_PTX_DIR tree must hold kernels/cuda/tc/): %w", b.name, err)
	}
	if !b.dev.k.HasNarrowBF16() {
		return fmt.Errorf("engine: %s: --profile tc needs narrow_bf16, which the loaded PTX lacks (make ptx)", b.name)
	}
	return nil
}

// tcOperands gives the tc matmul its operands as bf16 bits on the device (cudakernels.MatmulTC reads uint16
// bf16, the engine holds activations as float32): x (M, K) narrowed into this backend's scratch (exact: the
// activations are bf16 values, every op rounds them), w as it is when it is a bf16 weight buffer, else (PTX
// without the _bf16w kernels holds weights as float32) narrowed likewise. The narrowing is narrow_bf16
// (fp.F32ToBF16), ordered before the matmul on the default stream.
func (b *CUDA) tcOperands(c *cuda.Ctx, k *cudakernels.Kernels, x, w operand, M, K, N int) (xb, wb cuda.Ptr, err error) {
	if err := k.HasTC(); err != nil {
		return 0, 0, fmt.Errorf("--profile tc: %w", err)
	}
	if !k.HasNarrowBF16() {
		return 0, 0, fmt.Errorf("--profile tc: the loaded PTX has no narrow_bf16 (rebuild it: make ptx)")
	}
	if x.n < M*K || w.n < N*K {
		return 0, 0, fmt.Errorf("kernels: MatmulTC: x has %d elements, w %d, shape (%d, %d)·(%d, %d)ᵀ needs %d and %d",
			x.n, w.n, M, K, N, K, M*K, N*K)
	}
	if err := cudaGrow(c, &b.tcx, &b.tcxN, 2*int64(M)*int64(K)); err != nil {
		return 0, 0, err
	}
	if err := k.NarrowBF16(c, b.tcx, x.p, M*K); err != nil {
		return 0, 0, err
	}
	switch w.dt {
	case kernels.BF16:
		return b.tcx, w.p, nil
	case kernels.F16: // CheckProfile refuses an f16 checkpoint for tc before a weight is placed
		return 0, 0, fmt.Errorf("the tc matmul takes bf16 weights, not f16 (tc.2)")
	}
	if err := cudaGrow(c, &b.tcw, &b.tcwN, 2*int64(N)*int64(K)); err != nil {
		return 0, 0, err
	}
	if err := k.NarrowBF16(c, b.tcw, w.p, N*K); err != nil {
		return 0, 0, err
	}
	return b.tcx, b.tcw, nil
}

func (b *CUDA) MatmulFinish(out, bias Buf, M, N int, dt kernels.DType) {
	o, bp := cudaPtr(out), cudaPtr(bias)
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		if bp != 0 {
			if err := k.AddBias(c, o, bp, M, N); err != nil { // y ⊕ bias[n]
				return err
			}
		}
		return k.Round(c, dt, o, M*N) // then round_dt
	})
}

func (b *CUDA) RMSNorm(pr kernels.Profile, out, x, w Buf, rows, C int, eps float32, dt kernels.DType) {
	o, xp, wo := cudaPtr(out), cudaPtr(x), operandOf(w)
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		return k.RMSNormForwardW(c, pr, dt, o, xp, wo.p, wo.dt, rows, C, eps)
	})
}

func (b *CUDA) RoPE(out, x Buf, pos []int32, T, heads, hd int, cos, sin Buf, dt kernels.DType) {
	for _, q := range pos {
		if q < 0 || int(q+1)*hd/2 > cos.Len() {
			b.fail(fmt.Errorf("RoPE at position %d beyond the %d-position table", q, cos.Len()/(hd/2)))
			return
		}
	}
	pos = slices.Clone(pos[:T])
	o, xp, cp, sp := cudaPtr(out), cudaPtr(x), cudaPtr(cos), cudaPtr(sin)
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		d, err := cudaStage(b, c, pos)
		if err != nil {
			return err
		}
		return k.RoPEForward(c, dt, o, xp, d, T, heads, hd, cp, sp)
	})
}

func (b *CUDA) Attention(pr kernels.Profile, out, q, k, v Buf, start, n, heads, kvHeads, hd int, dt kernels.DType, o AttnOptions) {
	if kvHeads <= 0 || heads%kvHeads != 0 {
		b.fail(fmt.Errorf("kernels: AttentionForward: %d query heads not a multiple of %d kv heads", heads, kvHeads))
		return
	}
	qpos := make([]int32, n)
	for i := range qpos {
		qpos[i] = int32(start + i)
	}
	S := start + n
	scale := kernels.AttentionScale(hd)
	op, qp, kp, vp := cudaPtr(out), cudaPtr(q), cudaPtr(k), cudaPtr(v)
	b.launch(func(c *cuda.Ctx, kk *cudakernels.Kernels) error {
		d, err := cudaStage(b, c, qpos)
		if err != nil {
			return err
		}
		if o.FastExp {
			return kk.AttentionFastExp(c, dt, op, qp, kp, vp, d, n, S, heads, kvHeads, hd, scale)
		}
		return kk.AttentionForward(c, pr, dt, op, qp, kp, vp, d, n, S, heads, kvHeads, hd, scale)
	})
}

// AttentionBatch: the tc profile's attention of a layer's sequences in one launch (cudakernels.AttentionTCBatch:
// grid z the sequence, each with its own Attention call's bits). The positions of every sequence and the table of
// sequences are staged through the argument ring. ok false for the other profiles, the fast-exp fault and PTX
// without the batched entries.
func (b *CUDA) AttentionBatch(pr kernels.Profile, seqs []AttnSeq, heads, kvHeads, hd int, dt kernels.DType, o AttnOptions) bool {
	kv16 := len(seqs) > 0 && seqs[0].KV16
	if !kv16 && (pr != kernels.TC || o.FastExp || b.dev.k.HasTCAttentionBatch(hd) != nil) {
		return false
	}
	if kv16 && (pr != kernels.TC || o.FastExp) { // the rank asked BF16Caches, which admits only these
		b.fail(fmt.Errorf("engine: bf16 KV caches reached a %v attention (fast exp %v)", pr, o.FastExp))
		return true
	}
	if kvHeads <= 0 || heads%kvHeads != 0 {
		b.fail(fmt.Errorf("kernels: AttentionForward: %d query heads not a multiple of %d kv heads", heads, kvHeads))
		return true
	}
	var qpos []int32
	ks := make([]cudakernels.TCAttSeq, 0, len(seqs))
	offs := make([]int, 0, len(seqs)) // each sequence's first position in qpos
	for _, a := range seqs {
		if a.N == 0 {
			continue
		}
		offs = append(offs, len(qpos))
		for i := 0; i < a.N; i++ {
			qpos = append(qpos, int32(a.Start+i))
		}
		ks = append(ks, cudakernels.TCAttSeq{Out: cudaPtr(a.Out), Q: cudaPtr(a.Q), K: cudaPtr(a.K), V: cudaPtr(a.V),
			T: a.N, S: a.Start + a.N})
	}
	if len(ks) == 0 {
		return true
	}
	scale := kernels.AttentionScale(hd)
	b.launch(func(c *cuda.Ctx, kk *cudakernels.Kernels) error {
		pos, err := cudaStage(b, c, qpos)
		if err != nil {
			return err
		}
		for i := range ks {
			ks[i].Pos = pos.Add(4 * int64(offs[i]))
		}
		desc, err := cudaStage(b, c, cudakernels.TCAttSeqWords(ks))
		if err != nil {
			return err
		}
		if kv16 {
			return kk.AttentionTCBatchKV16(c, dt, desc, ks, heads, kvHeads, hd, scale)
		}
		return kk.AttentionTCBatch(c, dt, desc, ks, heads, kvHeads, hd, scale)
	})
	return true
}

// BF16Caches: the tc profile's KV caches are bf16 on the GPU where its batched attention is loaded for hd
// (AttentionTCBatchKV16 reads them with the same bits; half the bytes of a float32 cache). BITALIGN_KV_CACHE=f32
// keeps them float32 (to compare).
func (b *CUDA) BF16Caches(p kernels.Profile, hd int) bool {
	return p == kernels.TC && os.Getenv("BITALIGN_KV_CACHE") != "f32" && b.dev.k.HasTCAttentionBatch(hd) == nil
}

// NarrowBF16 writes the bf16 bits of src's n float32 values into dst (n/2 float32 slots).
func (b *CUDA) NarrowBF16(dst, src Buf, n int) {
	d, s := cudaPtr(dst), cudaPtr(src)
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error { return k.NarrowBF16(c, d, s, n) })
}

func (b *CUDA) SwiGLU(out, gate, up Buf, n int, dt kernels.DType) {
	o, gp, up_ := cudaPtr(out), cudaPtr(gate), cudaPtr(up)
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error { return k.SwiGLUForward(c, dt, o, gp, up_, n) })
}

func (b *CUDA) Residual(out, a, x Buf, dt kernels.DType) {
	o, ap, xp, n := cudaPtr(out), cudaPtr(a), cudaPtr(x), out.Len()
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		return k.ResidualForward(c, cudakernels.DTCode(dt), o, ap, xp, n)
	})
}

func (b *CUDA) Round(x Buf, dt kernels.DType) {
	xp, n := cudaPtr(x), x.Len()
	b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error { return k.Round(c, dt, xp, n) })
}

// hostRoundTrip downloads x, applies f on the host and uploads the result (collectives over the host comm).
func (b *CUDA) hostRoundTrip(x Buf, f func(h []float32) error) {
	if b.failure() != nil {
		return
	}
	h := make([]float32, x.Len())
	if err := b.Download(h, x); err != nil {
		return
	}
	if err := f(h); err != nil {
		b.fail(err)
		return
	}
	b.Upload(x, h)
}

// AllReduce sums x over the ranks: in device memory when comm is an nvls GPU rank on this backend's GPU
// (CUDACollectives), else through the host.
func (b *CUDA) AllReduce(comm nvls.Comm, x Buf) {
	if gc, ok := comm.(*nvls.GPUComm); ok && gc.Device() == b.dev.d {
		b.do(func(c *cuda.Ctx, _ *cudakernels.Kernels) error {
			p := cudaPtr(x) // in place, on the default stream like every kernel of this backend
			if err := gc.AllReduceDevice(c, nil, p, p, int64(x.Len()), nvls.ElemF32); err != nil {
				return err
			}
			return gc.Wait(c, nil) // completes each collective before the next: required when host-slice calls interleave
		})
		return
	}
	b.hostRoundTrip(x, comm.AllReduce)
}

// GPUCollectives returns the GPU communicators for a TP group of tp ranks on the CUDA backend when the machine
// has a GPU per rank (nvls's peer-to-peer transport: the same bits as the CPU transport, without host round
// trips); nil keeps the CPU transport.
func GPUCollectives(backend BackendFactory, tp int) CollectivesFactory {
	if backend == nil || tp < 2 {
		return nil
	}
	if n, err := cuda.DeviceCount(); err != nil || n < tp {
		return nil
	}
	return CUDACollectives()
}

// CUDACollectives is a RunOptions.Collectives whose TP ranks talk through an nvls GPU group on GPUs
// 0..tp-1, the GPUs CUDAFactory puts those ranks on (tp must not exceed the GPU count).
func CUDACollectives() CollectivesFactory {
	return func(tp int) ([]nvls.Comm, func() error, error) {
		n, err := cuda.DeviceCount()
		if err != nil {
			return nil, nil, err
		}
		if tp > n {
			return nil, nil, fmt.Errorf("GPU collectives for TP %d need %d GPUs, this machine has %d", tp, tp, n)
		}
		devs := make([]*cuda.Device, tp)
		for r := range devs {
			cd, err := openCUDADevice(r)
			if err != nil {
				return nil, nil, err
			}
			devs[r] = cd.d
		}
		g, err := nvls.NewGPUGroup(devs, nvls.GPUConfig{})
		if err != nil {
			return nil, nil, err
		}
		return g.Comms(), g.Close, nil
	}
}

func (b *CUDA) AllGather(comm nvls.Comm, out, in Buf, rows, cols int) {
	if b.failure() != nil {
		return
	}
	hin := make([]float32, in.Len())
	if err := b.Download(hin, in); err != nil {
		return
	}
	n := comm.Size()
	tmp := make([]float32, n*rows*cols)
	if err := comm.AllGather(tmp, hin); err != nil {
		b.fail(err)
		return
	}
	// nvls gathers contiguous rank blocks: interleave them into rows, as the CPU backend does
	o := make([]float32, out.Len())
	for r := 0; r < n; r++ {
		for t := 0; t < rows; t++ {
			copy(o[t*cols*n+r*cols:t*cols*n+(r+1)*cols], tmp[(r*rows+t)*cols:(r*rows+t+1)*cols])
		}
	}
	b.Upload(out, o)
}

// LogProbs: the staged twin of kernels.LogProbs. One rank: everything on the GPU. Several: the row max, the
// sum's subtree and the target's shifted logit each cross the ranks through comm (on the host), then the host
// finishes d ⊖ Log(S) exactly as kernels.LogProbs does.
func (b *CUDA) LogProbs(pr kernels.Profile, out, logits Buf, targets []int32, T, vLocal int, comm nvls.Comm) {
	if b.failure() != nil || T == 0 {
		return
	}
	tp, rank := 1, 0
	if comm != nil {
		tp, rank = comm.Size(), comm.Rank()
	}
	if _, err := kernels.LocalSegments("LogSoftmax", vLocal, tp); err != nil { // the CPU reference's check and error
		b.fail(err)
		return
	}
	V := vLocal * tp
	for t := 0; t < T; t++ {
		if targets[t] < 0 || int(targets[t]) >= V {
			b.fail(fmt.Errorf("kernels: LogProbs: target %d at row %d outside the vocabulary [0, %d)", targets[t], t, V))
			return
		}
	}
	if tp == 1 {
		tg, o, lp := slices.Clone(targets[:T]), cudaPtr(out), cudaPtr(logits)
		b.launch(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
			d, err := cudaStage(b, c, tg)
			if err != nil {
				return err
			}
			return k.LogProbs(c, pr, o, lp, d, T, vLocal)
		})
		return
	}
	var m, S, d cuda.Ptr
	host := func(ptr cuda.Ptr, f func([]float32) error) {
		h := make([]float32, T)
		b.do(func(c *cuda.Ctx, _ *cudakernels.Kernels) error { return cuda.Download(c, h, ptr) })
		if b.failure() != nil {
			return
		}
		if err := f(h); err != nil {
			b.fail(err)
			return
		}
		b.do(func(c *cuda.Ctx, _ *cudakernels.Kernels) error { return cuda.Upload(c, ptr, h) })
	}
	b.do(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		if err := cudaGrow(c, &b.st, &b.stN, int64(3*T)*4); err != nil {
			return err
		}
		m, S, d = b.st, b.st.Add(int64(T)*4), b.st.Add(int64(2*T)*4)
		return k.LogSoftmaxMax(c, m, cudaPtr(logits), T, vLocal, false)
	})
	host(m, func(h []float32) error {
		if err := comm.AllReduceMax(h); err != nil {
			return fmt.Errorf("kernels: LogSoftmax: max all-reduce: %w", err)
		}
		for i := range h {
			if h[i] == 0 {
				h[i] = 0 // +0: the sign of a zero max must not depend on which rank held it
			}
		}
		return nil
	})
	b.do(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		return k.LogSoftmaxSum(c, pr, S, cudaPtr(logits), m, T, vLocal, tp)
	})
	host(S, func(h []float32) error {
		if err := comm.AllReduce(h); err != nil {
			return fmt.Errorf("kernels: LogSoftmax: sum all-reduce: %w", err)
		}
		return nil
	})
	b.do(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		tg, err := cudaStage(b, c, targets[:T])
		if err != nil {
			return err
		}
		return k.LogProbsTarget(c, d, cudaPtr(logits), tg, m, T, vLocal, rank*vLocal)
	})
	hs, hd := make([]float32, T), make([]float32, T)
	b.do(func(c *cuda.Ctx, _ *cudakernels.Kernels) error {
		if err := cuda.Download(c, hs, S); err != nil {
			return err
		}
		return cuda.Download(c, hd, d)
	})
	if b.failure() != nil {
		return
	}
	if err := comm.AllReduce(hd); err != nil { // one owner, zeros elsewhere: exact
		b.fail(fmt.Errorf("kernels: LogProbs: target all-reduce: %w", err))
		return
	}
	res := make([]float32, T)
	for t := range res {
		res[t] = kernels.F32.Round(float32(hd[t] - kernels.Log(hs[t])))
	}
	b.Upload(out, res)
}

// IsGPUUnavailable reports whether err means "no usable GPU" (the caller may fall back to the CPU).
func IsGPUUnavailable(err error) bool { return errors.Is(err, cuda.ErrUnavailable) }

var (
	_ Backend          = (*CUDA)(nil)
	_ NarrowDownloader = (*CUDA)(nil)
	_ AttentionBatcher = (*CUDA)(nil)
	_ profileServer    = (*CUDA)(nil)
)
