package engine

import (
	"bytes"
	"math"
	"testing"

	"bitalign/capture"
	"bitalign/kernels"
)

// TestEncodeRowsParallel: the recorder's chunked, parallel encoding gives encode's bytes, and its fingerprints
// are capture.FingerprintRows of those bytes, at widths whose chunks split the rows anywhere (1 value a row,
// odd widths, a row wider than a chunk) and for every dtype the recorder writes; a flipped value changes its
// row's fingerprint only.
func TestEncodeRowsParallel(t *testing.T) {
	for _, dt := range []capture.DType{capture.BF16, capture.F16, capture.F32} {
		for _, shape := range [][2]int{{1, 1}, {7, 1}, {300, 3}, {257, 1000}, {3, 70001}, {0, 5}} {
			rows, width := shape[0], shape[1]
			xs := make([]float32, rows*width)
			for i := range xs {
				xs[i] = kdt(dt).Round(float32(math.Sin(float64(i)*0.37)) * 3)
			}
			want := encode(dt, xs)
			data, fps := encodeRows(dt, xs, rows, width, false)
			if !bytes.Equal(data, want) || fps != nil {
				t.Fatalf("%s %d×%d: encodeRows differs from encode (first byte %d)", dt, rows, width, firstByteDiff(data, want))
			}
			data, fps = encodeRows(dt, xs, rows, width, true)
			var ref []uint64
			if rows > 0 {
				var err error
				if ref, err = capture.FingerprintRows(want, int64(rows)); err != nil {
					t.Fatal(err)
				}
			}
			if data != nil || len(fps) != rows {
				t.Fatalf("%s %d×%d: %d fingerprints and %d bytes", dt, rows, width, len(fps), len(data))
			}
			for r := range ref {
				if fps[r] != ref[r] {
					t.Fatalf("%s %d×%d: row %d fingerprint %#x, capture.FingerprintRows %#x", dt, rows, width, r, fps[r], ref[r])
				}
			}
			if rows < 2 {
				continue
			}
			xs[width] = kernels.RoundBF16(xs[width] + 1) // row 1 only
			_, flipped := encodeRows(dt, xs, rows, width, true)
			for r := range fps {
				if (flipped[r] != fps[r]) != (r == 1) {
					t.Errorf("%s %d×%d: a value of row 1 changed; row %d's fingerprint changed: %v", dt, rows, width, r, flipped[r] != fps[r])
				}
			}
		}
	}
}

func firstByteDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
