package cudakernels

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"bitalign/capture"
	"bitalign/cuda"
)

// TestFingerprintRowsMatchesCapture: fingerprint_rows gives capture.Fingerprint's value for every row, over
// row lengths around every word and 16-byte boundary, rows at odd offsets and strides (the byte and the
// 4-byte paths), a strided view, a long row (the constants table regrown), and an empty set, in one launch of many sets and in launches of one.
func TestFingerprintRowsMatchesCapture(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(7, 15))
	type setCase struct {
		off, stride, rows, rowBytes int64
	}
	var cases []setCase
	for _, L := range []int64{0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 510, 3072, 3073, 17920} {
		for _, off := range []int64{0, 1, 2, 4, 8, 16} {
			cases = append(cases, setCase{off, L + int64(r.IntN(3))*4, int64(1 + r.IntN(9)), L})
		}
	}
	cases = append(cases, setCase{0, 1 << 20, 3, 607744}, setCase{16, 4096, 5, 1024}, setCase{0, 64, 0, 64})
	var size int64
	offs := make([]int64, len(cases))
	for i, c := range cases {
		offs[i] = size + c.off
		size = offs[i] + c.stride*max(c.rows, 1) + 64
		size = (size + 15) &^ 15
	}
	host := make([]byte, size)
	for i := range host {
		host[i] = byte(r.Uint32())
	}
	d := &dev{g: g}
	defer d.free()
	words := make([]uint32, (size+3)/4)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 4*len(words)), host)
	base := upload(t, d, words)
	var want []uint64
	var sets []FingerprintSet
	for i, c := range cases {
		sets = append(sets, FingerprintSet{Ptr: base + cuda.Ptr(offs[i]), Stride: c.stride, Rows: c.rows, RowBytes: c.rowBytes})
		for row := int64(0); row < c.rows; row++ {
			s := offs[i] + row*c.stride
			want = append(want, capture.Fingerprint(host[s:s+c.rowBytes]))
		}
	}
	out := upload(t, d, make([]uint64, len(want)))
	check := func(what string, got []uint64) {
		t.Helper()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: row %d of %d: gpu %#016x, capture.Fingerprint %#016x", what, i, len(want), got[i], want[i])
			}
		}
	}
	d.run(t, func(c *cuda.Ctx, k *Kernels) error {
		f, err := k.NewFingerprinter()
		if err != nil {
			return err
		}
		defer f.Close(c)
		if err := f.Rows(c, out, sets); err != nil {
			return err
		}
		got := make([]uint64, len(want))
		if err := c.Synchronize(); err != nil {
			return err
		}
		if err := c.CopyDtoH(unsafe.Pointer(&got[0]), out, 8*int64(len(got))); err != nil { // on the device's thread: not DownloadFrom
			return err
		}
		check("one launch", got)
		// One set a launch, into the same slots (offsets by hand).
		if err := c.Memset8(out, 0, 8*int64(len(want))); err != nil {
			return err
		}
		var at int64
		for _, s := range sets {
			if err := f.Rows(c, out+cuda.Ptr(8*at), []FingerprintSet{s}); err != nil {
				return err
			}
			at += s.Rows
		}
		if err := c.Synchronize(); err != nil {
			return err
		}
		if err := c.CopyDtoH(unsafe.Pointer(&got[0]), out, 8*int64(len(got))); err != nil {
			return err
		}
		check("a launch a set", got)
		return nil
	})
}
