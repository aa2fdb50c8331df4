package cudakernels

import (
	"fmt"
	"unsafe"

	"bitalign/cuda"
)

// Row fingerprints on the device (fingerprint.cu; docs/capture-format.md, "Fingerprint tensors"): the same
// 64-bit value per row as capture.Fingerprint, so that a fingerprint capture copies 8 bytes a row to the host.

// FingerprintSet is one descriptor of fingerprint_rows: Rows rows of RowBytes bytes each, row r starting at
// Ptr + r·Stride. Its fingerprints go to consecutive slots of the output, after the previous set's.
type FingerprintSet struct {
	Ptr      cuda.Ptr
	Stride   int64
	Rows     int64
	RowBytes int64
}

// fpDesc is fingerprint.cu's FpDesc, field for field (5 × 8 bytes).
type fpDesc struct {
	ptr, stride, rows, first, rowBytes int64
}

// Fingerprinter owns the constants table K (grown to the longest row seen) and the descriptor table of one
// context; not safe for concurrent use (one per goroutine that drives the context).
type Fingerprinter struct {
	k      *Kernels
	consts cuda.Ptr
	nK     int64 // constants in consts
	desc   cuda.Ptr
	ndCap  int
	host   []fpDesc
}

// NewFingerprinter returns a Fingerprinter for c's kernels, or an error if the loaded PTX has no
// fingerprint_rows (PTX built before it).
func (k *Kernels) NewFingerprinter() (*Fingerprinter, error) {
	if k.fn["fingerprint_rows"] == nil || k.fn["fingerprint_consts"] == nil {
		return nil, fmt.Errorf("cudakernels: the loaded PTX has no fingerprint_rows (stale PTX? run make ptx)")
	}
	return &Fingerprinter{k: k}, nil
}

// Close frees the device tables.
func (f *Fingerprinter) Close(c *cuda.Ctx) error {
	var first error
	for _, p := range []cuda.Ptr{f.consts, f.desc} {
		if p != 0 {
			if err := c.Free(p); err != nil && first == nil {
				first = err
			}
		}
	}
	f.consts, f.desc, f.nK, f.ndCap = 0, 0, 0, 0
	return first
}

// Rows writes the fingerprints of every row of sets, in order, to out (device, 8 bytes a row: Σ Rows slots), on
// the context's default stream. The descriptor table is copied synchronously first (a few bytes a set); the
// kernel itself is asynchronous.
func (f *Fingerprinter) Rows(c *cuda.Ctx, out cuda.Ptr, sets []FingerprintSet) error {
	f.host = f.host[:0]
	var total, maxWords int64
	for i, s := range sets {
		if s.Rows < 0 || s.RowBytes < 0 || (s.Rows > 1 && s.Stride < s.RowBytes) {
			return fmt.Errorf("cudakernels: fingerprint set %d: %d rows of %d bytes at stride %d", i, s.Rows, s.RowBytes, s.Stride)
		}
		if s.Rows == 0 {
			continue
		}
		f.host = append(f.host, fpDesc{int64(s.Ptr), s.Stride, s.Rows, total, s.RowBytes})
		total += s.Rows
		maxWords = max(maxWords, (s.RowBytes+3)/4)
	}
	if total == 0 {
		return nil
	}
	if err := f.growConsts(c, maxWords); err != nil {
		return err
	}
	if len(f.host) > f.ndCap {
		if f.desc != 0 {
			if err := c.Free(f.desc); err != nil {
				return err
			}
			f.desc, f.ndCap = 0, 0
		}
		n := max(len(f.host), 2*f.ndCap, 64)
		p, err := c.Alloc(int64(n) * int64(unsafe.Sizeof(fpDesc{})))
		if err != nil {
			return err
		}
		f.desc, f.ndCap = p, n
	}
	if err := c.CopyHtoD(f.desc, unsafe.Pointer(&f.host[0]), int64(len(f.host))*int64(unsafe.Sizeof(fpDesc{}))); err != nil {
		return err
	}
	return f.k.launch(c, planFingerprintRows(total, f.k.lim.SMs), out, f.desc, len(f.host), total, f.consts)
}

// growConsts makes the constants table hold at least n entries (doubling, so a growing row length costs
// O(log) launches).
func (f *Fingerprinter) growConsts(c *cuda.Ctx, n int64) error {
	if n <= f.nK {
		return nil
	}
	n = max(n, 2*f.nK, 4096)
	p, err := c.Alloc(8 * n)
	if err != nil {
		return err
	}
	if err := f.k.launch(c, planElementwise("fingerprint_consts", n), p, n); err != nil {
		c.Free(p)
		return err
	}
	if f.consts != 0 {
		if err := c.Free(f.consts); err != nil {
			return err
		}
	}
	f.consts, f.nK = p, n
	return nil
}

// planFingerprintRows: one warp a row, 8 warps a block, at most 16 blocks an SM (grid-stride beyond).
func planFingerprintRows(rows int64, sms int) Launch {
	const warps = 8
	blocks := (rows + warps - 1) / warps
	blocks = min(blocks, int64(16*max(sms, 1)))
	return Launch{Kernel: "fingerprint_rows", Grid: cuda.Dim3{X: int(blocks)}, Block: cuda.Dim3{X: 32 * warps}}
}
