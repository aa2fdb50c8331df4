package engine

import (
	"bitalign/capture"
	"bitalign/kernels"
	"bitalign/nvls"
)

// Buf is a buffer of float32 values owned by a Backend (host memory for the CPU backend, device memory for a
// GPU one). Activations, weights and KV caches live in Bufs; only captured tensors are downloaded.
type Buf interface {
	Len() int // number of float32 elements
}

// Backend executes the model's ops. The forward pass (forward.go) only talks to this interface, so a GPU backend
// plugs in without touching the model code. Every op follows docs/arithmetic.md exactly; the CPU backend calls
// package kernels, a GPU backend must give the same bits.
//
// Errors are sticky, as on a device: an op that fails records the error, later ops do nothing, and Err (or the
// next Download) reports the first one. Shapes are in each method's comment; all matrices are row-major.
// A Backend is used by one goroutine (one TP rank).
type Backend interface {
	Name() string // "cpu", "cuda:0", ...
	Err() error   // the first error since the backend was created, or nil

	Alloc(n int) Buf               // n zeroed float32 values
	Free(b Buf)                    // release b (and every view of it); nil is ignored
	View(b Buf, off, n int) Buf    // elements [off, off+n) of b, sharing its memory
	Upload(dst Buf, src []float32) // len(src) == dst.Len()
	// UploadWeights places a weight matrix or a norm weight on the backend in its stored dtype (the CPU backend:
	// a view, no copy) and returns the Buf that Matmul, MatmulPartial, Embed and RMSNorm take as their weight
	// operand (w, table); Len is its element count. Free releases it. Biases are small and go through Upload as
	// float32.
	UploadWeights(w kernels.Weights) Buf
	Download(dst []float32, src Buf) error
	Copy(dst, src Buf) // dst.Len() == src.Len()

	// Embed: table is (V, H), a float32 Buf or an UploadWeights one; out is (len(ids), H),
	// out[t] = round_dt(table[ids[t]]).
	Embed(out, table Buf, ids []int32, H int, dt kernels.DType)
	// Matmul: x is (M, K), w is (N, K) (a float32 Buf or an UploadWeights one: a bf16/f16 weight is widened
	// exactly as it is read), bias is (N) or nil, out is (M, N) = round_dt(x·wᵀ + bias).
	Matmul(p kernels.Profile, out, x, w, bias Buf, M, K, N int, dt kernels.DType)
	// MatmulPartial: this rank's share of a row-parallel matmul whose K is split over tp ranks; x is (M, kLocal),
	// w is (N, kLocal), out (M, N) is the rank's float32 subtree, not rounded. AllReduce finishes the tree, then
	// MatmulFinish adds the bias (N, or nil) and rounds out in place.
	MatmulPartial(p kernels.Profile, out, x, w Buf, M, kLocal, N, rank, tp int)
	MatmulFinish(out, bias Buf, M, N int, dt kernels.DType)
	// RMSNorm: x is (rows, C), w is (C) (a float32 Buf or an UploadWeights one), out is (rows, C).
	RMSNorm(p kernels.Profile, out, x, w Buf, rows, C int, eps float32, dt kernels.DType)
	// RoPE: x and out are (T, heads*hd); row t is rotated for position pos[t] with the (maxPos, hd/2) tables.
	RoPE(out, x Buf, pos []int32, T, heads, hd int, cos, sin Buf, dt kernels.DType)
	// Attention for one sequence: q is (n, heads*hd) at positions start..start+n-1; k and v are (start+n, kvHeads*hd)
	// (the KV cache: every position from 0); out is (n, heads*hd). Query head h reads kv head h/(heads/kvHeads).
	// A query's result never depends on n, start or what else is in the batch (canonical profile).
	Attention(p kernels.Profile, out, q, k, v Buf, start, n, heads, kvHeads, hd int, dt kernels.DType, o AttnOptions)
	// SwiGLU: out[i] = round_dt(round_dt(silu(gate[i]))·up[i]) over n elements.
	SwiGLU(out, gate, up Buf, n int, dt kernels.DType)
	// Residual: out[i] = round_dt(a[i] + b[i]) (dt F32: the unrounded float32 sum).
	Residual(out, a, b Buf, dt kernels.DType)
	// Round: x[i] = round_dt(x[i]) in place.
	Round(x Buf, dt kernels.DType)
	// AllReduce finishes the tree of a row-parallel matmul in place (identical bits on every rank).
	AllReduce(c nvls.Comm, x Buf)
	// AllGather: in is this rank's (rows, cols) block of a (rows, cols·Size) matrix sharded along dim 1; out
	// receives the full matrix on every rank.
	AllGather(c nvls.Comm, out, in Buf, rows, cols int)
	// LogProbs: logits is this rank's (T, vLocal) shard of the vocabulary (columns [rank·vLocal, ...)), targets
	// (T) are global token ids, out (T) receives log p(targets[t]) from the full-vocabulary log-softmax, the same
	// bits on every rank; the row reductions are split over c (nil: one rank holds the whole vocabulary).
	LogProbs(p kernels.Profile, out, logits Buf, targets []int32, T, vLocal int, c nvls.Comm)
}

// AttnSeq is one sequence of a layer's attention: Attention's per-sequence arguments (out, q, the k and v
// caches, start, n).
type AttnSeq struct {
	Out, Q, K, V Buf
	Start, N     int
	KV16         bool // K and V hold bf16 bits (a BF16Cacher's caches), two values a float32 slot
}

// BF16Cacher is a Backend that can keep a profile's KV caches in bf16: half the bytes, and attention reads the
// same bf16 values (the tc profile's caches hold bf16 values already, tc.3), so the same bits. The rank then
// allocates each cache at half the float32 slots, narrows k and v into it (NarrowBF16: n values of src, float32
// holding bf16 values, into dst's n/2 slots) and runs every layer's attention through AttentionBatch with
// AttnSeq.KV16, which must then not refuse.
type BF16Cacher interface {
	BF16Caches(p kernels.Profile, hd int) bool
	NarrowBF16(dst, src Buf, n int)
}

// AttentionBatcher is a Backend that can run the attention of a layer's sequences together (one launch on a
// GPU instead of one a sequence), each with the bits of its own Attention call. ok false (a profile, head dim
// or option it does not batch): the caller calls Attention for each sequence.
type AttentionBatcher interface {
	AttentionBatch(p kernels.Profile, seqs []AttnSeq, heads, kvHeads, hd int, dt kernels.DType, o AttnOptions) (ok bool)
}

// AttnOptions carries deliberate deviations from the canonical attention (fault injection).
type AttnOptions struct {
	FastExp bool // approximate exp in the softmax (the fast-exp fault)
}

// NarrowDownloader is a Backend that can narrow float32 values to bf16 bits where they are (fp.F32ToBF16) and
// download the bits: half the bytes of Download. The recorder uses it for bf16 ops; ok false (the backend cannot,
// e.g. PTX without the kernel) means the caller downloads float32 and narrows on the host, with the same bits.
type NarrowDownloader interface {
	DownloadBF16(dst []uint16, src Buf) (ok bool, err error) // len(dst) == src.Len()
}

// RowFingerprinter is a Backend that fingerprints rows where they are and downloads 8 bytes a row: dst[r] is
// capture.Fingerprint of row r of src (rows × width values) encoded as dt, the bytes the capture would store
// (bf16: fp.F32ToBF16's bits; f32: the float32 bits). ok false (a dtype or buffer it does not handle, PTX
// without the kernel) means the caller downloads the rows and fingerprints them on the host: the same values.
type RowFingerprinter interface {
	FingerprintRows(dst []uint64, src Buf, rows, width int, dt capture.DType) (ok bool, err error) // len(dst) == rows
}

// AsyncDownloader is a Backend that starts copying src's values, encoded as dt (the capture's bytes, as
// RowFingerprinter), into host memory of its own behind the work already queued, and returns without waiting:
// the recorder's full copies overlap the next ops. The backend bounds the memory in flight (StartDownload
// waits for Release when it is used up). ok false: the caller downloads synchronously.
type AsyncDownloader interface {
	StartDownload(src Buf, dt capture.DType) (p PendingDownload, ok bool, err error)
}

// PendingDownload is one AsyncDownloader copy in flight.
type PendingDownload interface {
	// Wait returns the copied bytes once the copy has completed; they stay valid until Release.
	Wait() ([]byte, error)
	// Release gives the host memory back (after Wait, or instead of it when the write is abandoned); once.
	Release()
}
